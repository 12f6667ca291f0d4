"""A real `nmt-serve` process on a free port, for the tests that talk to one over TCP (and the clients they drive),
on bench/server.py's harness, which the benchmarks share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from bench.server import Server, poll_until, ready


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "NMT_API_KEY": ""}


def start_server(model_dir, log_level: str = "warning", **extra_env: str) -> tuple[subprocess.Popen, str]:
    """A real nmt-serve process on a free port (not yet ready) and its base URL."""
    server = Server(model_dir, "--device", "cpu", "--log-level", log_level, env={**env(), **extra_env},
                    output=subprocess.PIPE)  # fmt: skip
    return server.proc, server.base


def wait_ready(proc: subprocess.Popen, base: str, timeout: float = 90) -> None:
    """Poll /ready until 200; fail the test with the server's output if it exits or times out."""
    if poll_until(proc, lambda: ready(base), timeout):
        return
    proc.kill()
    pytest.fail(f"nmt-serve did not become ready:\n{proc.communicate(timeout=10)[0]}")


@contextmanager
def live_server(model_dir, timeout: float = 60, **extra_env: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """A ready nmt-serve (logging at info) and its base URL; killed afterwards unless the test stopped it."""
    proc, base = start_server(model_dir, log_level="info", **extra_env)
    try:
        wait_ready(proc, base, timeout=timeout)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def stream_across_sigterm(proc: subprocess.Popen, base: str) -> tuple[list[dict], dict]:
    """A long stream's events, the server sent SIGTERM after the first: its token events and its last one."""
    body = {"text": "Two girls are playing in the park.", "stream": True, "max_new_tokens": 250}
    with httpx.Client(base_url=base, timeout=60) as client, client.stream("POST", "/translate", json=body) as r:
        lines = (line for line in r.iter_lines() if line)
        first = next(lines)
        proc.send_signal(signal.SIGTERM)
        *tokens, last = [json.loads(line.removeprefix("data: ")) for line in (first, *lines)]
    return tokens, last


def gone(pid: int) -> bool:
    """Whether the process `pid` has ended (and been reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def children(pid: int) -> list[int]:
    """The processes the server started, in the order it started them (multiprocessing's own helpers left out)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        pids = sorted(int(p) for p in f.read().split())
    return [p for p in pids if "spawn_main" in open(f"/proc/{p}/cmdline").read()]
