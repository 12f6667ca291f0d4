"""NMT_FRONTENDS: HTTP front-end processes apart from one engine process, as vLLM's API servers and EngineCore.

The engine process loads every model (app/models.py, as a single server does: warm-up, compiled graphs in the
background) and serves their cores, in token ids, on a ZeroMQ socket in a directory only the server's user may enter
(app/engine/remote.py). Each front-end is a whole HTTP server (app/cli.py's serve) on its own SO_REUSEPORT socket of
the one port (app/workers.py says why), whose engines hold the text side of each model (tokenizer, limits, sentences,
HTML, detokenizing, confidence) and reach the model through a RemoteCore. Front-ends never load weights.

The parent only supervises, as it does NMT_WORKERS: it starts the engine, then the front-ends; SIGTERM or SIGINT
drains the front-ends first (each finishes its requests, as a single server does) and then stops the engine; a
process that dies stops the others and the parent exits non-zero, for the service manager to restart the server.
While the engine is gone, front-ends answer 503, `/ready` too. `/ready` is 200 once every front-end has loaded, which
is after the engine has. An engine that stops answering without ending (stopped, deadlocked) is found by the parent:
its event loop beats into shared memory each second while it serves, and one silent for NMT_ENGINE_TIMEOUT_S is
killed, which stops the server as a death does."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.jobs.share import slots_for
from app.settings import Settings
from app.workers import (
    WorkerGroup,
    die_with_parent,
    exit_status,
    hold_port,
    listening_socket,
    shared_jobs,
    supervise,
)
from model.workspace import Workspace

if TYPE_CHECKING:
    from app.models import Models

log = logging.getLogger("nmt_serve")


def run_engine(settings: Settings, address: str, parent: int, beat: Any = None) -> None:
    """The engine process: every model loaded and served on `address` until SIGTERM (`beat`: where its heart beats)."""
    die_with_parent()
    if os.getppid() != parent:
        sys.exit(1)
    from app.server import configure_logging

    configure_logging(settings)
    sys.exit(asyncio.run(engine_main(settings, address, beat)))


async def heartbeat(beat: Any) -> None:
    """Write the time (CLOCK_MONOTONIC, the same in every process) into `beat` each second, for the parent to see."""
    while True:
        beat.value = time.monotonic()
        await asyncio.sleep(1.0)


async def engine_main(settings: Settings, address: str, beat: Any = None) -> int | str:
    """Load every model and serve their cores on `address` until SIGTERM or SIGINT, beating into `beat` meanwhile."""
    from app.metrics import Metrics
    from app.models import Models

    metrics = Metrics()
    models = Models(settings, metrics)
    await models.load()
    if not models.engines:
        return "nmt-serve: the engine process loaded no model: " + "; ".join(
            f"{n}: {e}" for n, e in models.errors.items()
        )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    beating = asyncio.create_task(heartbeat(beat)) if beat is not None else None
    await serve_cores(models, address, stop)
    if beating is not None:
        beating.cancel()
    return 0


async def serve_cores(models: Models, address: str, stop: asyncio.Event) -> None:
    """Serve the loaded models' cores on `address` until `stop` is set, then stop the models."""
    from app.engine.core_server import CoreServer

    server = CoreServer({name: engine.core for name, engine in models.engines.items()}, address,
                        metrics=models.metrics, failed=models.errors)  # fmt: skip
    serving = asyncio.create_task(server.serve())
    log.info("engine process serving %s on %s", ", ".join(models.engines), address)
    await asyncio.wait([serving, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    serving.cancel()
    await asyncio.gather(serving, return_exceptions=True)
    await asyncio.to_thread(models.stop)


class FrontEnd(multiprocessing.context.SpawnProcess):
    """A front-end process, started with `env` added to the environment it inherits (which a spawned process reads
    as it starts, before it imports anything: prometheus_client's multiprocess mode is chosen at its import)."""

    def __init__(self, *args: Any, env: dict[str, str], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.env = env

    def start(self) -> None:
        before = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)
        try:
            super().start()
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def run_frontend(
    settings: Settings, index: int, count: int, flags: Any, port: int, parent: int, activity: Any = None
) -> None:
    """A front-end process: one HTTP server on its own SO_REUSEPORT socket, its models the engine process's."""
    die_with_parent()
    if os.getppid() != parent:
        sys.exit(1)
    from app.server import configure_logging, serve

    configure_logging(settings)
    sock = listening_socket(settings.host, port)
    sys.exit(serve(settings, sockets=[sock], group=WorkerGroup(index, count, flags, activity)))


def serve_frontends(settings: Settings) -> int:
    """Start the engine process and the front-ends, pass signals on, and return the exit status once all ended."""
    if (holder := hold_port(settings, "NMT_FRONTENDS")) is None:
        return 1 if hasattr(socket, "SO_REUSEPORT") else 2
    port = holder.getsockname()[1]
    # mode 0700: the socket is this user's alone; a server killed with SIGKILL leaves its directory, which the next
    # one started here removes (model/workspace.py)
    private = Workspace(Path(tempfile.gettempdir()), "nmt-serve-engine-")
    address = f"ipc://{private.path / 'engine'}"
    metrics = private.path / "metrics"  # the front-ends' Prometheus series, which each one's /metrics sums
    metrics.mkdir()
    n = settings.frontends
    ctx = multiprocessing.get_context("spawn")
    flags = ctx.Array("b", n, lock=False)
    beat = ctx.Value("d", 0.0, lock=False)  # the engine's last heartbeat; 0 until it serves
    activity = slots_for(ctx, n)  # translation requests in flight in each front-end, which file jobs give way to
    try:
        with holder, shared_jobs(settings.model_copy(update={"engine_address": address})) as front:
            engine = ctx.Process(target=run_engine, args=(settings, address, os.getpid(), beat),
                                 name="nmt-serve-engine")  # fmt: skip
            fronts = [
                FrontEnd(target=run_frontend, args=(front, i, n, flags, port, os.getpid(), activity),
                         name=f"nmt-serve-frontend-{i}", env={"PROMETHEUS_MULTIPROC_DIR": str(metrics)})
                for i in range(n)
            ]  # fmt: skip

            def hung() -> str | None:
                silent = time.monotonic() - beat.value
                if not beat.value or silent < settings.engine_timeout_s or engine.exitcode is not None:
                    return None
                os.kill(engine.pid, signal.SIGKILL)
                return f"the engine process (pid {engine.pid}) had not answered for {silent:.0f} s: killed"

            failed = supervise([fronts, [engine]], lambda: log.info(
                "an engine process (pid %d) and %d front-ends on %s:%d", engine.pid, n, settings.host, port
            ), hung)  # fmt: skip
    finally:
        private.remove()
    return exit_status(failed)
