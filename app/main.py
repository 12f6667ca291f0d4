"""The app: lifespan (load the checkpoint, warm up, then ready), the body limit, and JSON errors for everything."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app import deepl, files_api, libretranslate
from app.api import VERSION, open_routes, router
from app.deps import require_api_key
from app.errors import ENGINE_ERRORS, engine_error, error
from app.fastpath import FastTranslate
from app.glossaries import GlossaryError, GlossaryStore
from app.jobs import JobError, Runner
from app.jobs.share import Interactive
from app.metrics import Metrics, RequestMetrics
from app.models import Models
from app.settings import MAX_BODY_BYTES, Settings
from app.viewer import router as viewer
from model.workspace import unwritable

log = logging.getLogger("nmt_serve")
HTTP_KINDS = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
}


class Cors(CORSMiddleware):
    """Starlette's CORS, its refusal of a preflight a JSON error as every error here (Starlette's is plain text)."""

    def preflight_response(self, request_headers: Headers) -> Any:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        allowed = "any origin" if self.allow_all_origins else ", ".join(sorted(self.allow_origins))
        why = f"{bytes(response.body).decode()}: pages of {allowed} may call this server (NMT_CORS_ORIGINS)"
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
        return JSONResponse({"error": why, "type": "cors_refused"}, 400, headers=headers)


def create_app(settings: Settings | None = None, on_load_failure: Callable[[str], Any] | None = None) -> FastAPI:
    """The service; the model loads in the background after startup, so /health answers at once."""
    app = FastAPI(
        title="nmt-serve", version=VERSION, lifespan=lifespan,
        description="English->German translation with an encoder-decoder Transformer. Errors are "
        '`{"error": "...", "type": "..."}`; limits are listed by `GET /info`.',
    )  # fmt: skip
    app.state.settings = settings or Settings()
    app.state.engine, app.state.load_error, app.state.on_load_failure = None, None, on_load_failure
    app.state.workers = None  # a WorkerGroup when this app is one of NMT_WORKERS processes (app/workers.py)
    app.state.metrics = Metrics()  # its own registry, so several apps in one process do not collide
    app.state.models = Models(app.state.settings, app.state.metrics)
    app.state.glossaries = GlossaryStore(app.state.settings.glossaries())  # NMT_GLOSSARY_DIR (app/glossaries.py)
    app.state.jobs = Runner(app.state.settings, app.state.models, app.state.glossaries)  # files (app/jobs)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, file_bytes=app.state.settings.file_max_bytes)
    app.add_middleware(FastTranslate, service=app)  # plain /translate requests skip the framework (app/fastpath.py)
    app.add_middleware(Interactive, activity=app.state.jobs.activity)  # the jobs give way to translation requests
    if origins := app.state.settings.origins():  # pages of other origins may call the APIs (NMT_CORS_ORIGINS)
        app.add_middleware(
            Cors, allow_origins=origins, allow_methods=["*"], allow_headers=["*"],
            expose_headers=["Retry-After", "Location", "Content-Disposition"], max_age=600,
        )  # fmt: skip
    app.add_middleware(RequestMetrics, metrics=app.state.metrics)  # outermost: it sees the body limit's 413s too
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(GlossaryError, on_glossary_error)
    app.add_exception_handler(JobError, on_glossary_error)
    for exc in ENGINE_ERRORS:
        app.add_exception_handler(exc, on_engine_error)
    app.add_exception_handler(ClientDisconnect, on_client_gone)  # a body cut off: nobody to answer, nothing to log
    app.add_exception_handler(Exception, on_unexpected)
    app.include_router(open_routes)
    app.include_router(viewer)  # the attention viewer page: open, it asks for the key itself
    app.include_router(libretranslate.router, prefix="/libretranslate")  # open: it checks `api_key` itself
    app.include_router(deepl.router, prefix="/deepl")  # DeepL's API; it checks `DeepL-Auth-Key` itself
    app.include_router(deepl.router, include_in_schema=False)  # and at /v2, where DeepL's own server has it
    keyed = [Depends(require_api_key)] if app.state.settings.api_key else []
    app.include_router(router, dependencies=keyed)
    app.include_router(files_api.router, dependencies=keyed)  # files as jobs (app/files_api.py)
    return app


async def say_unwritable(settings: Settings) -> None:
    """A warning at start for a directory the server will keep files in and cannot: its requests get 500
    storage_error (a read-only root without a volume there), which the log then says nothing more of."""
    places = [("NMT_GLOSSARY_DIR", settings.glossaries(), "stored glossaries")]
    if settings.job_dir is not None:
        places.append(("NMT_JOB_DIR", settings.job_dir, "file translations"))
    for name, directory, what in places:
        if why := await asyncio.to_thread(unwritable, directory):
            log.warning("%s=%s: %s; %s will be refused (500 storage_error) until it can be", name, directory, why, what)


@asynccontextmanager
async def lifespan(app: FastAPI):
    await say_unwritable(app.state.settings)
    loading = asyncio.create_task(load(app))
    app.state.loading = loading  # tests await it
    await app.state.jobs.start(loading)  # jobs a stopped server left start again once the models are loaded
    try:
        yield
    finally:
        await app.state.jobs.stop()  # running jobs stay running on the disk, for the next start
        loading.cancel()
        with suppress(asyncio.CancelledError):
            await loading
        if app.state.models.engines:
            await asyncio.to_thread(app.state.models.stop)
            log.info("engine stopped" if len(app.state.models.engines) == 1 else "engines stopped")


async def load(app: FastAPI) -> None:
    """Load every model off the event loop, start its engine and warm it up; record failures instead of raising.
    `app.state.engine` is the default model's engine; the server stops (on_load_failure) when no model loaded."""
    models: Models = app.state.models
    await models.load()
    app.state.engine = models.engines.get(models.default)
    app.state.load_error = models.errors.get(models.default)
    if len(models.errors) == len(models.names):
        if app.state.on_load_failure is not None:
            app.state.on_load_failure("; ".join(f"{name}: {e}" for name, e in models.errors.items()))
        return
    freeze_startup_objects()
    if app.state.workers is not None:
        app.state.workers.loaded()


