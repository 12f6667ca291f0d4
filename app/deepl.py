"""A DeepL-compatible API (v2), mounted at /deepl (and at /v2, where DeepL's own server has it): DeepL's fields,
answers, status codes and language codes, backed by the engines and the glossary store, so that DeepL's clients
(`deepl` for Python, `deepl-node`) work unmodified with this server as their server URL. Errors are
`{"message": ...}`, DeepL's shape, with our `type` beside it."""

from __future__ import annotations

import hmac
import math
import re
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.background import BackgroundTask
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from app import detect
from app import glossaries as g
from app.deps import ModelsDep
from app.disconnect import unless_disconnected
from app.engine import Engine, EngineUnavailable
from app.engine.limits import GREEDY
from app.errors import ENGINE_ERRORS, RETRY_AFTER_S, error_kind
from app.files import FORMATS
from app.files_api import disposition
from app.html import ignoring
from app.jobs import Job, JobError, Runner, UnknownJob
from app.jobs.intake import job_for, read
from app.libretranslate import NAMES, scrubbed, targets
from app.models import Models, UnknownModel
from app.schemas import scrub

CHARACTER_LIMIT = 10**12  # what /v2/usage reports: no quota here
MAX_GLOSSARY_IDS = 5  # glossary_ids, as DeepL's
REGIONS = {  # the target codes DeepL lists for a language with variants, and their names
    "en": {"EN-GB": "English (British)", "EN-US": "English (American)"},
    "pt": {"PT-BR": "Portuguese (Brazilian)", "PT-PT": "Portuguese (European)"},
}
LISTS = {"text", "glossary_ids", "ignore_tags", "non_splitting_tags", "splitting_tags", "custom_instructions"}
SPLIT = {"0": "none", "1": "sentences", "nonewlines": "sentences"}
FORMALITY = {"default", "more", "less", "prefer_more", "prefer_less"}
TRUE, FALSE = {"1", "true"}, {"0", "false"}


