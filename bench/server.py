"""A real nmt-serve on loopback, for the benchmarks and the tests that talk to one over TCP: a free port, the command
that starts it, a poll until /ready answers 200, and the process started, measured from outside and stopped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Self, TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
T = TypeVar("T")


def free_port() -> int:
    """A loopback port that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def nmt_serve(*args: str) -> list[str]:
    """The command line that runs nmt-serve with `args`: its console script where installed, else app.cli."""
    exe = shutil.which("nmt-serve")
    return [exe, *args] if exe else [sys.executable, "-m", "app.cli", *args]


def ready(base: str) -> bool:
    """Whether the server at `base` answers /ready with 200 (httpx.TransportError while it does not listen yet)."""
    return httpx.get(f"{base}/ready", timeout=2).status_code == 200


def poll_until(proc: subprocess.Popen, condition: Callable[[], T], timeout: float) -> T | None:
    """condition()'s first true answer, asked every 0.2 s while `proc` runs, for at most `timeout` seconds (a
    connection refused or timed out counts as no answer yet); None if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if found := condition():
                return found
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    return None


class Server:
    """nmt-serve started on a port (a free one unless `port`) and reached at `base` on 127.0.0.1, with `args` after
    its --model-dir (none where `env` has NMT_MODELS) and --port; `env`: its environment (this process's by default);
    `output`: where its stdout and stderr go (a file, subprocess.PIPE, or None for this process's own two);
    `command`: what runs in place of nmt_serve()'s (a Python script that ends in app.cli's main, say). Not ready
    when made: wait_ready waits for it. A context manager that stops it."""

    def __init__(self, model_dir: str | os.PathLike, *args: str, port: int | None = None,
                 env: dict[str, str] | None = None, output: IO | int | None = None,
                 command: Sequence[str] | None = None, cwd: str | os.PathLike | None = None):  # fmt: skip
        self.port = port or free_port()
        self.base = f"http://{HOST}:{self.port}"
        models = (env if env is not None else os.environ).get("NMT_MODELS")  # the flag would override it
        where = [] if models else ["--model-dir", str(model_dir)]
        cmd = [*(command or nmt_serve()), *where, "--port", str(self.port), *args]
        stderr = None if output is None else subprocess.STDOUT
        self.proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=output, stderr=stderr, text=True)
        self.log: Path | None = None  # a log file of its own: removed once it stops cleanly, kept (and named) if not

    def wait_ready(self, timeout: float) -> bool:
        """Whether /ready answered 200 within `timeout` seconds, before the process exited."""
        return poll_until(self.proc, lambda: ready(self.base), timeout) is not None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
        self._drop_log()

    def _drop_log(self, meant: bool = False) -> None:
        if self.log is None:
            return
        if self.proc.returncode == 0 or meant:
            self.log.unlink(missing_ok=True)
        else:
            print(f"nmt-serve exited with status {self.proc.returncode}; its log: {self.log}", file=sys.stderr)
        self.log = None

    def kill(self) -> int:
        """SIGKILL, meant (a drill): its log goes as after a clean stop."""
        self.proc.kill()
        code = self.proc.wait(timeout=60)
        self._drop_log(meant=True)
        return code

    def gauges(self, names: tuple[str, ...] = ("nmt_queue_length", "nmt_running_batch_size")) -> float:
        """Sequences in the engine (waiting and decoding, by default), summed over the models."""
        text = httpx.get(f"{self.base}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(tuple(name + "{" for name in names)))  # fmt: skip

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))

    def connections_held(self, clients: list[socket.socket]) -> int:
        """How many of the clients' connections are established and accepted (the server holds a descriptor)."""
        sockets, ports = set(), {s.getsockname()[1] for s in clients}
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                sockets.add(os.readlink(f"/proc/{self.proc.pid}/fd/{fd}"))
            except OSError:
                pass
        with open("/proc/net/tcp") as f:  # the server's side of each: local port ours, remote port the client's
            rows = [line.split() for line in f.readlines()[1:]]
        return sum(
            int(r[1].split(":")[1], 16) == self.port and int(r[2].split(":")[1], 16) in ports and r[3] == "01"
            and f"socket:[{r[9]}]" in sockets
            for r in rows
        )  # fmt: skip


def eager_server(model_dir: str, threads: int, port: int | None = None, script: str | None = None,
                 **settings: str) -> Server:  # fmt: skip
    """A ready nmt-serve for a benchmark: on a free loopback port (or `port`), eager, `threads` threads, no API key, its
    log in a temporary file; `script`: Python code to run in its place (a server with a method patched, which the
    product has no switch for), ending in app.cli's main. `settings`: more NMT_* variables. Exits this process,
    naming the log, if the server is not ready within 120 s."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "NMT_COMPILE": "off", "NMT_LOG_LEVEL": "warning",
           "NMT_API_KEY": "", **settings}  # fmt: skip
    command = [sys.executable, "-c", script] if script else [sys.executable, "-m", "app.cli"]
    with tempfile.NamedTemporaryFile(prefix="nmt-serve-bench-", suffix=".log", delete=False) as log:
        server = Server(model_dir, "--host", HOST, port=port, env=env, output=log, command=command, cwd=ROOT)
    if not server.wait_ready(120):
        server.stop()  # its log is kept: no clean exit
        sys.exit(f"nmt-serve did not become ready; its log: {log.name}")
    server.log = Path(log.name)
    return server
