"""The DeepL API's endpoints (/v2/...): thin, as app/api.py's: the fields read and checked (fields.py), the engine or
the glossary store or the job runner asked, the answer in DeepL's shape."""

from __future__ import annotations

import asyncio
import hmac
import math
import secrets
from collections.abc import Awaitable
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from starlette.background import BackgroundTask
from starlette.datastructures import UploadFile

from app import detect
from app import glossaries as g
from app.deepl.errors import ERRORS, DeepLError, DeepLRoute
from app.deepl.fields import (
    FORMALITY,
    MODEL_TYPES,
    SPLIT,
    Asked,
    asked,
    choice,
    fields,
    glossary_ids,
    glossary_terms,
    string,
)
from app.deepl.languages import (
    base,
    checked,
    deepl_code,
    engine_for,
    glossary_code,
    glossary_language,
    iso_code,
    name,
    pairs,
    sources,
    target_variants,
)
from app.deps import ModelsDep
from app.disconnect import unless_disconnected
from app.engine import EngineUnavailable, InvalidRequest
from app.files_api import translated_file
from app.html import HTML, ignoring
from app.jobs import Job, Runner, UnknownJob
from app.jobs.intake import job_for, read
from app.languages import cut, same
from app.models import Models
from app.protect.spans import ADDRESSES
from app.text import Engine, Translation
from app.text.documents import parse_pages
from app.text.limits import GREEDY
from app.text.offload import each_group

CHARACTER_LIMIT = 10**12  # what /v2/usage reports: no quota here


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
    "non_splitting_tags": {"oneOf": [STRINGS, STRING]}, "splitting_tags": {"oneOf": [STRINGS, STRING]},
    "show_billed_characters": {"type": ["boolean", "string"]},
    "model_type": {"type": "string", "enum": sorted(MODEL_TYPES)},
}  # fmt: skip
GLOSSARY_FIELDS = {
    "name": STRING, "source_lang": STRING, "target_lang": STRING, "entries": STRING,
    "entries_format": {"type": "string", "enum": ["tsv", "csv"]},
}  # fmt: skip


@router.post("/v2/translate", openapi_extra=request_body(TRANSLATE_FIELDS, ["text", "target_lang"]))
async def translate(request: Request, models: ModelsDep) -> dict[str, Any]:
    """Translate `text` (one or a list) from `source_lang` (or each text's detected language) into `target_lang`."""
    a = asked(request, await fields(request))
    marked = [ignoring(t, a.ignored, a.xml) if a.ignored else (t, "") for t in a.texts]
    texts, kind = [t for t, _ in marked], "xml" if a.xml else "html" if a.html else "text"
    languages = [a.source] * len(texts) if a.source else await detected(a, models)
    glossary = await glossary_terms(request, a.glossary_ids, a.source, a.target) if a.glossary_ids else ()
    chosen = {source: engine_for(models, source, a.target) for source in dict.fromkeys(languages)}
    how = {"split": a.split, "format": kind, "cut_long": True, "protect": ADDRESSES, "tags": a.tags}

    def part(engine: Engine, places: list[int]) -> Awaitable[list[Translation]]:
        """Its texts (of one language, or of many for a many-to-many model), each from its own language."""
        into = chosen[languages[places[0]]][1]
        decoding = replace(GREEDY, glossary=glossary, source=base(languages[places[0]]), target=into)
        # min_confidence 0: DeepL's answer has no place to say a sentence was withheld
        return engine.translate([texts[i] for i in places], decoding=decoding, min_confidence=0.0,
                                sources=[base(languages[i]) for i in places], **how)  # fmt: skip

    try:  # each text to the model of its language
        out = await unless_disconnected(request.receive, each_group([chosen[s][0] for s in languages], part))
    except InvalidRequest:
        if a.ignored and a.html:  # where the texts as sent are not well-formed: the marks moved what follows them
            await asyncio.to_thread(parse_pages, a.texts, None, a.tags or HTML)
        raise
    request.app.state.metrics.deepl_characters.inc(sum(map(len, a.texts)))
    results = []
    for text, (_, marker), t, source in zip(a.texts, marked, out, languages, strict=True):
        translated = t.text.replace(" " + marker, "") if marker else t.text
        result = {"detected_source_language": deepl_code(iso_code(source)), "text": translated}
        result |= {"billed_characters": len(text)} if a.billed else {}
        results.append(result | ({"model_type_used": a.model_type} if a.model_type else {}))
    return {"translations": results}


