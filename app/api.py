"""HTTP routes: validate, hand to the engine, format. No tensor work here."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app import schemas as s
from app.calls import detect_source, engine_by_detection, run_attention, run_translate
from app.deps import EngineDep, GlossariesDep, ModelsDep
from app.disconnect import unless_disconnected
from app.engine import EngineUnavailable
from app.errors import ERRORS, error
from app.glossaries import language, parse, short
from app.metrics import CONTENT_TYPE_LATEST
from app.responses import translation_response
from app.sse import SSE_EVENT_SCHEMA, SSE_EXAMPLE, stream_translation
from app.text import inspection

try:
    VERSION = version("nmt-serve")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"

open_routes = APIRouter()
router = APIRouter(responses=ERRORS)  # behind require_api_key when a key is set


@open_routes.api_route("/health", methods=["GET", "HEAD"], response_model=s.StatusResponse)  # HEAD: some probes
async def health() -> s.StatusResponse:
    """Liveness: 200 while the process runs, even before the model is loaded."""
    return s.StatusResponse(status="ok")


@open_routes.api_route(
    "/ready", methods=["GET", "HEAD"], response_model=s.ReadyResponse, response_model_exclude_none=True,
    responses={503: {"model": s.ErrorResponse}},
)  # fmt: skip
async def ready(models: ModelsDep, request: Request):
    """Readiness: 200 once every model has loaded and warmed up (`partial` when some failed to load and the others
    serve), 503 before, when none loaded, while shutting down, and while a front-end's engine process is not answering.
    `models` says each one's state. With NMT_WORKERS, 200 only once every worker has loaded (`workers`)."""
    states = models.states()
    group = request.app.state.workers
    if group is not None and "loading" not in states.values() and (loaded := group.loaded_count()) < group.count:
        return error(503, f"{loaded} of the server's {group.count} workers have loaded", "not_ready")
    if "loading" not in states.values() and "ready" in states.values() and (why := models.unavailable()):
        return error(503, why, "not_ready")  # a front-end whose engine process is not answering
    if "loading" not in states.values() and "ready" in states.values():
        status = "ready" if all(v == "ready" for v in states.values()) else "partial"
        return s.ReadyResponse(status=status, models=states)
    default = models.default
    failed = all(v == "failed" for v in states.values())
    reason = (
        models.not_ready(default) if len(states) == 1 else f"models: {', '.join(f'{k} {v}' for k, v in states.items())}"
    )
    return JSONResponse({"error": reason, "type": "load_failed" if failed else "not_ready"}, 503)


@router.get("/info", response_model=s.InfoResponse)
async def info(engine: EngineDep, models: ModelsDep, request: Request) -> s.InfoResponse:
    """One model (`?model=`, default the first): its config and size, the device, and the request limits; with
    NMT_WORKERS, those of the worker that answers (`worker`)."""
    group = request.app.state.workers
    worker = s.WorkerInfo(**group.info()) if group is not None else None
    return s.InfoResponse(version=VERSION, models=models.names, worker=worker, **engine.info())


@router.get("/models", response_model=s.ModelsResponse, response_model_exclude_none=True)
async def list_models(models: ModelsDep) -> s.ModelsResponse:
    """The models this server serves: their languages, state, limits and metadata, the default first."""
    return s.ModelsResponse(models=[s.ModelOut(**models.describe(name)) for name in models.names])


@router.post("/tokenize", response_model=s.TokenizeResponse)
async def tokenize(body: s.TokenizeRequest, models: ModelsDep) -> s.TokenizeResponse:
    """Split texts into tokens with ids and character offsets."""
    source = body.side == "source"
    engine = models.pick(body.model, body.language if source else None, None if source else body.language)
    language = body.language
    if engine.codes and source and language == "auto":
        language = await detect_source(engine, [body.text] if isinstance(body.text, str) else body.text)
    results = await inspection.tokenize(engine, body.text, body.side, body.add_special_tokens, language)
    return s.TokenizeResponse(
        results=[s.TokenizeResult(tokens=[s.TokenOut(**t.__dict__) for t in toks], count=len(toks)) for toks in results]
    )


@router.post("/detokenize", response_model=s.DetokenizeResponse)
async def detokenize(body: s.DetokenizeRequest, models: ModelsDep) -> s.DetokenizeResponse:
    """Turn token ids back into text."""
    engine = models.pick(body.model)
    texts = await inspection.detokenize(engine, body.ids, body.side, body.skip_special_tokens)
    return s.DetokenizeResponse(results=[s.TextOut(text=t) for t in texts])


