"""Crashes: a server killed with SIGKILL mid-batch or mid-compile restarts on what it left on disk, and a step that
raises fails only the requests in it."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import threading
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import torch

import model.compile as model_compile
from app.settings import Settings
from bench.server import Server, free_port, poll_until, ready
from tests.app.conftest import StepGate, serve
from tests.app.helpers import assert_stream_matches, sse, until
from tests.app.live import env

TEXTS = ["A man is riding a bike.", "Two girls are playing in the park.", "The cat sleeps."]
# One row at a time, one_row_packages' limits: three graphs (the greedy step and the prefill, its packages, and the
# full step, built) keep compiling under a minute
COMPILING = {"NMT_MAX_BATCH_SIZE": "1", "NMT_MAX_NEW_TOKENS": "31", "NMT_MAX_INPUT_TOKENS": "16",
             "NMT_SCREEN_LOGITS": "0", "NMT_COMPILE_MODE": "default", "NMT_COMPILE": "background"}  # fmt: skip


@contextmanager
def server(model_dir: Path, port: int, log: Path, **settings: str) -> Iterator[subprocess.Popen]:
    """nmt-serve on `port`, its output appended to `log` (a pipe nobody reads could fill and stall it); killed on the
    way out if it still runs."""
    with log.open("a") as out:
        proc = Server(model_dir, "--device", "cpu", "--log-level", "info", port=port, env={**env(), **settings},
                      output=out).proc  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def wait_for(proc: subprocess.Popen, log: Path, condition, what: str, timeout: float):
    """Poll condition() until it returns something true; fail with the server's log if it exits or times out."""
    if found := poll_until(proc, condition, timeout):
        return found
    proc.kill()
    proc.wait()
    pytest.fail(f"nmt-serve: {what} not within {timeout} s (exit code {proc.returncode}):\n{log.read_text()}")


def compile_info(base: str) -> dict:
    return httpx.get(f"{base}/info", timeout=5).json()["compile"]


def compiling_ended(base: str) -> dict | None:
    info = compile_info(base)
    return None if info["state"] in ("pending", "compiling") else info


