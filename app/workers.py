"""NMT_WORKERS: several server processes on one port, as `uvicorn --workers` and gunicorn run them, for a GPU that one
process's event loop cannot keep busy.

Each worker is a whole server (its event loop, its engines, its KV cache and graphs) in a process of its own, started
with `spawn` (CUDA cannot be forked). Each binds its own listening socket to the port with SO_REUSEPORT, so the
kernel spreads the connections over the workers evenly by their addresses; with one shared socket, asyncio's accept
loop lets whichever worker wakes first take a whole burst of them. The parent binds the port first (and keeps it,
without listening) so that a port in use fails at once and port 0 picks one port for all.

The parent only supervises: SIGTERM or SIGINT is passed on to every worker once, and each drains as a single server
does; a worker that dies stops the others and the parent exits non-zero, for the service manager to restart the whole
server. The workers run in a process group of their own (a terminal's Ctrl-C reaches them once, through the parent)
and die with the parent (PR_SET_PDEATHSIG) if it is killed.

What the workers share is one flag each, loaded or not, and the jobs directory (NMT_JOB_DIR, or one temporary
directory the parent makes and removes): any worker answers for any job, the one that runs it holding its lock.
`/ready` answers 200 only once every worker has loaded, so a readiness probe that reaches any of them means them all.
Everything else is each worker's own: `/info`, `/metrics` and the queue limits are those of the worker the connection
reached (`/info`'s `worker` says which)."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from app.settings import Settings
from model.workspace import Workspace

log = logging.getLogger("nmt_serve")
PR_SET_PDEATHSIG = 1


@dataclass
class WorkerGroup:
    """This worker's place among the server's workers, and the loaded flags they share."""

    index: int
    count: int
    flags: Any  # multiprocessing.Array("b", count), one per worker
    activity: Any = None  # front-ends of one engine: their translation requests in flight (app/jobs/share.py)

    def loaded(self) -> None:
        self.flags[self.index] = 1

    def loaded_count(self) -> int:
        return sum(self.flags[:])

    def info(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count, "loaded": self.loaded_count(), "pid": os.getpid()}


def share(settings: Settings, workers: int, cores: int) -> Settings:
    """One worker's settings: its share of the GPU's memory and of the CPU's cores (unless NMT_THREADS says)."""
    return settings.model_copy(update={
        "gpu_memory_fraction": settings.gpu_memory_fraction / workers,
        "threads": settings.threads or max(1, cores // workers),
    })  # fmt: skip


def listening_socket(host: str, port: int, share: bool = True) -> socket.socket:
    """A TCP socket bound to (host, port) with SO_REUSEPORT (`share`), not yet listening (asyncio's server listens on
    it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


def hold_port(settings: Settings, what: str) -> socket.socket | None:
    """The server's port, bound (not listening) by the parent so that a port in use fails at once and port 0 picks
    one port for every process; None, having said why, where it cannot be (no SO_REUSEPORT, the port taken)."""
    if not hasattr(socket, "SO_REUSEPORT"):
        print(f"nmt-serve: {what} needs SO_REUSEPORT (Linux); run one process here", file=sys.stderr)
        return None
    try:
        if settings.port:  # bound alone first: SO_REUSEPORT would share the port with another server of this user's
            listening_socket(settings.host, settings.port, share=False).close()  # (its workers on it too)
        return listening_socket(settings.host, settings.port)
    except OSError as e:
        print(f"nmt-serve: cannot bind {settings.host}:{settings.port}: {e}", file=sys.stderr)
        return None


def die_with_parent() -> None:
    """Linux: SIGTERM to this process when the parent dies, whatever killed it; and out of the terminal's group."""
    os.setpgrp()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the parent's SIGTERM still reaches the workers
        pass


def run_worker(settings: Settings, index: int, count: int, flags: Any, port: int, parent: int) -> None:
    """A worker's process: one server on its own SO_REUSEPORT socket (app/cli.py's serve)."""
    die_with_parent()
    if os.getppid() != parent:  # the parent died before PR_SET_PDEATHSIG was in place
        sys.exit(1)
    from app.server import configure_logging, serve

    configure_logging(settings)
    sock = listening_socket(settings.host, port)
    sys.exit(serve(settings, sockets=[sock], group=WorkerGroup(index, count, flags)))


def serve_workers(settings: Settings) -> int:
    """NMT_WORKERS > 1: start the workers, pass signals on, and return the exit status when they have all ended."""
    n = settings.workers
    if (holder := hold_port(settings, "NMT_WORKERS > 1")) is None:
        return 1 if hasattr(socket, "SO_REUSEPORT") else 2
    port = holder.getsockname()[1]
    import torch  # the cores the workers share out: the same count a single server would use

    ctx = multiprocessing.get_context("spawn")
    flags = ctx.Array("b", n, lock=False)
    with holder, shared_jobs(share(settings, n, torch.get_num_threads())) as each:
        procs = [
            ctx.Process(target=run_worker, args=(each, i, n, flags, port, os.getpid()), name=f"nmt-serve-worker-{i}")
            for i in range(n)
        ]
        failed = supervise([procs], lambda: log.info(
            "%d workers on %s:%d (pids %s)", n, settings.host, port, ", ".join(str(p.pid) for p in procs)
        ))  # fmt: skip
    return exit_status(failed)


@contextmanager
def shared_jobs(settings: Settings) -> Iterator[Settings]:
    """The settings with one jobs directory for every process of the server (a job is then seen by any of them):
    NMT_JOB_DIR, else a temporary one, removed when the server ends."""
    if settings.job_dir is not None:
        yield settings
        return
    with temporary_jobs() as jobs:
        yield settings.model_copy(update={"job_dir": jobs})


def temporary_jobs() -> Workspace:
    """A jobs directory of the server's own in TMPDIR, for a server without NMT_JOB_DIR (its jobs do not survive a
    restart). A server killed with SIGKILL leaves it, its uploads in it, and the next one started removes it
    (model/workspace.py)."""
    return Workspace(Path(tempfile.gettempdir()), "nmt-serve-jobs-")


def exit_status(failed: list[str]) -> int:
    """The parent's exit status once its processes have ended: 1, saying why, where any failed."""
    if failed:
        print(f"nmt-serve: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def supervise(
    stages: list[list[Any]], started: Callable[[], None] = lambda: None, hung: Callable[[], str | None] | None = None
) -> list[str]:
    """Start the processes of every stage (the last stage first: what the others need), pass SIGTERM and SIGINT on,
    and return what went wrong once all have ended. `hung`, asked each second until the server stops, kills a process
    it finds hung and says so (a failure), or answers None.

    A signal, or any process that ends, stops the server: the first stage's processes get SIGTERM once (a second
    one would cut uvicorn's drain short), and each later stage's once every process before it has ended (front-ends
    drain through the engine before it stops). A process that ended with a non-zero status, or on its own, is a
    failure: the parent then exits non-zero, for the service manager to restart the whole server."""
    procs = [p for stage in stages for p in stage]
    stopping, failed, told = False, [], set()

    def tell_next() -> None:
        for stage in stages:
            for p in stage:
                if p.pid is not None and p.exitcode is None and p.pid not in told:
                    told.add(p.pid)
                    os.kill(p.pid, signal.SIGTERM)
            if any(p.exitcode is None for p in stage):
                return  # the later stages wait for this one to end

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True
        tell_next()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for stage in reversed(stages):
            for p in stage:
                p.start()
        if stopping:  # a signal came while they started
            tell_next()
        started()
        running = {p.sentinel: p for p in procs}
        while running:
            ended = wait(list(running), timeout=None if hung is None else 1.0)
            if hung is not None and not stopping and (why := hung()):
                log.error("%s", why)
                failed.append(why)
            for sentinel in ended:
                p = running.pop(sentinel)
                p.join()
                if not stopping or p.exitcode != 0:
                    failed.append(f"{p.name} (pid {p.pid}) exited with status {p.exitcode}")
                stop(signal.SIGTERM, None)  # one process down: the server stops
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failed