@router.post(
    "/translate",
    response_model=s.TranslateResponse,
    response_model_exclude_none=True,
    responses={
        200: {
            "description": 'JSON, or with `"stream": true` server-sent events: one per generated token, then a last '
            "one with the whole translation (or an error)",
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA, "example": SSE_EXAMPLE}},
        },
        404: {"model": s.ErrorResponse, "description": "`glossary_id` names no stored glossary"},
    },
)
async def translate(body: s.TranslateRequest, models: ModelsDep, request: Request):
    """Translate with the model named by `model`, or by `source`/`target`, or the default: greedy by default, or beam
    search, sampling, a forced target prefix, n-best lists and alignments; `"stream": true` sends the tokens as they
    come."""
    stored = await request.app.state.glossaries.get(body.glossary_id) if body.glossary_id else None
    if stored is not None and body.model is None and not (body.source or body.target):
        engine = models.pick(None, stored.source_lang, stored.target_lang)  # the model of the glossary's languages
    elif body.model is None and body.source in (None, "auto") and (among := models.sources_into(body.target)):
        engine = await engine_by_detection(models, body, among)  # several models translate into the target
    else:
        engine = models.pick(body.model, body.source, body.target)
    if body.stream:
        return await stream_translation(body, engine, stored)
    out = await unless_disconnected(request.receive, run_translate(engine, body, stored))
    return translation_response(body, out, engine)


@router.post("/attention", response_model=s.AttentionResponse)
async def attention(body: s.AttentionRequest, models: ModelsDep, request: Request) -> s.AttentionResponse:
    """Encoder self-, decoder self- and cross-attention weights for one text, in bertviz's layout; a many-to-many
    model's in the languages `source_language` and `target_language` name (as /translate's `source` and `target`)."""
    engine = models.pick(body.model, body.source_language, body.target_language)
    a = await unless_disconnected(request.receive, run_attention(engine, body))
    return s.AttentionResponse(**a.__dict__)


# ---- stored glossaries (app/glossaries.py) ---------------------------------------------------------------------

NOT_FOUND = {404: {"model": s.ErrorResponse}}


@router.post("/glossaries", status_code=201, response_model=s.GlossaryOut)
async def create_glossary(body: s.GlossaryRequest, models: ModelsDep, glossaries: GlossariesDep) -> s.GlossaryOut:
    """Store a glossary for a language pair a model here translates; `/translate` uses it by `glossary_id`."""
    source, target = language(body.source_lang, "source"), language(body.target_lang, "target")
    models.pick(None, source, target)  # 422 when no model translates the pair
    if isinstance(body.entries, dict):
        entries = [(f"entry {short(term)}", term, into) for term, into in body.entries.items()]
    else:
        entries = parse(body.entries, body.entries_format, source, target)
    glossary = await glossaries.create(body.name, source, target, entries)
    return s.GlossaryOut(**glossary.info())


@router.get("/glossaries", response_model=s.GlossariesResponse)
async def list_glossaries(glossaries: GlossariesDep) -> s.GlossariesResponse:
    """Every stored glossary, oldest first, without its entries."""
    return s.GlossariesResponse(glossaries=[s.GlossaryOut(**g.info()) for g in await glossaries.list()])


@router.get("/glossaries/{glossary_id}", response_model=s.GlossaryOut, responses=NOT_FOUND)
async def get_glossary(glossary_id: str, glossaries: GlossariesDep) -> s.GlossaryOut:
    """One glossary, without its entries."""
    return s.GlossaryOut(**(await glossaries.get(glossary_id, entries=False)).info())


@router.get("/glossaries/{glossary_id}/entries", response_model=s.GlossaryEntriesResponse, responses=NOT_FOUND)
async def glossary_entries(glossary_id: str, glossaries: GlossariesDep) -> s.GlossaryEntriesResponse:
    """One glossary's entries, source term -> target term, in order."""
    glossary = await glossaries.get(glossary_id)
    return s.GlossaryEntriesResponse(glossary_id=glossary.glossary_id, entries=dict(glossary.entries))


@router.delete("/glossaries/{glossary_id}", status_code=204, response_class=Response, responses=NOT_FOUND)
async def delete_glossary(glossary_id: str, glossaries: GlossariesDep) -> Response:
    """Delete one glossary."""
    await glossaries.delete(glossary_id)
    return Response(status_code=204)


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, latency, queue length, running batch size, tokens, time per token. A front-end
    (NMT_FRONTENDS) gives its own HTTP and confidence series and the engine process's batch and decoder ones."""
    connection = getattr(request.app.state.models, "connection", None)
    engine = None
    if connection is not None:
        try:
            engine = await connection.metrics()
        except (EngineUnavailable, TimeoutError) as e:
            return error(503, f"the engine process's metrics are out of reach: {e or 'no answer'}", "not_ready")
    return Response(request.app.state.metrics.exposition(engine), media_type=CONTENT_TYPE_LATEST)