def stop(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, log.read_text()


def translations(base: str) -> list[dict]:
    # truncate: TEXTS[1] is longer than COMPILING's 16 input tokens in the trained model's vocabulary
    r = httpx.post(f"{base}/translate", json={"text": TEXTS, "return_tokens": True, "truncate": True}, timeout=60)
    assert r.status_code == 200, r.text
    return [{k: t[k] for k in ("text", "token_ids")} for t in r.json()["translations"]]


def digests(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}  # fmt: skip


def packages(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.pt2") if not p.name.startswith("."))


@pytest.fixture(scope="module")
def eager(trained_checkpoint) -> list[dict]:
    """TEXTS translated by the eager model with COMPILING's limits, in process."""

    async def run():
        settings = Settings(model_dir=trained_checkpoint, max_batch_size=1, max_new_tokens=31, max_input_tokens=16,
                            screen_logits=False, compile=False)  # fmt: skip
        async with serve(settings) as (_, client):
            r = await client.post("/translate", json={"text": TEXTS, "return_tokens": True, "truncate": True})
            return [{k: t[k] for k in ("text", "token_ids")} for t in r.json()["translations"]]

    return asyncio.run(run())


# ---- SIGKILL while compiling in the background, an empty package, leftovers: the restart ends compiled ----------


@pytest.fixture(scope="module")
def killed_while_compiling(trained_checkpoint, one_row_packages, tmp_path_factory):
    """A background-compiling server SIGKILLed at a random moment after its first graph serves (building the last
    one, the full step, or writing its package; the greedy step and the prefill are one_row_packages', loaded), then
    beside its packages: the last graph's package empty (a power cut before its bytes reached the disk), and two
    temporary packages, one a build killed while writing it left over an hour ago, one another server may be writing
    now. Returns what the restart on the same directory and port did."""
    root = tmp_path_factory.mktemp("killed-while-compiling")
    cache, log, port = root / "cache", root / "server.log", free_port()
    settings = {**COMPILING, "NMT_COMPILE_CACHE_DIR": str(cache)}
    shutil.copytree(one_row_packages[0], cache / model_compile.PACKAGE_DIR)
    base = f"http://127.0.0.1:{port}"
    with server(trained_checkpoint, port, log, **settings) as proc:
        wait_for(proc, log, lambda: ready(base), "ready", 90)
        first = wait_for(proc, log, lambda: compile_info(base)["serving"], "a compiled graph serving", 180)
        delay = random.uniform(0, 6)
        time.sleep(delay)
        at_kill = compile_info(base)
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
    assert first[0] == "greedy_step-1-1" and at_kill["state"] == "compiling", at_kill

    (step,) = (cache / model_compile.PACKAGE_DIR).glob("*/greedy_step-*.pt2")  # in the weights' digest's directory
    name = re.sub(r"-screen\d+", "", step.name.replace("greedy_step-", "logprob_step-"))  # the full step's, unscreened
    directory, last = step.parent, step.parent / name
    last.write_bytes(b"")
    stale, fresh = (directory / f".{last.stem}-{pid}.tmp.pt2" for pid in ("1-dead", "2-live"))
    for tmp in (stale, fresh):
        tmp.write_bytes(b"PK\x03\x04" + bytes(100))  # the start of a zip archive, cut short
    old = time.time() - model_compile.LEFTOVER_S - 60
    os.utime(stale, (old, old))
    intact = [p.name for p in packages(directory) if p != last]

    with server(trained_checkpoint, port, log, **settings) as restarted:  # the same port and settings, as a supervisor
        wait_for(restarted, log, lambda: ready(base), "ready after the restart", 90)
        while_compiling = translations(base)
        info = wait_for(restarted, log, lambda: compiling_ended(base), "compiling ended", 240)
        compiled = translations(base)
        stream = httpx.post(f"{base}/translate", json={"text": TEXTS[1], "stream": True, "truncate": True}, timeout=60)
        stop(restarted, log)
    return {
        "delay": delay, "at_kill": at_kill, "intact": intact, "info": info, "while_compiling": while_compiling,
        "compiled": compiled, "stream": stream, "directory": directory, "last": last, "stale": stale, "fresh": fresh,
        "log": log.read_text(),
    }  # fmt: skip


@pytest.mark.compiles
def test_a_server_killed_while_compiling_restarts_on_its_leftovers_serves_and_ends_compiled(
    killed_while_compiling, eager
):
    """The restart serves the eager model at once, builds again what is missing or broken, loads the rest, and then
    serves compiled; its translations never change."""
    k = killed_while_compiling
    why = f"killed {k['delay']:.1f} s after the first graph served ({k['at_kill']})\n{k['log']}"
    info = k["info"]
    assert info["state"] == "compiled" and info["loaded"] == len(k["intact"]), why
    assert info["built"] == 3 - len(k["intact"]) and any(n.startswith("greedy_step-") for n in k["intact"]), why
    assert info["serving"] == ["greedy_step-1-1", "prefill-1-1", "logprob_step-1-1"], why
    assert f"{k['last']}: it cannot be loaded" in k["log"] and "compiling it again" in k["log"], why
    assert k["while_compiling"] == eager and k["compiled"] == eager
    events = sse(k["stream"])
    assert events[-1]["text"] == eager[1]["text"] and [e["token"]["id"] for e in events[:-1]] == eager[1]["token_ids"]


@pytest.mark.compiles
def test_after_the_restart_every_package_is_whole_and_only_the_dead_builds_leftover_is_gone(killed_while_compiling):
    k = killed_while_compiling
    assert len(packages(k["directory"])) == 3 and k["last"].stat().st_size > 0, "the empty package was rebuilt"
    for package in packages(k["directory"]):
        with zipfile.ZipFile(package) as archive:
            assert archive.testzip() is None, package
        assert package.stat().st_mode & 0o444 == 0o444, "readable by servers run as other users (umask 022)"
    assert not k["stale"].exists() and "a package a stopped build had left half-written" in k["log"]
    assert k["fresh"].exists(), "a temporary package another server may be writing is left alone"


def zeroed(archive: bytes, ending: str) -> bytes:
    """The package with the first half of the member whose name ends with `ending` zeroed where it lies (a disk
    that lost those blocks), its recorded CRC-32 left as it was."""
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(ending))
    name, extra = struct.unpack("<HH", archive[info.header_offset + 26 : info.header_offset + 30])  # local header
    start, half = info.header_offset + 30 + name + extra, info.compress_size // 2
    return archive[:start] + bytes(half) + archive[start + half :]


BROKEN = {
    "empty (a power cut before its bytes reached the disk)": lambda b: b"",
    "cut short": lambda b: b[: len(b) // 2],
    "not a zip archive": lambda b: b"not a package" * 100,
    "its library partly zeroed": lambda b: zeroed(b, ".wrapper.so"),
    "its metadata JSON partly zeroed": lambda b: zeroed(b, ".wrapper_metadata.json"),
}


@pytest.mark.compiles
def test_every_kind_of_broken_package_is_ignored_with_a_warning(killed_while_compiling, tmp_path, caplog,
                                                                monkeypatch):  # fmt: skip
    """What compile_graphs does with each: `store.load` gives None (build it again) and says why; a whole copy loads."""
    directory = killed_while_compiling["directory"]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(directory.parent.parent))  # the server's: its CPU checks done
    original = next(p for p in packages(directory) if p.name.startswith("prefill"))
    expected = model_compile.environment(torch.device("cpu"))
    expected["threads"] = "1"  # what the server (OMP_NUM_THREADS=1) built it with
    whole = tmp_path / original.name
    shutil.copy(original, whole)
    assert model_compile.store.load(whole, expected) is not None
    for why, breaking in BROKEN.items():
        broken = tmp_path / f"broken-{original.name}"
        broken.write_bytes(breaking(original.read_bytes()))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="model.compile"):
            assert model_compile.store.load(broken, expected) is None, why
        (warning,) = [r.getMessage() for r in caplog.records if r.name == "model.compile"]
        assert "cannot be loaded" in warning and "compiling it again" in warning, (why, warning)


