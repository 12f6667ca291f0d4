"""What each failure answers over HTTP: the exception → status map, and the JSON error every endpoint sends."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from app import schemas as s
from app.engine import (
    EngineFailure,
    EngineUnavailable,
    InputTooLong,
    InvalidRequest,
    OutOfMemory,
    QueueFull,
    RequestTimeout,
)


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
ERRORS = {status: {"model": s.ErrorResponse} for status in (401, 413, 422, 429, 500, 503, 504)}  # for OpenAPI


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
