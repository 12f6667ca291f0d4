"""A real nmt-serve on loopback for the benchmarks that drive it over HTTP (bench/chaos.py, bench/fairness.py,
bench/hostile_shapes.py): started, waited for until ready, measured from outside, stopped."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.load import free_port

HOST = "127.0.0.1"


class Server:
    """nmt-serve on a free loopback port (or `port`), eager, its log in a temporary file; `script`: Python code to run
    in its place (a server with a method patched, which the product has no switch for), ending in app.cli's main.
    `settings`: more NMT_* variables. A context manager that stops it."""

    def __init__(self, model_dir: str, threads: int, port: int | None = None, script: str | None = None,
                 **settings: str):  # fmt: skip
        self.port = port or free_port()
        self.base = f"http://{HOST}:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="nmt-serve-bench-", suffix=".log", delete=False)
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "NMT_COMPILE": "off", "NMT_LOG_LEVEL": "warning",
               "NMT_API_KEY": "", **settings}  # fmt: skip
        start = ["-c", script] if script else ["-m", "app.cli"]
        cmd = [sys.executable, *start, "--model-dir", model_dir, "--host", HOST, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"nmt-serve did not become ready; its log: {self.log.name}")

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)

    def kill(self) -> int:
        self.proc.kill()
        return self.proc.wait(timeout=60)

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