class DeepLError(Exception):
    """A request DeepL would refuse: its status and message."""

    def __init__(self, status: int, message: str, kind: str = "bad_request"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def answer(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """DeepL's error body, `{"message"}`, with our `type` beside it."""
    return JSONResponse({"message": message, "type": kind}, status_code=status, headers=headers)


def speaks(path: str) -> bool:
    """Whether a path is the DeepL API's, whose errors are DeepL's shape (the 404s and 405s of unknown paths too)."""
    return path.startswith(("/deepl/", "/v2/"))


class DeepLRoute(APIRoute):
    """Answers DeepLError, the glossary store's and the engine's errors as DeepL does: 400 where we would say 422,
    456 when the glossary quota is reached."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handle(request)
            except DeepLError as e:
                return answer(e.status, e.message, e.kind)
            except g.GlossaryError as e:
                status = {422: 400}.get(e.status, e.status)
                return answer(456 if isinstance(e, g.TooManyGlossaries) else status, str(e), e.kind)
            except JobError as e:  # a document's job
                return answer({422: 400}.get(e.status, e.status), str(e), e.kind)
            except tuple(ENGINE_ERRORS) as e:
                status, kind = error_kind(e)
                retry = {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None
                return answer(400 if status == 422 else status, str(e), kind, retry)
            except HTTPException as e:  # the body limit, counted as the body arrives
                if e.status_code != 413:
                    raise
                return answer(413, str(e.detail), "body_too_large")

        return route


def authorize(request: Request) -> None:
    """403 unless the request carries NMT_API_KEY as `Authorization: DeepL-Auth-Key <key>` (or `Bearer <key>`), when
    the server has a key; without one, any key (DeepL's clients insist on one) or none."""
    key = request.app.state.settings.api_key
    if key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() not in ("deepl-auth-key", "bearer") or not given.strip():
        raise DeepLError(403, "no key: send `Authorization: DeepL-Auth-Key <key>` with the server's key", "forbidden")
    if not hmac.compare_digest(given.strip().encode(), key.get_secret_value().encode()):
        raise DeepLError(403, "the key in `Authorization: DeepL-Auth-Key <key>` is wrong", "forbidden")


STATUSES = (400, 403, 404, 413, 415, 429, 456, 500, 503, 504)
ERROR_SCHEMA = {
    "type": "object", "required": ["message"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"}},
}  # fmt: skip
ERRORS = {
    s: {"description": "DeepL's error", "content": {"application/json": {"schema": ERROR_SCHEMA}}} for s in STATUSES
}
router = APIRouter(route_class=DeepLRoute, tags=["DeepL"], responses=ERRORS, dependencies=[Depends(authorize)])


def request_body(properties: dict[str, Any], required: list[str]) -> dict:
    """The OpenAPI request body of an endpoint that reads these fields, as JSON or form-encoded (as DeepL's)."""
    schema = {"type": "object", "properties": properties, "required": required}
    content = {"application/json": {"schema": schema}, "application/x-www-form-urlencoded": {"schema": schema}}
    return {"requestBody": {"required": True, "content": content}}


STRING, STRINGS = {"type": "string"}, {"type": "array", "items": {"type": "string"}}
TRANSLATE_FIELDS = {
    "text": {"oneOf": [STRINGS, STRING]}, "source_lang": STRING, "target_lang": STRING, "context": STRING,
    "split_sentences": {"type": "string", "enum": list(SPLIT)}, "preserve_formatting": {"type": ["boolean", "string"]},
    "formality": {"type": "string", "enum": sorted(FORMALITY)}, "glossary_id": STRING, "glossary_ids": STRINGS,
    "tag_handling": {"type": "string", "enum": ["html", "xml"]}, "ignore_tags": {"oneOf": [STRINGS, STRING]},
    "show_billed_characters": {"type": ["boolean", "string"]},
}  # fmt: skip
GLOSSARY_FIELDS = {
    "name": STRING, "source_lang": STRING, "target_lang": STRING, "entries": STRING,
    "entries_format": {"type": "string", "enum": ["tsv", "csv"]},
}  # fmt: skip


# ---- reading a request -----------------------------------------------------------------------------------------


async def fields(request: Request) -> dict[str, Any]:
    """The request's fields: a JSON object, else the form's (urlencoded or multipart) over the query string's, with
    the list fields (`text`, `glossary_ids`, the tag lists) as lists."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
        if not await request.body():
            return {}
        try:
            values = await request.json()
        except (ValueError, RecursionError):  # not JSON or not UTF-8, or nested too deeply
            values = None
        if not isinstance(values, dict):
            raise DeepLError(400, "the body is not a JSON object; send the fields as one, or form-encoded")
        return {k: scrubbed(v) for k, v in values.items()}
    try:
        form = await request.form()
    except HTTPException as e:
        if e.status_code != 400:
            raise
        raise DeepLError(400, f"the form cannot be read: {e.detail}") from None
    out: dict[str, Any] = {}
    for source in (request.query_params, form):
        for key in source:
            values = [scrub(v) for v in source.getlist(key) if isinstance(v, str)]
            if values:
                out[key] = values if key in LISTS else values[-1]
    return out


def string(values: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        if required:
            raise DeepLError(400, f"Parameter '{name}' not specified.")
        return None
    if not isinstance(value, str):
        raise DeepLError(400, f"Parameter '{name}' must be a string.")
    return value


def strings(values: dict[str, Any], name: str) -> list[str]:
    """A list field: a JSON list of strings, or a string of comma-separated items (as the clients send tag lists)."""
    value = values.get(name)
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise DeepLError(400, f"Parameter '{name}' must be a list of strings.")
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def flag(values: dict[str, Any], name: str) -> bool:
    value = values.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
        return value.strip().lower() in TRUE
    raise DeepLError(400, f"Value for '{name}' not supported: send 0 or 1 (true or false).")


def choice(values: dict[str, Any], name: str, allowed: set[str]) -> str | None:
    value = values.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).lower() not in allowed:
        raise DeepLError(400, f"Value for '{name}' not supported: send one of {', '.join(sorted(allowed))}.")
    return str(value).lower()


def texts(values: dict[str, Any]) -> list[str]:
    """`text` as a list."""
    text = values.get("text")
    if text is None or text == []:
        raise DeepLError(400, "Parameter 'text' not specified.")
    text = [text] if isinstance(text, str) else text
    if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
        raise DeepLError(400, "Parameter 'text' must be a string or a list of strings.")
    return text


def within_limits(request: Request, text: list[str]) -> None:
    """413 for more texts or characters than the server takes (NMT_MAX_BATCH_TEXTS, NMT_MAX_REQUEST_CHARS)."""
    settings = request.app.state.settings
    if len(text) > settings.max_batch_texts:
        raise DeepLError(
            413, f"the request has {len(text)} texts; the limit is {settings.max_batch_texts} a request", "too_large"
        )
    if (chars := sum(map(len, text))) > settings.max_request_chars:
        raise DeepLError(
            413, f"the texts have {chars} characters in all; the limit is {settings.max_request_chars} a request "
            "(NMT_MAX_REQUEST_CHARS): send the rest in another request", "too_large",
        )  # fmt: skip


# ---- languages -------------------------------------------------------------------------------------------------


def base(code: str) -> str:
    """A DeepL code's language: `EN-GB` -> `en`, `ZH-HANT` -> `zh`."""
    return re.split("[-_]", code.strip().lower())[0]


def deepl_code(code: str) -> str:
    return code.upper()


def name(code: str) -> str:
    return NAMES.get(base(code), code)


def sources(models: Models) -> list[str]:
    """The languages (their DeepL codes' languages, lower case) the loaded models translate from."""
    return list(dict.fromkeys(base(c) for c in targets(models)))


def pairs(models: Models) -> list[tuple[str, str]]:
    """(source, target) of every language pair the loaded models translate, as base codes."""
    into = targets(models)
    return list(dict.fromkeys((base(s), base(t)) for s, ts in into.items() for t in ts if base(s) != base(t)))


def engine_for(models: Models, source: str, target: str) -> tuple[Engine, str]:
    """The engine that translates `source` into `target` (DeepL codes), and the target as it names it: a many-to-many
    model reads the variant (`pt-br`, `zh-hant`), a pair model the language."""
    why = None
    for code in dict.fromkeys([target.lower(), base(target)]):
        try:
            return models.pick(None, base(source), code), code
        except UnknownModel as e:
            why = why or str(e)
    if "loading" in models.states().values():
        raise EngineUnavailable(f"no model loaded so far translates {source} into {target}; others are still loading")
    served = {c for pair in pairs(models) for c in pair}
    if base(target) not in served:
        raise DeepLError(400, f"Value for 'target_lang' not supported: {target} ({why})")
    raise DeepLError(400, f"no model here translates {source.upper()} into {target.upper()} ({why})")


# ---- glossaries in a translation -------------------------------------------------------------------------------


def glossary_ids(values: dict[str, Any], source: str | None) -> list[str]:
    """The glossaries a request names: `glossary_id`, or up to MAX_GLOSSARY_IDS in `glossary_ids`."""
    one, several = string(values, "glossary_id"), strings(values, "glossary_ids")
    if one and several:
        raise DeepLError(400, "glossary_id and glossary_ids cannot be used together; send one of them")
    ids = [one] if one else several
    if len(ids) > MAX_GLOSSARY_IDS:
        raise DeepLError(400, f"glossary_ids has {len(ids)} glossaries; the limit is {MAX_GLOSSARY_IDS}")
    if ids and source is None:
        raise DeepLError(400, "Use of a glossary requires the source_lang parameter to be set.")
    return ids


async def glossary_terms(request: Request, ids: list[str], source: str, target: str) -> tuple[tuple[str, str], ...]:
    """The entries of the glossaries, in order; each one's languages must be the request's."""
    store: g.GlossaryStore = request.app.state.glossaries
    found = []
    for glossary_id in ids:
        glossary = await store.get(glossary_id)
        if not (g.same(glossary.source_lang, source) and g.same(glossary.target_lang, target)):
            raise DeepLError(
                400, f"the glossary {glossary_id} is {glossary.source_lang.upper()}->{glossary.target_lang.upper()}; "
                f"the request is {source.upper()}->{target.upper()} (the glossary's pair must be the request's)",
            )  # fmt: skip
        found.append(glossary.entries)
    return g.terms(*found)


# ---- the endpoints ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """What a /v2/translate request asks, read and checked."""

    texts: list[str]
    source: str | None
    target: str
    html: bool
    split: str  # /translate's
    billed: bool  # add billed_characters
    context: str | None
    ignored: set[str]  # ignore_tags
    glossary_ids: list[str]


def asked(request: Request, values: dict[str, Any]) -> Asked:
    """The request's fields, each checked as DeepL checks it (400), then its size (413)."""
    items, target, source = texts(values), string(values, "target_lang", required=True), string(values, "source_lang")
    html = choice(values, "tag_handling", {"html", "xml"}) is not None
    split = SPLIT[choice(values, "split_sentences", set(SPLIT)) or ("nonewlines" if html else "1")]
    flag(values, "preserve_formatting")  # the formatting is never corrected here: always preserved
    if choice(values, "formality", FORMALITY) in ("more", "less"):
        raise DeepLError(
            400, f"'formality' is not supported for given 'target_lang' {target}: no model here has formality; send "
            "prefer_more or prefer_less to fall back to the default",
        )  # fmt: skip
    for unsupported in ("style_id", "translation_memory_id"):
        if values.get(unsupported):
            raise DeepLError(400, f"{unsupported}: style rules and translation memories are not available here")
    ignored = {t.lower() for t in strings(values, "ignore_tags")} if html else set()
    out = Asked(
        items, source, target, html, split, flag(values, "show_billed_characters"), string(values, "context"),
        ignored, glossary_ids(values, source),
    )  # fmt: skip
    within_limits(request, items)
    return out


@router.post("/v2/translate", openapi_extra=request_body(TRANSLATE_FIELDS, ["text", "target_lang"]))
async def translate(request: Request, models: ModelsDep) -> dict[str, Any]:
    """Translate `text` (one or a list) from `source_lang` (or the detected language) into `target_lang`."""
    a = asked(request, await fields(request))
    source = a.source  # else detected, the context helping (it is not translated)
    source = source or (await detect.detect([*a.texts, a.context or ""], tuple(sources(models)) or ("en",)))[0][0]
    engine, into = engine_for(models, source, a.target)
    glossary = await glossary_terms(request, a.glossary_ids, source, a.target) if a.glossary_ids else ()
    decoding = replace(GREEDY, glossary=glossary, source=base(source), target=into)
    marked = [ignoring(t, a.ignored) if a.ignored else (t, "") for t in a.texts]
    out = await unless_disconnected(
        request.receive,
        engine.translate([t for t, _ in marked], decoding=decoding, split=a.split, format="html" if a.html else "text"),
    )
    request.app.state.deepl_characters = characters(request) + sum(map(len, a.texts))
    results = []
    for text, (_, marker), t in zip(a.texts, marked, out, strict=True):
        translated = t.text.replace(" " + marker, "") if marker else t.text
        result = {"detected_source_language": deepl_code(base(source)), "text": translated}
        results.append(result | ({"billed_characters": len(text)} if a.billed else {}))
    return {"translations": results}


def characters(request: Request) -> int:
    """The characters this server process has translated through this API."""
    return getattr(request.app.state, "deepl_characters", 0)


@router.get("/v2/languages")
async def languages(
    request: Request, models: ModelsDep, kind: Annotated[str | None, Query(alias="type")] = None
) -> list[dict[str, Any]]:
    """The languages the models translate from (`type=source`, the default) or into (`type=target`)."""
    values = await fields(request)  # DeepL's Python client sends `type` in a GET's form body
    kind = choice({"type": kind or values.get("type")}, "type", {"source", "target"}) or "source"
    if kind == "source":
        return [{"language": deepl_code(c), "name": name(c)} for c in sources(models)]
    out = []
    for code in dict.fromkeys(t for _, t in pairs(models)):
        variants = REGIONS.get(code, {deepl_code(code): name(code)})
        out += [{"language": v, "name": n, "supports_formality": False} for v, n in variants.items()]
    return out


@router.get("/v2/usage")
async def usage(request: Request) -> dict[str, int]:
    """The characters this server process has translated through this API, and a limit never reached."""
    return {"character_count": characters(request), "character_limit": CHARACTER_LIMIT}


@router.get("/v2/glossary-language-pairs")
async def glossary_language_pairs(models: ModelsDep) -> dict[str, list[dict[str, str]]]:
    """The language pairs a glossary may have: those the models translate."""
    return {"supported_languages": [{"source_lang": s, "target_lang": t} for s, t in pairs(models)]}


@router.post("/v2/glossaries", status_code=201, openapi_extra=request_body(GLOSSARY_FIELDS, list(GLOSSARY_FIELDS)))
async def create_glossary(request: Request, models: ModelsDep) -> dict[str, Any]:
    """Store a glossary of `entries` (TSV, or CSV with `entries_format=csv`) for a pair the models translate."""
    values = await fields(request)
    name_, entries = string(values, "name", required=True), string(values, "entries", required=True)
    source = base(string(values, "source_lang", required=True))
    target = base(string(values, "target_lang", required=True))
    entries_format = choice(values, "entries_format", {"tsv", "csv"}) or "tsv"
    if (source, target) not in pairs(models):
        if "loading" in models.states().values():
            raise EngineUnavailable("the models are still loading; create the glossary once they are ready")
        listed = ", ".join(f"{s}->{t}" for s, t in pairs(models)) or "none"
        raise DeepLError(400, f"Unsupported glossary language pair {source}->{target}: the pairs served are {listed}")
    store: g.GlossaryStore = request.app.state.glossaries
    glossary = await store.create(name_, source, target, g.parse(entries, entries_format, source, target))
    return glossary.info()


@router.get("/v2/glossaries")
async def list_glossaries(request: Request) -> dict[str, list[dict[str, Any]]]:
    """Every stored glossary, without its entries."""
    return {"glossaries": [glossary.info() for glossary in await request.app.state.glossaries.list()]}


@router.get("/v2/glossaries/{glossary_id}")
async def get_glossary(request: Request, glossary_id: str) -> dict[str, Any]:
    """One glossary, without its entries."""
    return (await request.app.state.glossaries.get(glossary_id, entries=False)).info()


TSV = "text/tab-separated-values"


@router.get(
    "/v2/glossaries/{glossary_id}/entries", response_class=Response,
    responses={200: {"description": "the entries, one `source<TAB>target` a line", "content": {TSV: {}}}},
)  # fmt: skip
async def glossary_entries(request: Request, glossary_id: str) -> Response:
    """One glossary's entries as TSV (the only format DeepL serves them in: 415 for an `Accept` without it)."""
    accept = request.headers.get("accept", "")
    wanted = {part.split(";")[0].strip().lower() for part in accept.split(",")} - {""}
    if wanted and not wanted & {TSV, "text/*", "*/*"}:
        raise DeepLError(415, f"glossary entries are served as {TSV}; the Accept header allows {accept}", "unsupported")
    glossary = await request.app.state.glossaries.get(glossary_id)
    return Response(glossary.tsv(), media_type=f"{TSV}; charset=utf-8")


@router.delete("/v2/glossaries/{glossary_id}", status_code=204, response_class=Response)
async def delete_glossary(request: Request, glossary_id: str) -> Response:
    """Delete one glossary."""
    await request.app.state.glossaries.delete(glossary_id)
    return Response(status_code=204)


# ---- documents (app/jobs) --------------------------------------------------------------------------------------

STATUS = {"queued": "queued", "running": "translating", "done": "done", "failed": "error"}
DOCUMENT_FIELDS = {
    "file": {"type": "string", "format": "binary"}, "target_lang": STRING, "source_lang": STRING, "filename": STRING,
    "glossary_id": STRING, "glossary_ids": STRING, "formality": {"type": "string", "enum": sorted(FORMALITY)},
    "output_format": STRING,
}  # fmt: skip
DOCUMENT_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "properties": DOCUMENT_FIELDS, "required": ["file", "target_lang"]}}}}}  # fmt: skip
KEY_BODY = request_body({"document_key": STRING}, ["document_key"])
FILE = {200: {"description": "the translated document", "content": {"application/octet-stream": {}}}}


