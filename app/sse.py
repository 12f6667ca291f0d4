"""`/translate` with `"stream": true`: the tokens as server-sent events, then the whole translation (or an error)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from app import schemas as s
from app.calls import decoding, protected
from app.engine import Engine, InvalidRequest
from app.engine.documents import weakest
from app.errors import error_kind
from app.glossaries import Glossary
from app.responses import judged

log = logging.getLogger("nmt_serve")
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