# ---- SIGKILL in the middle of a batch, then a restart -----------------------------------------------------------


def test_kill_9_mid_batch_fails_only_the_requests_in_flight_and_a_restart_answers_them_the_same(
    tiny_checkpoint, tmp_path
):
    """Requests answered before the kill got their whole 200; those in flight see a connection error, none hangs;
    the server restarted on the same port answers every one of them as before, and the checkpoint is unchanged."""
    log, port = tmp_path / "server.log", free_port()
    settings = {"NMT_MAX_BATCH_SIZE": "8", "NMT_COMPILE": "off"}
    base, before = f"http://127.0.0.1:{port}", digests(tiny_checkpoint)
    bodies = [{"text": TEXTS[i % 3], "max_new_tokens": 200 + i} for i in range(24)]
    streams = [{"text": TEXTS[i % 3], "max_new_tokens": 200, "stream": True} for i in range(8)]
    answered, streaming = threading.Semaphore(0), threading.Event()

    def plain(body: dict):
        try:
            r = httpx.post(f"{base}/translate", json=body, timeout=30)
        except httpx.TransportError as e:
            return e
        answered.release()
        return r

    def stream(body: dict):
        events = []
        try:
            with httpx.stream("POST", f"{base}/translate", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if line:
                        events.append(line)
                        streaming.set()
        except httpx.TransportError as e:
            return e, events
        return r, events

    with server(tiny_checkpoint, port, log, **settings) as proc, ThreadPoolExecutor(32) as pool:
        wait_for(proc, log, lambda: ready(base), "ready", 90)
        first = [pool.submit(plain, b) for b in bodies[:16]]
        assert answered.acquire(timeout=60), log.read_text()
        rest = [pool.submit(stream, b) for b in streams] + [pool.submit(plain, b) for b in bodies[16:]]
        assert streaming.wait(timeout=60), log.read_text()
        proc.kill()  # SIGKILL: no drain, no goodbye
        assert proc.wait(timeout=30) == -signal.SIGKILL
        results = [f.result(timeout=60) for f in first + rest]  # none hangs past its timeout

    plain_results = results[:16] + results[24:]
    stream_results = [r for r, _ in results[16:24]]
    ok = [(b, r) for b, r in zip(bodies, plain_results) if isinstance(r, httpx.Response)]
    lost = [r for r in plain_results + stream_results if isinstance(r, Exception)]
    assert all(r.status_code == 200 for _, r in ok), [r.text for _, r in ok if r.status_code != 200]
    assert ok and lost, f"{len(ok)} answered, {len(lost)} lost: the kill should fall in the middle of the batch"
    assert all(isinstance(e, (httpx.RemoteProtocolError, httpx.ReadError)) for e in lost), lost
    finished = [events for r, events in results[16:24] if isinstance(r, httpx.Response)]
    assert all('"finish_reason"' in events[-1] for events in finished), "a stream that ended ended whole"

    with server(tiny_checkpoint, port, log, **settings) as restarted:
        wait_for(restarted, log, lambda: ready(base), "ready after the restart", 90)
        for body, r in ok:
            again = httpx.post(f"{base}/translate", json=body, timeout=30)
            assert again.status_code == 200 and again.json()["translations"] == r.json()["translations"]
        events = sse(httpx.post(f"{base}/translate", json=streams[0], timeout=30))
        assert events[-1]["finish_reason"] in ("eos", "length")
        stop(restarted, log)
    assert digests(tiny_checkpoint) == before, "the checkpoint changed on disk"


# ---- a step that raises while streams and plain requests share the batch ----------------------------------------


def raising_when(decode_greedy, armed: threading.Event):
    """decode_greedy that raises RuntimeError("injected fault") once, at the first step after `armed` is set."""

    def step(tokens, cache):
        if armed.is_set():
            armed.clear()
            raise RuntimeError("injected fault")
        return decode_greedy(tokens, cache)

    return step


LONG = 40  # tokens: no row of the tiny random model ends before the failing step


@pytest.mark.anyio
async def test_a_failing_step_fails_only_its_streams_and_plain_requests_and_the_rest_complete(client, app, monkeypatch):
    """Three streams and two plain requests (six rows) share the step that raises: each stream ends with an
    `{"error", "type"}` event after the tokens it already had, each plain request gets a JSON 500; two streams and a
    plain request that arrived during that step decode after it, to the same tokens as ever."""
    engine = app.state.engine
    alone = {}
    for text in TEXTS + ["A dog runs near the water."]:
        r = await client.post("/translate", json={"text": text, "max_new_tokens": LONG, "return_tokens": True})
        alone[text] = r.json()
        assert len(alone[text]["translations"][0]["token_ids"]) >= 10, "long enough to be decoding at the fault"

    def stream(text: str):
        return asyncio.create_task(client.post("/translate", json={"text": text, "max_new_tokens": LONG,
                                                                   "stream": True}))  # fmt: skip

    def plain(texts: list[str]):
        return asyncio.create_task(client.post("/translate", json={"text": texts, "max_new_tokens": LONG,
                                                                   "return_tokens": True}))  # fmt: skip

    armed = threading.Event()
    monkeypatch.setattr(engine.core.model, "decode_greedy", raising_when(engine.core.model.decode_greedy, armed))
    gate = StepGate(engine.core.model, monkeypatch)
    gate.hold(lambda sizes: sizes[-2:] == [6, 6])  # every row has a token already
    try:
        streams, plains = [stream(t) for t in TEXTS], [plain(TEXTS[:2]), plain(TEXTS[2:])]
        await until(gate.paused.is_set)
        later_text = "A dog runs near the water."
        later = [stream(later_text), stream(TEXTS[0]), plain([later_text, TEXTS[1]])]
        await until(lambda: engine.core.batcher.load == 6 + 4)  # queued while the worker is in the step
        armed.set()
    finally:
        gate.release()

    for text, task in zip(TEXTS, streams, strict=True):
        *tokens, last = sse(await task)
        assert set(last) == {"error", "type"} and last["type"] == "model_error" and "injected fault" in last["error"]
        want = alone[text]["translations"][0]["token_ids"]
        assert tokens and [e["token"]["id"] for e in tokens] == want[: len(tokens)]
    for task in plains:
        r = await task
        assert (r.status_code, set(r.json()), r.json()["type"]) == (500, {"error", "type"}, "model_error")
        assert "injected fault" in r.json()["error"] and "other requests were not affected" in r.json()["error"]

    assert_stream_matches(sse(await later[0]), alone[later_text])
    assert_stream_matches(sse(await later[1]), alone[TEXTS[0]])
    r = await later[2]
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == [alone[t]["translations"][0] for t in (later_text, TEXTS[1])]
    assert 6 in gate.sizes and not armed.is_set()

    again = await client.post("/translate", json={"text": TEXTS[1], "max_new_tokens": LONG, "return_tokens": True})
    assert again.json()["translations"] == alone[TEXTS[1]]["translations"]
    await until(lambda: engine.core.batcher.load == 0 and engine.core.batcher.running == 0)