@router.post("/v2/document", openapi_extra=DOCUMENT_BODY)
async def upload_document(request: Request, models: ModelsDep) -> dict[str, str]:
    """Upload a document to translate into `target_lang`: its id and the key that reads its status and result."""
    try:
        values = await fields(request)
        file = (await request.form()).get("file")  # the form fields() read (a JSON body has none)
        target, source = string(values, "target_lang", required=True), string(values, "source_lang")
        if not isinstance(file, UploadFile):
            raise DeepLError(400, "Parameter 'file' not specified.")
        if choice(values, "formality", FORMALITY) in ("more", "less"):
            raise DeepLError(400, f"'formality' is not supported for given 'target_lang' {target}: no model has it")
        ids = glossary_ids(values, source)
        jobs: Runner = request.app.state.jobs
        name = string(values, "filename") or file.filename
        upload = await read(await file.read(), name, None, jobs.limits, jobs.settings.max_request_chars)
    finally:
        await request.close()  # the upload's spooled file
    wanted = (string(values, "output_format") or upload.format.name).lower().lstrip(".")
    if wanted not in {upload.format.name, *(e.lstrip(".") for e in upload.format.extensions)}:
        raise DeepLError(400, f"output_format {wanted} is not supported: a {upload.format.name} file is translated "
                         f"into a {upload.format.name} file")  # fmt: skip
    source = source or (await detect.detect([upload.sample()], tuple(sources(models)) or ("en",)))[0][0]
    engine, into = engine_for(models, source, target)
    if ids:
        await glossary_terms(request, ids, source, target)  # each one's pair must be the request's
    key = secrets.token_hex(32).upper()
    job = await jobs.submit(job_for(upload, engine, base(source), into, ids, origin="deepl"), upload.data, key)
    return {"document_id": job.id, "document_key": key}