async def detected(a: Asked, models: Models) -> list[str]:
    """Each text's language among those the models translate from, the words read (not the markup) and the context
    helping (it is not translated): a short text leans on the others (app/detect.py's each())."""
    read = [detect.visible(t) for t in a.texts] if a.html else a.texts
    return (await detect.detect_each([*read, a.context or ""], tuple(sources(models)) or ("en",)))[: len(a.texts)]


def characters(request: Request) -> int:
    """The characters this server has translated through this API (with NMT_FRONTENDS, every front-end's)."""
    return int(request.app.state.metrics.total("nmt_deepl_characters_total"))


@router.get("/v2/languages")
async def languages(
    request: Request, models: ModelsDep, kind: Annotated[str | None, Query(alias="type")] = None
) -> list[dict[str, Any]]:
    """The languages the models translate from (`type=source`, the default) or into (`type=target`)."""
    values = await fields(request)  # DeepL's Python client sends `type` in a GET's form body
    kind = choice({"type": kind or values.get("type")}, "type", {"source", "target"}) or "source"
    if kind == "source":
        out = [{"language": deepl_code(c), "name": name(c)} for c in sources(models)]
    else:
        out = []
        for code in dict.fromkeys(t for _, t in pairs(models)):
            out += [{"language": v, "name": n, "supports_formality": False}
                    for v, n in target_variants(models, code).items()]  # fmt: skip
    return sorted(out, key=lambda language: language["language"])  # by code, as DeepL lists them


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
    source = glossary_language(string(values, "source_lang", required=True), "source_lang")
    target = glossary_language(string(values, "target_lang", required=True), "target_lang")
    entries_format = choice(values, "entries_format", {"tsv", "csv"}) or "tsv"
    served = pairs(models)  # as the models name them: a pair model's `deu` is `de` too
    if (source, target) not in served and not any(same(s, source) and same(t, target) for s, t in served):
        if "loading" in models.states().values():
            raise EngineUnavailable("the models are still loading; create the glossary once they are ready")
        listed = ", ".join(f"{s}->{t}" for s, t in served[:20]) + (", ..." if len(served) > 20 else "") or "none"
        raise DeepLError(
            400, f"Unsupported glossary language pair {cut(source)}->{cut(target)}: {len(served)} pairs are served "
            f"({listed}; GET /v2/glossary-language-pairs lists them all)",
        )  # fmt: skip
    store: g.GlossaryStore = request.app.state.glossaries
    glossary = await store.create(name_, source, target, g.parse(entries, entries_format, source, target))
    return info(glossary)


@router.get("/v2/glossaries")
async def list_glossaries(request: Request) -> dict[str, list[dict[str, Any]]]:
    """Every stored glossary, without its entries."""
    return {"glossaries": [info(glossary) for glossary in await request.app.state.glossaries.list()]}


@router.get("/v2/glossaries/{glossary_id}")
async def get_glossary(request: Request, glossary_id: str) -> dict[str, Any]:
    """One glossary, without its entries."""
    return info(await request.app.state.glossaries.get(glossary_id, entries=False))


def info(glossary: g.Glossary) -> dict[str, Any]:
    """DeepL's GlossaryInfo of a stored glossary, its languages as DeepL names them (one made through our
    /glossaries may name NLLB's codes)."""
    described = glossary.info()
    return {**described, "source_lang": glossary_code(glossary.source_lang),
            "target_lang": glossary_code(glossary.target_lang)}  # fmt: skip


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
        checked(target, "target_lang")
        if source:
            checked(source, "source_lang")
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
    request.app.state.metrics.deepl_characters.inc(job.characters)  # billed as it is taken, as DeepL bills
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
    return translated_file(job, data, BackgroundTask(forget, jobs, job.id))


async def forget(jobs: Runner, job_id: str) -> None:
    """Delete a downloaded document (unless a second download did already)."""
    try:
        await jobs.delete(job_id)
    except UnknownJob:
        pass