def freeze_startup_objects() -> None:
    """Move what startup created (torch, the model, the tokenizer: ~300k objects) out of the cyclic collector's
    reach. Otherwise every full collection walks them all, on whichever thread happens to allocate: the event loop
    between requests, or the worker in the middle of a decoder step. Measured in process at concurrency 32, the
    event loop's CPU per /translate request fell from 0.31-0.41 to 0.19-0.21 ms with the model work stubbed out
    (what remains is mostly FastAPI's routing and dependency solving)."""
    gc.collect()
    gc.freeze()


FILE_PATHS = {"/files", "/libretranslate/translate_file", "/deepl/v2/document", "/v2/document"}  # uploads
FORM_BYTES = 1 << 20  # an upload's body: the file, and this much for its other fields and the multipart framing


class BodyLimit:
    """413 for bodies over `max_bytes` (a file upload's: `file_bytes` and its fields): by Content-Length up front,
    and by counting what actually arrives."""

    def __init__(self, app: ASGIApp, max_bytes: int, file_bytes: int):
        self.app, self.max_bytes, self.file_bytes = app, max_bytes, file_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        upload = scope["path"].rstrip("/") in FILE_PATHS
        limit = self.file_bytes + FORM_BYTES if upload else self.max_bytes
        file = f"a file may have {self.file_bytes} bytes (NMT_FILE_MAX_BYTES) and its upload's other fields 1 MB"
        length = Headers(scope=scope).get("content-length", "")
        if length.isdigit() and int(length) > limit:
            message = f"the request body has {int(length)} bytes; " + (
                file if upload else f"the limit is {limit} (1 MB)"
            )
            answer = deepl.answer if deepl.speaks(scope["path"]) else error
            return await answer(413, message, "body_too_large")(scope, receive, closing(send))
        received = 0

        async def limited() -> dict:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(
                    413, f"the request body is over the limit of {limit} bytes" + (f": {file}" if upload else " (1 MB)")
                )
            return message

        await self.app(scope, limited, send)


