"""/translate's server-sent events (`"stream": true`): one TokenEvent per generated token, then one EndEvent with
the whole translation, or an ErrorEvent where it failed after the stream began. Each event's `data` is one of them
as JSON (`StreamEvent`)."""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from app.schemas.translation import CONFIDENCE, DETECTED, FLAGS, Flag, Usage


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")  # an event has these fields and no others: clients may rely on it


class StreamedToken(Event):
    id: int = Field(description="the token's id, as /tokenize numbers them")
    text: str = Field(
        description="the text it adds to the translation (with the whitespace between two sentences, or a protected "
        "span, that comes before it)"
    )


class TokenEvent(Event):
    index: int = Field(description="the token's place in the stream, from 0")
    token: StreamedToken
    text_so_far: str = Field(description="every token's text so far, this one's included")


class WithheldSegment(Event):
    segment: int = Field(description="which sentence of the text (from 0)")
    source_span: tuple[int, int] = Field(description="[start, end) characters of it in the text")
    confidence: float
    flags: list[Flag]


class EndEvent(Event):
    text: str = Field(description="the whole translation: what stands where a withheld sentence's tokens were sent")
    detected_source: str | None = Field(None, description=DETECTED)
    finish_reason: Literal["eos", "length"]
    usage: Usage
    truncated: bool = Field(description="the input was cut to MAX_INPUT_TOKENS (only with truncate)")
    score: float | None = Field(None, description="with return_scores")
    calibrated: bool = Field(description="the model's confidence is calibrated (nmt-calibrate)")
    confidence: float | None = Field(None, description=CONFIDENCE)
    flags: list[Flag] = Field(default_factory=list, description=FLAGS)
    withheld: list[WithheldSegment] | None = Field(
        None, description="the sentences left out under min_confidence; absent if none"
    )


class ErrorEvent(Event):
    error: str = Field(description="what went wrong")
    type: str = Field(description="its kind, as an error response's `type`")


StreamEvent = TokenEvent | EndEvent | ErrorEvent
STREAM_EVENT = TypeAdapter(StreamEvent)


def event_bytes(event: TokenEvent | EndEvent | ErrorEvent) -> bytes:
    """One server-sent event: `data: {json}` and a blank line (fields that are null left out)."""
    data = json.dumps(event.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
    return b"data: " + data.encode() + b"\n\n"
