"""A real `nmt-serve` process on a free port, for the tests that talk to one over TCP (and the clients they drive)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest


def nmt_serve(*args: str) -> list[str]:
    exe = shutil.which("nmt-serve")
    return [exe, *args] if exe else [sys.executable, "-m", "app.cli", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "NMT_API_KEY": ""}


def start_server(model_dir, log_level: str = "warning", **extra_env: str) -> tuple[subprocess.Popen, str]:
    """A real nmt-serve process on a free port (not yet ready) and its base URL."""
    port = free_port()
    cmd = nmt_serve("--model-dir", str(model_dir), "--port", str(port), "--device", "cpu", "--log-level", log_level)
    proc = subprocess.Popen(
        cmd, env={**env(), **extra_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen, base: str, timeout: float = 90) -> None:
    """Poll /ready until 200; fail the test with the server's output if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base}/ready", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
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
