"""NMT_WORKERS: several server processes on one port (app/workers.py), started for real and talked to over TCP."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import time

import httpx
import pytest

from app.settings import Settings
from app.workers import WorkerGroup, share
from bench.server import nmt_serve
from tests.app.conftest import serve
from tests.app.live import env, gone, live_server, stream_across_sigterm

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")


def workers_seen(base: str, connections: int = 40) -> dict[int, dict]:
    """/info over `connections` fresh connections (the kernel picks a worker for each): the workers that answered."""
    seen = {}
    for _ in range(connections):
        with httpx.Client(base_url=base, timeout=30) as client:  # a new connection, a new source port
            worker = client.get("/info").json()["worker"]
            seen[worker["index"]] = worker
    return seen


@pytest.fixture
def two_workers(tiny_checkpoint):
    with live_server(tiny_checkpoint, timeout=120, NMT_WORKERS="2", NMT_COMPILE="off") as pair:
        yield pair


def test_two_workers_share_the_port_translate_alike_and_drain_together_on_sigterm(two_workers):
    proc, base = two_workers
    seen = workers_seen(base)
    assert sorted(seen) == [0, 1]  # 40 connections all on one worker: 1 in 2**39
    assert all(w["count"] == 2 and w["loaded"] == 2 for w in seen.values())
    pids = {w["pid"] for w in seen.values()}
    assert len(pids) == 2 and proc.pid not in pids
    texts = ["A man is riding a bike.", "Two dogs play in the snow."]
    answers = set()
    for _ in range(12):
        with httpx.Client(base_url=base, timeout=30) as client:
            r = client.post("/translate", json={"text": texts})
            assert r.status_code == 200
            answers.add(tuple(t["text"] for t in r.json()["translations"]))
    assert len(answers) == 1  # every worker serves the same model
    with httpx.Client(base_url=base, timeout=30) as client:
        info = client.get("/info").json()
    assert info["threads"] == 1  # OMP_NUM_THREADS=1 shared out between two: at least one each

    # SIGTERM to the parent after a long stream's first event: its worker drains it to the end, then all exit 0
    tokens, last = stream_across_sigterm(proc, base)
    assert last["finish_reason"] in ("eos", "length") and last["usage"]["output_tokens"] >= len(tokens)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert all(gone(pid) for pid in pids)
    assert "2 workers on 127.0.0.1" in out and out.count("engine stopped") == 2


def test_a_file_uploaded_to_one_worker_is_followed_and_downloaded_through_either(two_workers):
    """The workers share the jobs directory: a job is seen by both, run by one, and downloaded from either."""
    _, base = two_workers
    with httpx.Client(base_url=base, timeout=30) as client:
        r = client.post("/files", files={"file": ("a.txt", b"A dog runs.\n\nA cat sleeps.")})
    assert r.status_code == 202, r.text
    job, deadline, answers = r.json()["id"], time.monotonic() + 60, set()
    while time.monotonic() < deadline:
        with httpx.Client(base_url=base, timeout=30) as client:  # a new connection: either worker
            status = client.get(f"/files/{job}")
        assert status.status_code == 200, status.text
        if status.json()["status"] == "done":
            break
        time.sleep(0.05)
    for _ in range(12):
        with httpx.Client(base_url=base, timeout=30) as client:
            answers.add(client.get(f"/files/{job}/download").content)
    assert len(answers) == 1 and answers.pop().count(b"\n\n") == 1


def test_a_worker_that_dies_stops_the_server_with_a_failure(two_workers):
    proc, base = two_workers
    seen = workers_seen(base)
    victim, other = seen[0]["pid"], seen[1]["pid"]
    os.kill(victim, signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"nmt-serve-worker-0 (pid {victim}) exited with status -9" in out
    deadline = time.monotonic() + 10
    while not gone(other) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(other)


@pytest.mark.parametrize("shared", [False, True], ids=["plain", "another server's workers"])
def test_a_taken_port_fails_before_any_worker_starts(tiny_checkpoint, shared):
    """Taken by a socket with SO_REUSEPORT too (another nmt-serve's workers, a leftover instance): the two servers
    shared the port, each client reaching either at random."""
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(shared))
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            nmt_serve("--model-dir", str(tiny_checkpoint), "--port", str(port), "--workers", "2"),
            env={**env(), "NMT_COMPILE": "off"}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot bind 127.0.0.1:{port}" in done.stderr


def test_each_worker_takes_its_share_of_the_gpu_memory_and_the_cores():
    s = Settings(gpu_memory_fraction=0.8, workers=4)
    each = share(s, 4, cores=16)
    assert each.gpu_memory_fraction == pytest.approx(0.2) and each.threads == 4
    assert share(s, 4, cores=2).threads == 1  # never none
    assert share(Settings(threads=3, workers=2), 2, cores=16).threads == 3  # NMT_THREADS is each worker's


@pytest.mark.anyio
async def test_ready_waits_for_every_worker_and_info_names_the_one_that_answers(settings):
    flags = multiprocessing.get_context("spawn").Array("b", 3, lock=False)
    async with serve(settings) as (app, client):
        app.state.workers = group = WorkerGroup(1, 3, flags)
        group.loaded()
        r = await client.get("/ready")
        assert r.status_code == 503
        assert r.json() == {"error": "1 of the server's 3 workers have loaded", "type": "not_ready"}
        flags[0] = flags[2] = 1
        assert (await client.get("/ready")).status_code == 200
        worker = (await client.get("/info")).json()["worker"]
        assert worker == {"index": 1, "count": 3, "loaded": 3, "pid": os.getpid()}
        app.state.workers = None
        assert (await client.get("/info")).json()["worker"] is None
