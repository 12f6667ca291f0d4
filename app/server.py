"""One server process: the app under uvicorn, its graceful stop, and its logging (what nmt-serve, each NMT_WORKERS
worker and each NMT_FRONTENDS front-end run)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import uvicorn

from app.main import create_app
from app.protocol import HttpProtocol
from app.settings import Settings

if TYPE_CHECKING:
    from app.workers import WorkerGroup

STOP_GRACE_S = 5  # after NMT_SHUTDOWN_TIMEOUT_S, for the last answers to go out before uvicorn cancels what is left
QUIT_GRACE_S = 0.5  # after a second Ctrl-C stopped the engines, for their 503s to go out


def configure_logging(settings: Settings) -> None:
    level = "DEBUG" if settings.log_level == "trace" else settings.log_level.upper()
    logging.basicConfig(level=level, format="%(levelname)s:     %(name)s: %(message)s")


class HiddenKeys(logging.Filter):
    """An access log line with the key a query string carries hidden (LibreTranslate's clients send `api_key` there;
    a wrong guess is as much a secret's shape as the right one)."""

    KEY = re.compile(r"((?:api_key|auth_key)=)[^&#\s]*", re.IGNORECASE)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.KEY.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


HIDDEN_KEYS = HiddenKeys()


def serve(
    settings: Settings, sockets: list[socket.socket] | None = None, group: WorkerGroup | None = None
) -> int | str:
    """Run one server until it is stopped: 0, or what went wrong. `sockets`/`group`: a worker's (app/workers.py)."""
    failure: list[str] = []
    server: uvicorn.Server | None = None

    def stop_on_load_failure(message: str) -> None:
        failure.append(message)
        if server is not None:
            server.should_exit = True  # uvicorn then shuts down as on SIGTERM

    app = create_app(settings, on_load_failure=stop_on_load_failure)
    app.state.workers = group
    if group is not None and group.activity is not None:  # the front-ends' jobs give way to any one's requests
        app.state.jobs.activity.share_with(group.activity, group.index)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        timeout_graceful_shutdown=settings.shutdown_timeout_s + STOP_GRACE_S,
        # uvicorn's httptools protocol with the request head bounded in size and time (app/protocol.py)
        http=functools.partial(HttpProtocol, head_timeout_s=settings.head_timeout_s),
    )  # fmt: skip
    logging.getLogger("uvicorn.access").addFilter(HIDDEN_KEYS)  # after uvicorn.Config, which sets its logging up
    server = Server(config, stop_engines=app.state.models.stop, after=settings.shutdown_timeout_s)
    # uvicorn handles SIGINT/SIGTERM itself (stop accepting, finish in-flight requests, run the lifespan's
    # shutdown) and then re-raises the signal to the handler it found; make that one a no-op so a
    # graceful stop exits with status 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run(sockets=sockets)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if failure:
        where = f"the models ({settings.models})" if settings.models else f"the model from {settings.model_dir}"
        return f"nmt-serve: could not load {where}: {failure[0]}"
    if not server.started:
        return 1  # uvicorn has said why (e.g. the port is taken)
    if server.forced:
        return "nmt-serve: quit at a second Ctrl-C: the requests still running were answered 503"
    return 0


class Server(uvicorn.Server):
    """uvicorn's server, whose drain after SIGTERM ends by stopping the engines: the requests still running then get
    their 503 (a stream: an error event) and finish, instead of being cancelled by uvicorn a little later, which
    answers a plain-text 500 and cuts a stream off without its last event."""

    def __init__(self, config: uvicorn.Config, stop_engines: Callable[[], None], after: float):
        super().__init__(config)
        self.stop_engines, self.after = stop_engines, after
        self.forced = False

    def handle_exit(self, sig: int, frame) -> None:
        """A second Ctrl-C quits at once, as uvicorn's does, but the requests still running get their 503 first
        (uvicorn's forced quit cancelled them: plain-text 500s and tracebacks) and the server exits 130, not 0."""
        if not (self.should_exit and sig == signal.SIGINT):
            return super().handle_exit(sig, frame)
        self._captured_signals.append(sig)
        if not self.forced:
            self.forced = True
            threading.Thread(target=self._quit, name="nmt-force-quit", daemon=True).start()
        return None

    def _quit(self) -> None:
        self.stop_engines()  # every request still running ends with its 503 (a stream: its error event)
        time.sleep(QUIT_GRACE_S)  # for those answers to go out
        self.force_exit = True

    async def shutdown(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(self.after, lambda: loop.run_in_executor(None, self.stop_engines))  # it blocks
        try:
            await super().shutdown(sockets)  # stop accepting, wait for the requests in flight, run the lifespan's end
        finally:
            deadline.cancel()