def closing(send: Send) -> Send:
    """`send` with `Connection: close` on the response: one answered before its body was read, which a client that
    waits for `100 Continue` never sends, so the connection cannot go on to a next request (nginx closes it too)."""

    async def closing_send(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing_send


async def on_engine_error(request: Request, exc: Exception) -> JSONResponse:
    return engine_error(exc)


async def on_glossary_error(request: Request, exc: GlossaryError | JobError) -> JSONResponse:
    if exc.status >= 500:  # the server's storage, not the request: the operator's to see in the log
        log.error("%s %s: %s", request.method, request.url.path, exc)
    return error(exc.status, str(exc), exc.kind)


async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
    path = request.url.path
    multipart = request.headers.get("content-type", "").lower().startswith("multipart/")
    if exc.status_code == 400 and multipart and not deepl.speaks(path):  # an upload FastAPI could not read
        return error(422, f"the multipart form cannot be read: {exc.detail}", "validation_error")
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not read the body, e.g. not UTF-8
        return error(422, unreadable(exc.__cause__), "validation_error")
    if exc.status_code == 404:
        message = f"there is no endpoint {path}; GET /docs lists the endpoints"
    elif exc.status_code == 405:  # Starlette's Allow names one route's methods: the path may have several routes
        allowed = ", ".join(allowed_methods(request)) or (exc.headers or {}).get("Allow", "")
        exc.headers = {**(exc.headers or {}), "Allow": allowed} if allowed else exc.headers
        message = f"{request.method} is not allowed on {path}; use {allowed or 'another method'}"
    else:
        message = str(exc.detail)
    answer = deepl.answer if deepl.speaks(path) else error  # DeepL's clients read `message`
    return answer(exc.status_code, message, HTTP_KINDS.get(exc.status_code, "http_error"), exc.headers)


def unreadable(cause: BaseException) -> str:
    """Why a body is not JSON the routes can read."""
    if isinstance(cause, RecursionError):
        return "the body nests arrays or objects too deeply to read; a request needs 3 levels at most"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):  # json's int(): over 4300 digits
        return f"the body has an integer of more than {sys.get_int_max_str_digits()} digits; no field takes one"
    return f"the body is not valid JSON: {cause}"


async def on_validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    return error(422, describe(exc.errors(), request), "validation_error")


async def on_client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
    """A client gone while its body was read (a form's parser raises it): answered for the metrics alone."""
    return error(499, "the client closed the connection before its request was whole", "client_closed")


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    message = f"internal server error ({type(exc).__name__}); this is a bug in nmt-serve and the server log has details"
    return error(500, message, "internal_error")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route of the app takes on the request's path."""
    methods = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")
    routes = request.app.router.routes
    return [m for m in methods if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


def describe(errors: list[dict], request: Request) -> str:
    """One sentence per problem, naming the field and what it accepts."""
    out = []
    for e in errors[:5]:
        loc, kind, value = list(e["loc"]), e["type"], e.get("input")
        if kind == "json_invalid":
            return f"the body is not valid JSON: {e.get('ctx', {}).get('error', 'decode error')} at character {loc[-1]}"
        field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:]).lstrip(".")
        if not field:
            sent = request.headers.get("content-type")
            if kind != "missing" and "json" not in (sent or "").lower():  # the body was not read as JSON at all
                said = f"this request's is {sent!r}" if sent else "this request has none"
                out.append(f"the body must be sent with Content-Type: application/json ({said})")
                continue
            out.append(
                "the body must be a JSON object sent with Content-Type: application/json"
                + ("" if kind == "missing" else f", got {short(value)}")
            )
        elif kind == "missing":
            out.append(f"field {field!r} is required")
        elif kind == "extra_forbidden":
            out.append(f"unknown field {field!r}; allowed fields: {', '.join(body_fields(request))}")
        elif kind == "value_error":
            out.append(f"{field} {e['ctx']['error']}")
        else:
            out.append(f"{field}: {e['msg'].lower()}, got {short(value)}")
    return "; ".join(out)


def body_fields(request: Request) -> list[str]:
    route = request.scope.get("route")
    params = getattr(getattr(route, "dependant", None), "body_params", [])
    model = params[0].field_info.annotation if params else None
    return list(getattr(model, "model_fields", {}))


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
