"""nmt-serve: run the translation service with uvicorn. Flags override NMT_* environment variables."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import signal
import socket
import sys
from collections.abc import Callable
from typing import get_args

import uvicorn
from pydantic import ValidationError

from app.engine.device import resolve_device
from app.main import create_app
from app.protocol import HttpProtocol
from app.settings import Dtype, LogLevel, Settings
from app.workers import WorkerGroup, serve_workers

STOP_GRACE_S = 5  # after NMT_SHUTDOWN_TIMEOUT_S, for the last answers to go out before uvicorn cancels what is left


def parse_args(argv: list[str] | None) -> dict:
    p = argparse.ArgumentParser(prog="nmt-serve", description=__doc__)
    p.add_argument("--model-dir", help="checkpoint directory (default: the bundled checkpoints/multi30k-en-de)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=get_args(Dtype), help="float32 (default); half types need CUDA")
    p.add_argument("--log-level", choices=get_args(LogLevel), help="default info")
    p.add_argument("--workers", type=int, help="server processes sharing the port (default 1; Linux)")
    p.add_argument("--frontends", type=int, help="HTTP front-end processes apart from one engine process (Linux)")
    p.add_argument(
        "--precompile", action="store_true",
        help="compile the graphs these settings serve with into NMT_COMPILE_CACHE_DIR (or load them to check), then "
        "exit without serving: a later start loads them in seconds",
    )  # fmt: skip
    return {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    precompile = args.pop("precompile", False)
    try:
        settings = Settings(**args)
        resolve_device(settings.device, settings.dtype)
    except (ValidationError, ValueError) as e:
        sys.exit(f"nmt-serve: {e}")
    configure_logging(settings)
    if precompile:
        sys.exit(run_precompile(settings))
    if settings.frontends:
        from app.frontends import serve_frontends

        sys.exit(serve_frontends(settings))
    if settings.workers > 1:
        sys.exit(serve_workers(settings))
    sys.exit(serve(settings))


def configure_logging(settings: Settings) -> None:
    level = "DEBUG" if settings.log_level == "trace" else settings.log_level.upper()
    logging.basicConfig(level=level, format="%(levelname)s:     %(name)s: %(message)s")


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
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        timeout_graceful_shutdown=settings.shutdown_timeout_s + STOP_GRACE_S,
        # uvicorn's httptools protocol with the request head bounded in size and time (app/protocol.py)
        http=functools.partial(HttpProtocol, head_timeout_s=settings.head_timeout_s),
    )  # fmt: skip
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
    return 0


class Server(uvicorn.Server):
    """uvicorn's server, whose drain after SIGTERM ends by stopping the engines: the requests still running then get
    their 503 (a stream: an error event) and finish, instead of being cancelled by uvicorn a little later, which
    answers a plain-text 500 and cuts a stream off without its last event."""

    def __init__(self, config: uvicorn.Config, stop_engines: Callable[[], None], after: float):
        super().__init__(config)
        self.stop_engines, self.after = stop_engines, after

    async def shutdown(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(self.after, lambda: loop.run_in_executor(None, self.stop_engines))  # it blocks
        try:
            await super().shutdown(sockets)  # stop accepting, wait for the requests in flight, run the lifespan's end
        finally:
            deadline.cancel()


def run_precompile(settings: Settings) -> int:
    """nmt-serve --precompile: each engine the server would build, its graphs compiled into the package directory."""
    import torch

    from app.loading import load_engine
    from app.models import threads_each
    from model.checkpoint import CheckpointError

    threads = threads_each(settings, torch.get_num_threads())  # as the server shares the cores out
    for name, directory in settings.model_dirs().items():
        try:
            engine = load_engine(settings, model_dir=directory, name=name or None, threads=threads)
        except (CheckpointError, OSError, ValueError) as e:
            print(f"nmt-serve: could not load the model from {directory}: {e}", file=sys.stderr)
            return 1
        if engine.core.graphs_at_start:
            print("nmt-serve: nothing to precompile on CUDA: the decoder step's CUDA graphs are captured at start-up, "
                  "in seconds")  # fmt: skip
            return 0
        graphs = engine.core.precompile()
        print(
            f"nmt-serve: {engine.name}: {len(graphs.built)} graphs compiled and {len(graphs.loaded)} already there, "
            f"in {graphs.seconds:.0f} s, in {graphs.directory}"
        )
    return 0


if __name__ == "__main__":
    main()
