"""DeepL's errors: `{"message"}` with our `type` beside it, and DeepL's status codes for ours (400 where we would say
422, 456 for the glossary quota)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from app import glossaries as g
from app.errors import ENGINE_ERRORS, RETRY_AFTER_S, error_kind
from app.jobs import JobError


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
    return path.startswith(("/deepl/", "/v2/", "/v3/"))


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


STATUSES = (400, 403, 404, 413, 415, 429, 456, 500, 503, 504)
ERROR_SCHEMA = {
    "type": "object", "required": ["message"],
    "properties": {"message": {"type": "string"}, "type": {"type": "string"}},
}  # fmt: skip
ERRORS = {
    s: {"description": "DeepL's error", "content": {"application/json": {"schema": ERROR_SCHEMA}}} for s in STATUSES
}
