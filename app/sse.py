"""`/translate` with `"stream": true`: the tokens as server-sent events, then the whole translation (or an error)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi.responses import StreamingResponse

from app import schemas as s
from app.calls import decoding, detected, protected
from app.engine import InvalidRequest
from app.errors import error_kind
from app.glossaries import Glossary
from app.responses import judged
from app.schemas.stream import STREAM_EVENT, event_bytes
from app.text import Engine
from app.text.documents import weakest
from app.text.streaming import Finished, Token

log = logging.getLogger("nmt_serve")
SSE_EXAMPLE = (
    'data: {"index": 0, "token": {"id": 412, "text": "Ein"}, "text_so_far": "Ein"}\n\n'
    'data: {"index": 1, "token": {"id": 95, "text": " Mann"}, "text_so_far": "Ein Mann"}\n\n'
    'data: {"text": "Ein Mann", "finish_reason": "eos", "usage": {"input_tokens": 4, "output_tokens": 3}, '
    '"truncated": false, "calibrated": true, "confidence": 0.93, "flags": []}\n\n'
)
# One server-sent event: its `data` field carries one of app/schemas/stream.py's events as JSON
SSE_EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": STREAM_EVENT.json_schema()},
        "event": {"type": "string"},
    },
    "required": ["data"],
}


async def stream_translation(
    body: s.TranslateRequest, engine: Engine, stored: Glossary | None = None
) -> StreamingResponse:
    """The streamed answer to a `/translate` request: one text, plain text only."""
    if not isinstance(body.text, str):
        raise InvalidRequest(
            f"stream needs a single text, got a list of {len(body.text)}; send one request per text, or leave out "
            '"stream" to translate the list in one response'
        )
    if body.format == "html":
        raise InvalidRequest('stream works on plain text only: leave out "stream" to translate HTML')
    if asked := [f for f in ("return_signals", "return_segments") if getattr(body, f)]:
        raise InvalidRequest(
            f"stream gives no {' or '.join(f.removeprefix('return_') for f in asked)}: its events carry the tokens and "
            f'the whole translation; leave out "stream" for them'
        )
    how, kept = await decoding(body, engine, stored), protected(body)
    detected_source = how.source if detected(body, engine, stored) else None
    events = await engine.translate_stream(
        body.text, body.max_new_tokens, body.truncate, how, body.split, body.min_confidence, kept
    )  # fmt: skip
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering (deploy/nginx.conf)
    sent = server_sent(events, body.return_scores, detected_source)
    return StreamingResponse(sent, media_type="text/event-stream", headers=headers)


async def server_sent(
    events: AsyncIterator[Token | Finished], scores: bool, detected_source: str | None = None
) -> AsyncIterator[bytes]:
    """`data: {json}` per event (the last with the detected source language, where it was detected). A failure after
    the stream began ends it with an `{"error", "type"}` event."""
    try:
        async for event in events:
            wire = wire_event(event, scores)
            if isinstance(wire, s.EndEvent):
                wire.detected_source = detected_source
            yield event_bytes(wire)
    except Exception as e:  # the status line is gone: the error travels as the last event
        status, kind = error_kind(e)
        if status == 500 and kind == "internal_error":
            log.exception("unhandled error while streaming", exc_info=e)
        message = str(e) if kind != "internal_error" else f"internal server error ({type(e).__name__})"
        yield event_bytes(s.ErrorEvent(error=message, type=kind))
    finally:
        await events.aclose()  # drops the sequence if the client went away mid-stream


def wire_event(event: Token | Finished, scores: bool) -> s.TokenEvent | s.EndEvent:
    """The engine's event as the API sends it: the last one with its text's confidence and flags (a document's:
    its least confident sentence's, every sentence's flags), the score with return_scores, what was withheld."""
    if isinstance(event, Token):
        return s.TokenEvent(index=event.index, token=s.StreamedToken(id=event.id, text=event.text),
                          text_so_far=event.text_so_far)  # fmt: skip
    withheld = [
        s.WithheldSegment(segment=i, source_span=event.spans[i], **judged(event.qualities[i])) for i in event.withheld
    ]
    return s.EndEvent(
        text=event.text, finish_reason=event.finish_reason,
        usage=s.Usage(input_tokens=event.input_tokens, output_tokens=event.output_tokens), truncated=event.truncated,
        score=round(event.score, 4) if scores and event.score is not None else None, calibrated=event.calibrated,
        withheld=withheld or None, **judged(weakest(list(event.qualities))),
    )  # fmt: skip
