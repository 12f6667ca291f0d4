"""A LibreTranslate-compatible API, mounted at /libretranslate: LibreTranslate's fields, answers and status codes,
backed by the engines, so that its clients work unmodified. Errors are `{"error": "..."}` (with our `type` too)."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import PurePath
from typing import Any
from urllib.parse import parse_qsl, quote

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from app import detect
from app.deps import ModelsDep
from app.disconnect import unless_disconnected
from app.engine import EngineUnavailable
from app.errors import ENGINE_ERRORS, RETRY_AFTER_S, ClientDisconnected, error, error_kind
from app.files_api import translated_file
from app.jobs import JobError, JobNotDone, UnknownJob
from app.jobs.intake import extensions, job_for, read
from app.jobs.store import ID
from app.languages import UnknownLanguage, cut, english_name
from app.models import Models, UnknownModel
from app.protect.spans import ADDRESSES
from app.schemas import ErrorResponse, scrub
from app.text import Engine, Translation
from app.text.directions import MULTILINGUAL
from app.text.limits import GREEDY, MAX_BEAM, Decoding

# LibreTranslate's own names of its languages and a few more; another code is named by CLDR (english_name).
NAMES = dict(
    item.split("=") for item in (
        "ar=Arabic az=Azerbaijani bg=Bulgarian bn=Bengali ca=Catalan cs=Czech cy=Welsh da=Danish de=German "
        "el=Greek en=English eo=Esperanto es=Spanish et=Estonian eu=Basque fa=Persian fi=Finnish fr=French "
        "ga=Irish gl=Galician he=Hebrew hi=Hindi hr=Croatian hu=Hungarian hy=Armenian id=Indonesian is=Icelandic "
        "it=Italian ja=Japanese ka=Georgian ko=Korean ky=Kyrgyz lt=Lithuanian lv=Latvian mk=Macedonian ms=Malay "
        "mt=Maltese nb=Norwegian nl=Dutch pl=Polish pt=Portuguese ro=Romanian ru=Russian sk=Slovak sl=Slovenian "
        "sq=Albanian sr=Serbian sv=Swedish sw=Swahili th=Thai tl=Tagalog tr=Turkish uk=Ukrainian ur=Urdu "
        "vi=Vietnamese zh=Chinese"
    ).split()
)  # fmt: skip
# LibreTranslate's own codes, which its clients send: Traditional Chinese and Brazilian Portuguese
ALIASES = {"zt": "zh-hant", "pb": "pt-br"}
KINDS = {400: "bad_request", 403: "forbidden", 404: "not_found", 503: "not_ready"}
FIELDS = {  # what /translate reads; /detect reads q and api_key
    "q": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
          "description": "a text, or a list of texts (JSON only)"},
    "source": {"type": "string", "description": 'a language code, or "auto" to detect it'},
    "target": {"type": "string", "description": "a language code"},
    "format": {"type": "string", "enum": ["text", "html"], "description": '"text" (default) or "html"'},
    "alternatives": {"type": ["integer", "string"], "description": "how many other translations to add (0 to 7)"},
    "api_key": {"type": ["string", "null"], "description": "the server's NMT_API_KEY, when it has one"},
    "min_confidence": {"type": ["number", "string"], "description": "nmt-serve's own: withhold sentences whose "
                       "confidence is below this (0 to 1), as /translate's min_confidence"},
}  # fmt: skip


def request_body(*fields: str, required: tuple[str, ...] = ("q",)) -> dict:
    """The OpenAPI request body of an endpoint that reads `fields` (also sent form-encoded, as LibreTranslate's)."""
    schema = {"type": "object", "properties": {f: FIELDS[f] for f in fields}, "required": list(required)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


class LibreError(Exception):
    """A request LibreTranslate would refuse, with its status and message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class LibreRoute(APIRoute):
    """Answers LibreError and the engine's errors as LibreTranslate does: a 400 where we would say 413 or 422."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handle(request)
            except LibreError as e:
                return error(e.status, e.message, KINDS.get(e.status, "http_error"))
            except JobError as e:  # a file's job
                return error(400 if e.status == 422 else e.status, str(e), e.kind)
            except tuple(ENGINE_ERRORS) as e:
                status, kind = error_kind(e)
                if status == 429:
                    return error(429, f"Slowdown: {e}", kind, {"Retry-After": str(RETRY_AFTER_S)})
                return error(400 if status in (413, 422) else status, str(e), kind)

        return route


ERRORS = {status: {"model": ErrorResponse} for status in (400, 403, 413, 429, 500, 503, 504)}
router = APIRouter(route_class=LibreRoute, tags=["LibreTranslate"], responses=ERRORS)


async def fields(request: Request) -> dict[str, Any]:
    """The request's fields as LibreTranslate reads them: a JSON object (with `api_key` from the query string where
    it has none), else the query string's and the form's (urlencoded or multipart), the query string's first, and of
    a field given twice its first value."""
    if media_type(request) == "application/json":
        try:
            values = await request.json()
        except (ValueError, RecursionError):  # not JSON or not UTF-8, or nested too deeply
            values = None
        if not isinstance(values, dict):
            raise LibreError(400, "Invalid JSON format")
        values = {k: scrubbed(v) for k, v in values.items()}
        if "api_key" not in values and "api_key" in request.query_params:  # the key may be in the query string
            values["api_key"] = scrub(request.query_params["api_key"])
        return values
    try:
        form = await form_of(request)
    except HTTPException as e:  # a malformed body; a 413 from the body limit goes on
        if e.status_code != 400:
            raise
        raise LibreError(400, f"Invalid request: {e.detail}") from None
    values: dict[str, Any] = {}
    for source in (request.query_params, form):  # a field given twice: its first value, as Flask's request.values
        for key in source:
            first = next((v for v in source.getlist(key) if isinstance(v, str)), None)
            if key not in values and first is not None:
                values[key] = scrub(first)
    if isinstance(values.get("q"), str):
        values["q"] = "\n".join(values["q"].splitlines())
    return values


def media_type(request: Request) -> str:
    """The request's Content-Type without its parameters, lower case (`application/json`)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def form_of(request: Request) -> FormData:
    """The request's form, an urlencoded body read as UTF-8 as Flask (LibreTranslate) and DeepL read it: Starlette
    reads its raw bytes as Latin-1, so `curl -d 'q=ß'` (not percent-encoded) was "Ã\x9f"."""
    if media_type(request) == "application/x-www-form-urlencoded":
        body = (await request.body()).decode("utf-8", errors="replace")
        return FormData(parse_qsl(body, keep_blank_values=True, errors="replace"))
    return await request.form()


def scrubbed(value: Any) -> Any:
    """A JSON field's value with lone surrogates replaced in its strings, as the request models do (app/schemas/)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [scrub(v) if isinstance(v, str) else v for v in value]
    return value


def authorize(request: Request, values: dict[str, Any]) -> None:
    """403 unless the request carries NMT_API_KEY, as `api_key` or `Authorization: Bearer <key>` (when it is set)."""
    key, given = request.app.state.settings.api_key, values.get("api_key")
    if given is not None and not isinstance(given, str):
        raise LibreError(400, "Invalid request: api_key parameter must be a string")
    if key is None:
        return
    given = given or request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not given:
        raise LibreError(403, "Please contact the server operator to get an API key")
    if not hmac.compare_digest(given.encode(), key.get_secret_value().encode()):
        raise LibreError(403, "Invalid API key")


def texts(request: Request, values: dict[str, Any]) -> list[str]:
    """`q` as a list of texts, within the server's limits (NMT_MAX_BATCH_TEXTS, NMT_MAX_REQUEST_CHARS)."""
    q, settings = values.get("q"), request.app.state.settings
    if not q:
        raise LibreError(400, "Invalid request: missing q parameter")
    if not isinstance(q, str) and not (isinstance(q, list) and all(isinstance(t, str) for t in q)):
        raise LibreError(400, "Invalid request: q parameter must be a string or a list of strings")
    q = [q] if isinstance(q, str) else q
    for size, limit in ((len(q), settings.max_batch_texts), (sum(map(len, q)), settings.max_request_chars)):
        if size > limit:
            raise LibreError(400, f"Invalid request: request ({size}) exceeds text limit ({limit})")
    return q


def field(values: dict[str, Any], name: str, default: str | None = None) -> str:
    """A string field, lower-cased (language codes, format); 400 when it is missing or not a string."""
    value = values.get(name) or default
    if not value or isinstance(value, str) and not value.strip():  # blank: no language (every model's, to pick())
        raise LibreError(400, f"Invalid request: missing {name} parameter")
    if not isinstance(value, str):
        raise LibreError(400, f"Invalid request: {name} parameter must be a string")
    return value.strip().lower()


def alternatives(values: dict[str, Any], engine: Engine) -> int:
    """How many other translations to add: 0 up to one less than the widest beam the engine decodes."""
    n, most = values.get("alternatives", 0), min(MAX_BEAM, engine.limits.max_rows) - 1
    if isinstance(n, float) and n.is_integer():  # a JSON 2.0
        n = int(n)
    if isinstance(n, str):
        try:
            n = int(n.strip())  # as LibreTranslate's int(): "+2" too
        except ValueError:
            pass
    if isinstance(n, bool) or not isinstance(n, int):
        raise LibreError(400, "Invalid request: alternatives parameter is not a number")
    if n > most:
        raise LibreError(400, f"Invalid request: alternatives parameter must be <= {most}")
    return max(0, n)


def min_confidence(values: dict[str, Any]) -> float | None:
    """nmt-serve's extra field: withhold sentences below this confidence (default NMT_MIN_CONFIDENCE)."""
    value = values.get("min_confidence")
    if value is None:
        return None
    try:
        floor = float(value) if not isinstance(value, bool) else float("nan")
    except (TypeError, ValueError):
        floor = float("nan")
    if not 0.0 <= floor <= 1.0:  # NaN too
        raise LibreError(400, "Invalid request: min_confidence parameter must be a number from 0 to 1")
    return floor


def meant(code: str) -> str:
    """The language a code LibreTranslate's clients send names, as the models read it: `zt` is `zh-hant`."""
    return ALIASES.get(code, code)


def listed(engine: Engine) -> dict[str, str]:
    """A many-to-many model's codes, each with the name LibreTranslate's API lists it by: its short name, written as a
    BCP 47 tag is (`ace-Arab` for NLLB's `ace_Arab`, as `az-Arab` is) where that names the code too."""
    out = {}
    for code, short in engine.codes.names.items():
        out[code], tag = short, short.replace("_", "-")
        try:
            if tag != short and engine.codes.resolve(tag) == code:
                out[code] = tag
        except UnknownLanguage:
            pass
    return out


def pairs(models: Models) -> dict[tuple[str, str], str]:
    """(source, target) -> the first loaded model (in NMT_MODELS order) that translates it."""
    out: dict[tuple[str, str], str] = {}
    for model in models.names:
        langs = models.languages(model)
        # neither a model without languages in its metadata nor a many-to-many one (`many`) has a pair
        if models.state(model) == "ready" and not {"unknown", MULTILINGUAL} & set(langs.values()):
            out.setdefault((langs["source"].lower(), langs["target"].lower()), model)
    return out


def many(models: Models) -> list[Engine]:
    """The loaded many-to-many models, in NMT_MODELS order."""
    return [models.engines[m] for m in models.names if models.state(m) == "ready" and models.engines[m].codes]


def targets(models: Models) -> dict[str, list[str]]:
    """Each language the loaded models translate from (pair models' codes, many-to-many models' short names), in
    NMT_MODELS order, with the languages it translates into; 503 while they load."""
    out: dict[str, set[str]] = {}
    for source, target in pairs(models):
        out.setdefault(source, set()).add(target)
    for engine in many(models):
        names = list(listed(engine).values())
        for source in names:
            out.setdefault(source, set()).update(names)
    for source, into in out.items():
        into.discard(source)
    if not out and "loading" in models.states().values():
        raise EngineUnavailable(models.not_ready(models.default))
    return {code: sorted(into) for code, into in out.items()}  # empty when no model's metadata names its languages


def codes(models: Models) -> tuple[str, ...]:
    """Every language the loaded models translate from or into, in NMT_MODELS order; 503 while they load."""
    into = targets(models)
    return tuple(dict.fromkeys([*into, *(t for ts in into.values() for t in ts)]))


def pick(models: Models, source: str, target: str) -> Engine:
    """The engine that translates source into target: the first model, in NMT_MODELS order, that does (as /translate
    and DeepL's routes choose); LibreTranslate's 400 for a language or a pair not served."""
    wanted, engine = (meant(source), meant(target)), None
    try:
        if all(wanted) and "auto" not in wanted:  # models.pick's "auto" (or nothing) is any source, and no target
            engine = models.pick(None, *wanted)
    except UnknownModel:
        pass
    if engine is not None and not (engine.codes and len({engine.codes.resolve(c) for c in wanted}) == 1):  # not de->de
        return engine
    for code in (source, target):
        if not known(models, meant(code)):
            raise LibreError(400, f"{cut(code)} is not supported")  # as LibreTranslate says, a long name cut
    raise LibreError(
        400, f"{name(meant(target))} ({target}) is not available as a target language from {name(meant(source))} "
        f"({source})",
    )  # fmt: skip


def known(models: Models, code: str) -> bool:
    """Whether a loaded model translates from or into the language `code` names (in any spelling /translate reads)."""
    ready = [models.engines[m].directions for m in models.names if models.state(m) == "ready"]
    return code not in ("", "auto") and any(d.serves(code, None) or d.serves(None, code) for d in ready)


def name(code: str) -> str:
    return NAMES.get(code) or english_name(code)


def others(translation: str, hypotheses: list[str]) -> list[str]:
    """The n-best list's other translations, each once, as LibreTranslate's `alternatives` (a hypothesis that differs
    from another only by the whitespace at its ends, where the model wrote a space before </s>, is the same)."""
    return [h for h in dict.fromkeys(h.strip() for h in hypotheses) if h and h != translation.strip()]


@router.post("/translate", openapi_extra=request_body(*FIELDS, required=("q", "source", "target")))
async def translate(request: Request, models: ModelsDep) -> dict[str, Any]:
    """Translate `q` (a text or a list) from `source` (or `"auto"`) into `target`, with `alternatives` if asked."""
    values = await fields(request)
    authorize(request, values)
    q = texts(request, values)
    source, target, fmt = field(values, "source"), field(values, "target"), field(values, "format", "text")
    detected = None
    if source == "auto":
        read = [detect.visible(t) for t in q] if fmt == "html" else q  # the words, not the markup
        language, confidence = (await detect.detect(read, codes(models)))[0]
        source, detected = language, {"confidence": confidence, "language": language}
    engine = pick(models, source, target)
    if fmt not in ("text", "html"):
        raise LibreError(400, f"{cut(fmt)} format is not supported")
    n = alternatives(values, engine)
    decoding = Decoding(beam_size=n + 1, num_hypotheses=n + 1) if n and fmt == "text" else GREEDY  # html: none, as LT
    decoding = replace(decoding, source=meant(source), target=meant(target))  # a many-to-many model's direction
    floor = min_confidence(values)
    out = await unless_disconnected(
        request.receive,
        engine.translate(q, decoding=decoding, format=fmt, min_confidence=floor, cut_long=True, protect=ADDRESSES),
    )
    return answer(out, isinstance(values["q"], str), detected, n)


def answer(out: list[Translation], one: bool, detected: dict[str, Any] | None, n: int) -> dict[str, Any]:
    """`translatedText`, with `detectedLanguage` for "auto" and `alternatives` when asked: one each for one text,
    lists for a list (the detected language repeated, as LibreTranslate's). nmt-serve adds `confidence` and `flags`
    (and `withheld` where min_confidence left sentences out), which LibreTranslate's clients ignore."""
    body: dict[str, Any] = {"translatedText": out[0].text if one else [t.text for t in out]}
    judged = {
        "confidence": [None if t.quality is None else t.quality.confidence for t in out],
        "flags": [[] if t.quality is None else t.quality.flags for t in out],
        "withheld": [t.withheld for t in out] if any(t.withheld for t in out) else None,
    }  # fmt: skip
    body |= {key: values[0] if one else values for key, values in judged.items() if values is not None}
    if one and body["confidence"] is None:  # a text the model was given nothing of: no confidence, as /translate's
        del body["confidence"]
    if detected:
        body["detectedLanguage"] = detected if one else [detected] * len(out)
    if n:
        alts = [others(t.text, [h.text for h in t.hypotheses]) for t in out]
        body["alternatives"] = alts[0] if one else alts
    return body


@router.post("/detect", openapi_extra=request_body("q", "api_key"))
async def detect_language(request: Request, models: ModelsDep) -> list[dict[str, Any]]:
    """The likeliest languages of `q`, among those the models serve, with a confidence from 0 to 100."""
    values = await fields(request)
    authorize(request, values)
    ranked = await detect.detect(texts(request, values), codes(models))
    return [{"confidence": confidence, "language": language} for language, confidence in ranked]


@router.get("/languages")
async def languages(models: ModelsDep) -> list[dict[str, Any]]:
    """Each language the models translate from or into, with the languages it translates into."""
    into = targets(models)
    return [{"code": code, "name": name(code), "targets": into.get(code, [])} for code in codes(models)]


@router.get("/frontend/settings")
async def frontend_settings(request: Request, models: ModelsDep) -> dict[str, Any]:
    """What LibreTranslate's web page and clients read first: limits, whether a key is needed, default languages."""
    settings = request.app.state.settings
    default = next((t for _, t in pairs(models)), "")  # the first pair model's target, else a many-to-many model's
    saved = [listed(e)[e.tokenizer.default_languages["target"]] for e in many(models)]
    target = default or next(iter(saved), "")
    keyed = settings.api_key is not None
    return {
        "charLimit": settings.max_request_chars, "frontendTimeout": 500, "apiKeys": keyed, "keyRequired": keyed,
        "suggestions": False, "filesTranslation": True, "supportedFilesFormat": extensions(),
        "language": {
            "source": {"code": "auto", "name": "Auto Detect"}, "target": {"code": target, "name": name(target)},
        },
    }  # fmt: skip


FAILED = {"input_too_long": 400, "validation_error": 400, "not_found": 400, "queue_full": 429, "not_ready": 503,
          "out_of_memory": 503, "timeout": 504}  # fmt: skip
FILE_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "source", "target"], "properties": {
        "file": {"type": "string", "format": "binary", "description": "the file; its name's extension tells its format"},
        "source": FIELDS["source"], "target": FIELDS["target"], "api_key": FIELDS["api_key"],
    }}}}}}  # fmt: skip


