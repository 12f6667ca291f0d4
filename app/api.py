"""HTTP routes: validate, hand to the engine, format. No tensor work here."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import Receive

from app import detect
from app import schemas as s
from app.engine import (
    Attention,
    Engine,
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
    Translation,
)
from app.engine.documents import weakest
from app.engine.limits import Decoding
from app.glossaries import Glossary, GlossaryStore, fits, language, parse, short, terms
from app.metrics import CONTENT_TYPE_LATEST
from app.models import Models
from app.protect import Protect, protection
from app.settings import Settings
from model.confidence import Quality

try:
    VERSION = version("nmt-serve")
except PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"

log = logging.getLogger("nmt_serve")
T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before its answer was ready; its work was dropped."""


# What each failure answers with, in the order they are matched (subclasses first). main.py registers a handler per
# row; a stream that already started ends with an error event of the same type instead.
ENGINE_ERRORS: dict[type[Exception], tuple[int, str]] = {
    InputTooLong: (413, "input_too_long"),
    InvalidRequest: (422, "validation_error"),
    QueueFull: (429, "queue_full"),
    ClientDisconnected: (499, "client_closed"),
    EngineFailure: (500, "model_error"),
    OutOfMemory: (503, "out_of_memory"),
    EngineUnavailable: (503, "not_ready"),
    RequestTimeout: (504, "timeout"),
}
RETRY_AFTER_S = 1  # the Retry-After of a 429: the queue drains by whole sequences every few decoder steps
ERRORS = {status: {"model": s.ErrorResponse} for status in (401, 413, 422, 429, 500, 503, 504)}
SSE_EXAMPLE = (
    'data: {"index": 0, "token": {"id": 412, "text": "Ein"}, "text_so_far": "Ein"}\n\n'
    'data: {"index": 1, "token": {"id": 95, "text": " Mann"}, "text_so_far": "Ein Mann"}\n\n'
    'data: {"text": "Ein Mann", "finish_reason": "eos", "usage": {"input_tokens": 4, "output_tokens": 3}, '
    '"truncated": false, "confidence": 0.93, "flags": []}\n\n'
)
# One server-sent event: its `data` field carries a JSON object (a token event, the last event, or an error).
SSE_EVENT_SCHEMA = {
    "type": "object",
    "properties": {"data": {"type": "string", "contentMediaType": "application/json"}, "event": {"type": "string"}},
    "required": ["data"],
}
bearer = HTTPBearer(auto_error=False, description="the server's NMT_API_KEY")


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_models(request: Request) -> Models:
    return request.app.state.models


ModelsDep = Annotated[Models, Depends(get_models)]


async def get_engine(models: ModelsDep, model: str | None = None) -> Engine:
    """The engine of the `model` query parameter, else the default model's."""
    return models.pick(model)