async def document(request: Request, document_id: str) -> Job:
    """The job `document_id` names, if `document_key` is its key: DeepL's 404 otherwise."""
    key = string(await fields(request), "document_key", required=True)
    jobs: Runner = request.app.state.jobs
    try:
        job = await jobs.get(document_id)
    except UnknownJob:
        job = None
    if job is None or not jobs.matches(job, key):
        raise DeepLError(404, "Document not found", "not_found")
    return job


@router.post("/v2/document/{document_id}", openapi_extra=KEY_BODY)
async def document_status(request: Request, document_id: str) -> dict[str, Any]:
    """A document's status: queued, translating (with the seconds remaining, as guessed), done or error."""
    job = await document(request, document_id)
    out: dict[str, Any] = {"document_id": job.id, "status": STATUS[job.status]}
    if job.status == "running" and job.done and job.started is not None:
        rate = (request.app.state.jobs.clock() - job.started) / job.done
        out["seconds_remaining"] = math.ceil(rate * (job.total - job.done))
    if job.status == "done":
        out["billed_characters"] = job.characters
    if job.status == "failed":
        out["error_message"] = job.error
    return out


@router.post("/v2/document/{document_id}/result", openapi_extra=KEY_BODY, response_class=Response, responses=FILE)
async def document_result(request: Request, document_id: str) -> Response:
    """The translated document, once done (503 before); it is deleted once downloaded, as DeepL's."""
    job = await document(request, document_id)
    if job.status == "failed":
        raise DeepLError(400, f"the document could not be translated: {job.error}", job.error_type or "failed")
    if job.active:
        raise DeepLError(503, "Document not ready", "not_ready")
    jobs: Runner = request.app.state.jobs
    job, data = await jobs.output(job.id)
    return Response(
        data, media_type=FORMATS[job.format].media_type, headers={"Content-Disposition": disposition(job.output_name)},
        background=BackgroundTask(forget, jobs, job.id),
    )  # fmt: skip


async def forget(jobs: Runner, job_id: str) -> None:
    """Delete a downloaded document (unless a second download did already)."""
    try:
        await jobs.delete(job_id)
    except UnknownJob:
        pass