@router.post("/translate_file", openapi_extra=FILE_BODY)
async def translate_file(request: Request, models: ModelsDep) -> Any:
    """Translate a file from `source` (or `"auto"`) into `target`; answered once it is translated, with the URL to
    download it from (`translatedFileUrl`)."""
    try:
        values = await fields(request)
        authorize(request, values)
        file = (await request.form()).get("file")  # the form fields() read (a JSON body has none)
        if not isinstance(file, UploadFile):
            raise LibreError(400, "Invalid request: missing file parameter")
        source, target = field(values, "source"), field(values, "target")
        if not file.filename:
            raise LibreError(400, "Invalid request: empty file")
        if PurePath(file.filename).suffix.lower() not in extensions():
            raise LibreError(
                400, f"Invalid request: file format not supported; the formats are {', '.join(extensions())}"
            )
        jobs = request.app.state.jobs
        upload = await read(await file.read(), file.filename, None, jobs.limits, jobs.settings.max_request_chars)
    finally:
        await request.close()  # the upload's spooled file
    if source == "auto":
        source = (await detect.detect([upload.sample()], codes(models)))[0][0]
    engine = pick(models, source, target)
    job = await jobs.submit(job_for(upload, engine, meant(source), meant(target), [], origin="libretranslate"),
                            upload.data)  # fmt: skip
    try:
        job = await unless_disconnected(request.receive, jobs.finished(job.id))
    except ClientDisconnected:
        await jobs.delete(job.id)
        raise
    if job.status == "failed":  # as /translate answers the same failure (LibreTranslate's 400 for our 413 and 422)
        return error(FAILED.get(job.error_type, 500), job.error or "the file could not be translated", job.error_type)
    # the name percent-encoded: Starlette puts a path parameter in as it is, and a space, "#" or "ü" breaks the URL
    url = request.url_for("libretranslate_download_file", filename=quote(f"{job.id}.{job.output_name}", safe=""))
    return {"translatedFileUrl": str(url)}


@router.get("/download_file/{filename}", name="libretranslate_download_file", response_class=Response,
            responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": ErrorResponse}})  # fmt: skip
async def download_file(request: Request, filename: str) -> Response:
    """A file /translate_file translated, by the name in its `translatedFileUrl` (until NMT_JOB_RETENTION_S)."""
    job_id = filename.split(".", 1)[0].lower()
    if not ID.match(job_id):
        raise LibreError(400, "Invalid filename")
    try:
        job, data = await request.app.state.jobs.output(job_id)
    except (UnknownJob, JobNotDone):  # a name of a file that was never translated, or no longer kept
        job = None
    if job is None or job.origin != "libretranslate":
        raise LibreError(404, f"there is no translated file {filename}: files are kept for NMT_JOB_RETENTION_S")
    return translated_file(job, data)


@router.post("/suggest")
async def suggest() -> None:
    """Suggestions are not collected here: LibreTranslate's answer when they are disabled."""
    raise LibreError(403, "Suggestions are disabled on this server.")