async def require_api_key(
    settings: Annotated[Settings, Depends(get_settings)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    """Constant-time check of `Authorization: Bearer <key>`; create_app adds it when NMT_API_KEY is set."""
    expected = settings.api_key.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials else b""
    if not hmac.compare_digest(given, expected):
        problem = "is wrong" if credentials else "is missing"
        raise HTTPException(
            401, f"the API key {problem}; send `Authorization: Bearer <key>`", {"WWW-Authenticate": "Bearer"}
        )


EngineDep = Annotated[Engine, Depends(get_engine)]
open_routes = APIRouter()
router = APIRouter(responses=ERRORS)  # behind require_api_key when a key is set


@open_routes.get("/health", response_model=s.StatusResponse)
async def health() -> s.StatusResponse:
    """Liveness: 200 while the process runs, even before the model is loaded."""
    return s.StatusResponse(status="ok")


@open_routes.get(
    "/ready", response_model=s.ReadyResponse, response_model_exclude_none=True,
    responses={503: {"model": s.ErrorResponse}},
)  # fmt: skip
async def ready(models: ModelsDep, request: Request):
    """Readiness: 200 once every model has loaded and warmed up (`partial` when some failed to load and the others
    serve), 503 before, when none loaded, and while shutting down. `models` says each one's state. With NMT_WORKERS,
    200 only once every worker has loaded (`workers`)."""
    states = models.states()
    group = request.app.state.workers
    if group is not None and "loading" not in states.values() and (loaded := group.loaded_count()) < group.count:
        return error(503, f"{loaded} of the server's {group.count} workers have loaded", "not_ready")
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
    results = await engine.tokenize(body.text, body.side, body.add_special_tokens, language)
    return s.TokenizeResponse(
        results=[s.TokenizeResult(tokens=[s.TokenOut(**t.__dict__) for t in toks], count=len(toks)) for toks in results]
    )


@router.post("/detokenize", response_model=s.DetokenizeResponse)
async def detokenize(body: s.DetokenizeRequest, models: ModelsDep) -> s.DetokenizeResponse:
    """Turn token ids back into text."""
    engine = models.pick(body.model)
    texts = await engine.detokenize(body.ids, body.side, body.skip_special_tokens)
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
    else:
        engine = models.pick(body.model, body.source, body.target)
    if body.stream:
        return await stream_translation(body, engine, stored)
    out = await unless_disconnected(request.receive, run_translate(engine, body, stored))
    return translation_response(body, out, engine)


async def decoding(body: s.TranslateRequest, engine: Engine, stored: Glossary | None = None) -> Decoding:
    """The request's decoding fields, for the engine to check against the model and its limits; for a many-to-many
    model a source left out or "auto" is detected among its languages (or is the stored glossary's). A stored
    glossary must be of the languages the model translates the request between; its entries follow the inline ones."""
    source, target = body.source, body.target
    if stored is not None:
        source = stored.source_lang if source in (None, "auto") else source
        target = target or stored.target_lang
    if engine.codes and source in (None, "auto"):
        source = await detect_source(engine, [body.text] if isinstance(body.text, str) else body.text)
    if stored is not None and not fits(stored, engine, source, target):
        langs = engine.languages if engine.codes is None else {"source": source, "target": target}
        raise InvalidRequest(
            f"the glossary {stored.glossary_id} is {stored.source_lang}->{stored.target_lang}, but this request is "
            f"{langs['source']}->{langs['target']} (model {engine.name!r}); use a glossary of that pair, or leave out "
            "model, source and target to translate with the glossary's model"
        )
    glossary = terms(
        (body.glossary or {}).items(), stored.entries if stored else (), ignore_case=body.glossary_ignore_case
    )
    return Decoding(
        body.beam_size, body.num_hypotheses, body.length_penalty, body.target_prefix, body.sampling_topk,
        body.sampling_temperature, body.seed, body.return_alignment, body.return_word_confidence,
        glossary=glossary, glossary_ignore_case=body.glossary_ignore_case, source=source, target=target,
    )  # fmt: skip


async def detect_source(engine: Engine, texts: list[str]) -> str:
    """The likeliest of a many-to-many model's languages that the detector knows (by their ISO 639-1 names)."""
    names = tuple(sorted(set(engine.codes.names.values())))
    if detect.identifier(names) is None or not any(t.strip() for t in texts):
        what = "the text is blank" if detect.identifier(names) else "the detector knows none of this model's languages"
        raise InvalidRequest(f'name the source language: {what}, so "auto" cannot tell; {engine.codes.hint()}')
    return (await detect.detect(texts, names))[0][0]


async def run_translate(engine: Engine, body: s.TranslateRequest, stored: Glossary | None = None) -> list[Translation]:
    """The engine call for a `/translate` request that is not streamed (also used by app/fastpath.py)."""
    if body.format == "html" and body.return_segments:
        raise InvalidRequest('return_segments works on plain text only; send it with "format": "text"')
    how, kept = await decoding(body, engine, stored), protected(body)
    return await engine.translate(
        body.text, body.max_new_tokens, body.truncate, how, body.split, body.format, body.min_confidence, kept
    )


def protected(body: s.TranslateRequest) -> Protect | None:
    """The request's protected spans, checked against their limits (app/protect.py); None when it protects none."""
    return protection(body.protect, body.protect_terms, body.protect_patterns)


def translation_response(body: s.TranslateRequest, out: list[Translation], engine: Engine) -> s.TranslateResponse:
    """The answer to a `/translate` request that was not streamed (also used by app/fastpath.py)."""
    tokens = body.return_tokens
    texts = [body.text] if isinstance(body.text, str) else body.text

    def spans_of(source: str, t: Translation) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        if t.segments is None:  # translated whole
            return [((0, len(source)), (0, len(t.text)))] if source.strip() else []
        return t.segments

    def segments(source: str, t: Translation) -> list[s.SegmentOut] | None:
        if not body.return_segments:
            return None
        qualities = t.segment_qualities or [t.quality]
        return [
            s.SegmentOut(source_span=a, target_span=b, withheld=i in t.withheld, **judged(q))
            for i, ((a, b), q) in enumerate(zip(spans_of(source, t), qualities))
        ]  # fmt: skip

    def withheld(source: str, t: Translation) -> list[s.WithheldOut] | None:
        if not t.withheld:
            return None
        qualities = t.segment_qualities or [t.quality]
        spans = spans_of(source, t) if body.format == "text" else []
        return [
            s.WithheldOut(segment=i, source_span=spans[i][0] if i < len(spans) else None, **judged(qualities[i]))
            for i in t.withheld
        ]  # fmt: skip

    def words(t: Translation) -> list[s.WordOut] | None:
        if t.words is None:
            return None
        return [s.WordOut(text=t.text[a:b], span=(a, b), confidence=c) for (a, b), c in t.words]

    def signals(t: Translation) -> s.Signals | None:
        return s.Signals(**t.quality.signals.as_dict()) if body.return_signals and t.quality is not None else None

    def alignment(t: Translation) -> list[s.AlignedOut] | None:
        return None if t.alignment is None else [s.AlignedOut(**a.__dict__) for a in t.alignment]

    def hypotheses(t: Translation) -> list[s.HypothesisOut] | None:
        if not t.hypotheses:
            return None
        return [
            s.HypothesisOut(
                text=h.text, score=round(h.score, 4), finish_reason=h.finish_reason,
                tokens=h.tokens if tokens else None, token_ids=h.token_ids if tokens else None,
                alignment=alignment(h), **judged(h.quality), words=words(h),
            )
            for h in t.hypotheses
        ]  # fmt: skip

    return s.TranslateResponse(
        translations=[
            s.TranslationOut(
                text=t.text,
                finish_reason=t.finish_reason,
                truncated=t.truncated,
                tokens=t.tokens if tokens else None,
                token_ids=t.token_ids if tokens else None,
                score=round(t.score, 4) if body.return_scores else None,
                alignment=alignment(t),
                hypotheses=hypotheses(t),
                segments=segments(source, t),
                **judged(t.quality),
                signals=signals(t),
                words=words(t),
                withheld=withheld(source, t),
            )
            for source, t in zip(texts, out, strict=True)
        ],
        usage=s.Usage(input_tokens=sum(t.input_tokens for t in out), output_tokens=sum(t.output_tokens for t in out)),
        model=engine.name,
        calibrated=engine.calibration is not None,
    )


def judged(quality: Quality | None) -> dict[str, Any]:
    """The confidence and flags fields of a translation, sentence or hypothesis."""
    return {} if quality is None else {"confidence": quality.confidence, "flags": quality.flags}


@router.post("/attention", response_model=s.AttentionResponse)
async def attention(body: s.AttentionRequest, models: ModelsDep, request: Request) -> s.AttentionResponse:
    """Encoder self-, decoder self- and cross-attention weights for one text, in bertviz's layout; a many-to-many
    model's in the languages `source_language` and `target_language` name (as /translate's `source` and `target`)."""
    engine = models.pick(body.model, body.source_language, body.target_language)
    a = await unless_disconnected(request.receive, run_attention(engine, body))
    return s.AttentionResponse(**a.__dict__)


async def run_attention(engine: Engine, body: s.AttentionRequest) -> Attention:
    """The engine call for an `/attention` request, its source language detected first when it is "auto"."""
    source = body.source_language
    if engine.codes and source == "auto":
        source = await detect_source(engine, [body.text])
    return await engine.attention(
        body.text, body.target, body.layers, body.heads, body.average_heads, source, body.target_language
    )


# ---- stored glossaries (app/glossaries.py) ---------------------------------------------------------------------


async def get_glossaries(request: Request) -> GlossaryStore:
    return request.app.state.glossaries


GlossariesDep = Annotated[GlossaryStore, Depends(get_glossaries)]
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


# ---- streaming and disconnects ---------------------------------------------------------------------------------


async def stream_translation(
    body: s.TranslateRequest, engine: Engine, stored: Glossary | None = None
) -> StreamingResponse:
    if not isinstance(body.text, str):
        raise InvalidRequest(
            f"stream needs a single text, got a list of {len(body.text)}; send one request per text, or leave out "
            '"stream" to translate the list in one response'
        )
    if body.format == "html":
        raise InvalidRequest('stream works on plain text only: leave out "stream" to translate HTML')
    how, kept = await decoding(body, engine, stored), protected(body)
    events = await engine.translate_stream(
        body.text, body.max_new_tokens, body.truncate, how, body.split, body.min_confidence, kept
    )  # fmt: skip
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering (deploy/nginx.conf)
    return StreamingResponse(server_sent(events, body.return_scores), media_type="text/event-stream", headers=headers)


async def server_sent(events: AsyncIterator[dict[str, Any]], scores: bool) -> AsyncIterator[bytes]:
    """`data: {json}` per event. A failure after the stream began ends it with an `{"error", "type"}` event."""
    try:
        async for event in events:
            if "finish_reason" in event:
                score = event.pop("score", None)
                if scores and score is not None:
                    event["score"] = round(score, 4)
                qualities, withheld = event.pop("quality"), event.pop("withheld")
                event |= judged(weakest(qualities))
                if withheld:
                    event["withheld"] = [{"segment": i, **judged(qualities[i])} for i in withheld]
            yield b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"
    except Exception as e:  # the status line is gone: the error travels as the last event
        status, kind = error_kind(e)
        if status == 500 and kind == "internal_error":
            log.exception("unhandled error while streaming", exc_info=e)
        message = str(e) if kind != "internal_error" else f"internal server error ({type(e).__name__})"
        yield b"data: " + json.dumps({"error": message, "type": kind}).encode() + b"\n\n"
    finally:
        await events.aclose()  # drops the sequence if the client went away mid-stream


def error_kind(error: Exception) -> tuple[int, str]:
    for cls, answer in ENGINE_ERRORS.items():
        if isinstance(error, cls):
            return answer
    return 500, "internal_error"


def error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON error every endpoint answers with: `{"error": what was wrong and what is allowed, "type": kind}`."""
    return JSONResponse({"error": message, "type": kind}, status_code=status, headers=headers)


def engine_error(exc: Exception) -> JSONResponse:
    """The answer to one of ENGINE_ERRORS; a 429 says when to retry."""
    status, kind = error_kind(exc)
    return error(status, str(exc), kind, {"Retry-After": str(RETRY_AFTER_S)} if status == 429 else None)


async def unless_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (its sequences leave the batch) if the client disconnects first. One watcher task a
    request, which cancels this one, rather than a task for each and asyncio.wait(): the event loop's work per request
    takes the cores from the decoder step (README, "Why the event loop's work costs more than its share")."""
    me, gone = asyncio.current_task(), False

    async def watch() -> None:
        nonlocal gone
        await _disconnect(receive)
        gone = True
        me.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:  # this request was cancelled itself
            raise
        me.uncancel()
        raise ClientDisconnected(
            "the client closed the connection before the answer was ready; its work was dropped"
        ) from None
    finally:
        watcher.cancel()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":  # the body has been read: nothing else comes
        pass
