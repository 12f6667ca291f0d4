"""A real `nmt-serve` process on a free port, talked to over TCP, stopped with SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

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


@pytest.fixture
def server(tiny_checkpoint):
    port = free_port()
    cmd = nmt_serve("--model-dir", str(tiny_checkpoint), "--port", str(port), "--device", "cpu", "--log-level", "info")
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{base}/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail(
                f"nmt-serve did not become ready:\n{proc.communicate(timeout=10)[0] if proc.poll() is not None else ''}"
            )
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_nmt_serve_answers_over_tcp_and_stops_cleanly(server, tokenizer):
    proc, base = server
    with httpx.Client(base_url=base, timeout=30) as client:
        batch = client.post("/translate", json={"text": ["A man is riding a bike.", "", "Two dogs play."]})
        assert batch.status_code == 200
        assert [t["text"] == "" for t in batch.json()["translations"]] == [False, True, False]
        tokens = client.post("/tokenize", json={"text": "A dog."}).json()["results"][0]["tokens"]
        assert [t["id"] for t in tokens] == tokenizer.encode("A dog.")
        attention = client.post("/attention", json={"text": "A dog.", "layers": [0]}).json()
        assert attention["decoder_tokens"][0] == "<s>" and len(attention["cross_attention"]) == 1
        assert client.get("/nope").json()["type"] == "not_found"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "engine stopped" in out and "Finished server process" in out


def test_nmt_serve_exits_with_a_clear_message_when_the_model_cannot_load(tmp_path):
    cmd = nmt_serve("--model-dir", str(tmp_path / "missing"), "--port", str(free_port()))
    done = subprocess.run(cmd, check=False, env=env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "does not exist" in done.stderr.splitlines()[-1]


def test_nmt_serve_refuses_half_precision_on_cpu():
    done = subprocess.run(
        nmt_serve("--device", "cpu", "--dtype", "float16"),
        check=False,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "needs a CUDA device" in done.stderr
