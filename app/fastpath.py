"""A short way through for the request the service exists for: a plain `POST /translate`.

FastAPI's routing, dependency solving, exception middleware and response validation cost the event loop about as
much per `/translate` request as tokenizing, detokenizing and formatting do, and on 2 cores the loop's work slows
the decoder step beside it by more than its own share (README, "Why the event loop's work costs more than its
share"). So a request that is plainly fine (JSON within the body limit, the API key if one is set, a body the
request model accepts, not streamed, no stored glossary, its model ready) goes from here to the engine, and its
answer is built by the same function the route uses. Anything else, including every request that will get a 4xx
from validation, is handed on unchanged (its body replayed) to the full app, which answers it as it always has.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from fastapi import FastAPI
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api import router
from app.calls import run_translate
from app.disconnect import unless_disconnected
from app.errors import ENGINE_ERRORS, engine_error
from app.responses import translation_response
from app.schemas import TranslateRequest
from app.settings import MAX_BODY_BYTES
from app.text import Engine

PATH = "/translate"
ENGINE_ERROR_TYPES = tuple(ENGINE_ERRORS)


class FastTranslate:
    """ASGI middleware: plain `/translate` requests go straight to the engine; everything else to `app`."""

    def __init__(self, app: ASGIApp, service: FastAPI):
        self.app, self.service = app, service
        self.route = next(r for r in router.routes if getattr(r, "path", None) == PATH)  # labels the request metrics
        key = service.state.settings.api_key
        self.authorization = None if key is None else b"Bearer " + key.get_secret_value().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST" or not self._plain(scope):
            return await self.app(scope, receive, send)
        messages, body = await _read_body(receive)
        request = _parse(body) if body is not None else None
        engine = None
        models = self.service.state.models
        if request is not None and not request.stream and request.glossary_id is None:  # the route reads glossaries
            engine = models.find(request.model, request.source, request.target)
            if request.model is None and request.source in (None, "auto") and models.sources_into(request.target):
                engine = None  # several models translate into its target: the route detects which one is its
        if engine is None:  # the full app answers, or says what is wrong
            return await self.app(scope, _replay(messages, receive), send)
        await self.translate(scope, receive, send, request, engine)

    async def translate(
        self, scope: Scope, receive: Receive, send: Send, request: TranslateRequest, engine: Engine
    ) -> None:
        scope["route"] = self.route
        try:
            out = await unless_disconnected(receive, run_translate(engine, request))
        except ENGINE_ERROR_TYPES as e:  # anything else reaches the server-error handler, as from the route
            response: Response = engine_error(e)
        else:
            answer = translation_response(request, out, engine).model_dump_json(exclude_none=True)
            response = Response(answer, media_type="application/json")
        await response(scope, receive, send)

    def _plain(self, scope: Scope) -> bool:
        """JSON, a Content-Length within the body limit, and the API key when the server has one."""
        content_type = length = authorization = b""
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
            elif name == b"content-length":
                length = value
            elif name == b"authorization":
                authorization = value
        if content_type.split(b";", 1)[0].strip().lower() != b"application/json":
            return False
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return False
        return self.authorization is None or hmac.compare_digest(authorization, self.authorization)


async def _read_body(receive: Receive) -> tuple[list[Message], bytes | None]:
    """The request's messages as received, and its body (None if the client left before sending all of it)."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def _parse(body: bytes) -> TranslateRequest | None:
    """The request as the route would see it (json.loads, then the model in Python mode), or None if it is not."""
    try:
        return TranslateRequest.model_validate(json.loads(body))
    except (ValueError, RecursionError):  # not JSON or not UTF-8, nested too deeply, or refused by the model
        return None  # the full app says why


def _replay(messages: Iterable[Message], receive: Receive) -> Receive:
    """A receive() that gives back the messages already read, then whatever comes next."""
    pending = list(messages)

    async def again() -> Message:
        return pending.pop(0) if pending else await receive()

    return again
