"""NMT_FRONTENDS: HTTP front-ends apart from one engine process (app/frontends.py), started for real over TCP."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import httpx
import pytest

from bench.server import poll_until
from model.metadata import read_metadata, write_metadata
from tests.app.live import children, gone, live_server, stream_across_sigterm

pytestmark = pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")
TEXTS = ["A man is riding a bike.", "Two dogs play in the snow."]


@pytest.fixture
def single(tiny_checkpoint):
    with live_server(tiny_checkpoint, timeout=120, NMT_COMPILE="off") as pair:
        yield pair


@pytest.fixture
def split(tiny_checkpoint):
    with live_server(tiny_checkpoint, timeout=120, NMT_FRONTENDS="2", NMT_COMPILE="off") as pair:
        yield pair


def answers(base: str) -> dict:
    """What a few requests of each kind answer: plain, many texts, beam n-best, alignment, HTML, documents with
    segments and word confidence, glossaries, protected spans, prefixes, sampling, withholding, tokenizing, a stream
    and attention."""
    out = {}
    with httpx.Client(base_url=base, timeout=60) as client:
        for key, body in {
            "plain": {"text": TEXTS[0]},
            "many": {"text": TEXTS, "return_tokens": True},
            "beam": {"text": TEXTS[1], "beam_size": 3, "num_hypotheses": 2, "return_scores": True},
            "aligned": {"text": TEXTS[0], "return_alignment": True},
            "html": {"text": "<p>A man is <b>riding</b> a bike.</p>", "format": "html"},
            "document": {
                "text": f"{TEXTS[0]} {TEXTS[1]}\n\n{TEXTS[1]}",
                "return_segments": True,
                "return_signals": True,
                "return_word_confidence": True,
            },
            "glossary": {"text": TEXTS[0], "glossary": {"bike": "Velo"}},
            "protected": {"text": "A man {name} is riding a bike.", "protect": True},
            "prefixed": {"text": TEXTS[1], "target_prefix": "Zwei", "sampling_topk": 4, "seed": 7},
            "withheld": {"text": TEXTS, "min_confidence": 0.5},
            # more sentences than a front-end's share of the queue halved (its default limit once): 413 there
            "sentences": {"text": " ".join(["A dog runs."] * 100)},
        }.items():
            r = client.post("/translate", json=body)
            assert r.status_code == 200, r.text
            out[key] = r.json()
        for path, body in {
            "/tokenize": {"text": TEXTS, "side": "source"},
            "/detokenize": {"ids": [[5, 6, 7]], "side": "target"},
        }.items():
            r = client.post(path, json=body)
            assert r.status_code == 200, r.text
            out[path] = r.json()
        with client.stream("POST", "/translate", json={"text": TEXTS[1], "stream": True}) as r:
            out["stream"] = [json.loads(line.removeprefix("data: ")) for line in r.iter_lines() if line]
        r = client.post("/attention", json={"text": TEXTS[0]})
        assert r.status_code == 200, r.text
        out["attention"] = r.json()
        out["limits"] = client.get("/info").json()["limits"]  # the engine's whole queue, and a request's share of it
    return out


def test_front_ends_answer_every_kind_of_request_as_one_process_does(single, split):
    assert answers(split[1]) == answers(single[1])
    # /metrics through a front-end: its HTTP series, and the engine process's decoder series (which it does not feed)
    families = metric_families(httpx.get(f"{split[1]}/metrics", timeout=30).text)
    steps = families["nmt_decoder_steps"]
    assert steps["nmt_decoder_steps_total"] > 0 and families["nmt_generated_tokens"]["nmt_generated_tokens_total"] > 0
    assert {"nmt_requests", "nmt_request_duration_seconds", "nmt_sentence_confidence"} <= set(families)  # its own
    assert families["nmt_decoder_steps"] == metric_families(httpx.get(f"{split[1]}/metrics").text)["nmt_decoder_steps"]


def metric_families(text: str) -> dict[str, dict[str, float]]:
    """Each family of a Prometheus exposition (parsed by prometheus_client; a family twice fails), its samples summed
    by name."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in out, f"{family.name} twice"
        samples = out[family.name] = {}
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return out


def test_a_request_may_have_as_many_sequences_as_in_one_process_whatever_a_front_end_s_share(tiny_checkpoint):
    """NMT_MAX_REQUEST_SEQUENCES is of the engine's whole queue (256 here): 200 is more than a front-end's share of it,
    and a request of 150 sentences is still admitted (the server once refused to start)."""
    with live_server(tiny_checkpoint, timeout=120, NMT_FRONTENDS="2", NMT_COMPILE="off",
                     NMT_MAX_REQUEST_SEQUENCES="200", NMT_MAX_QUEUE="256") as (_, base):  # fmt: skip
        r = httpx.post(f"{base}/translate", json={"text": " ".join(["A dog runs."] * 150)}, timeout=120)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{base}/translate", json={"text": " ".join(["A dog runs."] * 201)}, timeout=120)
        assert r.status_code == 413 and "at most 200" in r.json()["error"], r.text


def test_sigterm_drains_a_stream_through_the_engine_then_everything_exits_0(split):
    proc, base = split
    pids = children(proc.pid)
    assert len(pids) == 3  # the engine and two front-ends
    tokens, last = stream_across_sigterm(proc, base)
    assert last["finish_reason"] in ("eos", "length") and last["usage"]["output_tokens"] >= len(tokens)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert all(gone(pid) for pid in pids)
    assert "an engine process" in out and "2 front-ends" in out


def test_the_directories_a_sigkill_leaves_are_removed_by_the_next_start(tiny_checkpoint, tmp_path):
    """The engine's socket and the jobs lie in directories of the server's own under TMPDIR, removed as it exits; a
    SIGKILL leaves them (nothing runs in a killed process), and the next server started there removes them."""
    settings = {"NMT_FRONTENDS": "1", "NMT_COMPILE": "off", "TMPDIR": str(tmp_path)}
    with live_server(tiny_checkpoint, timeout=120, **settings) as (proc, _):
        (left,) = tmp_path.glob("nmt-serve-engine-*")
        (jobs,) = tmp_path.glob("nmt-serve-jobs-*")  # the front-ends' jobs (no NMT_JOB_DIR), the parent's too
        assert (left / "engine").is_socket()
        proc.kill()
        proc.wait()
    assert (left / "engine").exists() and jobs.exists()
    an_hour_ago = time.time() - 3600  # found by a start an hour later (a start within a minute leaves it be)
    for path in (left / "owner", left, jobs / "owner", jobs):
        os.utime(path, (an_hour_ago, an_hour_ago))
    with live_server(tiny_checkpoint, timeout=120, **settings) as (proc, base):
        (mine,) = tmp_path.glob("nmt-serve-engine-*")
        assert mine != left and not left.exists() and not jobs.exists()
        assert httpx.post(f"{base}/translate", json={"text": TEXTS[0]}, timeout=60).status_code == 200
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and f"removed {left}: a directory a killed process had left" in out, out
    assert list(tmp_path.glob("nmt-serve-*")) == []  # its own, removed as it exited


def test_a_killed_engine_gets_503s_then_the_server_exits_non_zero(split):
    proc, base = split
    engine = children(proc.pid)[0]  # started first
    os.kill(engine, signal.SIGKILL)
    deadline = time.monotonic() + 30
    statuses = set()
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            statuses.add(httpx.post(f"{base}/translate", json={"text": TEXTS[0]}, timeout=10).status_code)
            statuses.add(httpx.get(f"{base}/metrics", timeout=10).status_code)  # the engine's series are gone too
        except httpx.TransportError:  # the front-ends stopped too
            break
    out, _ = proc.communicate(timeout=60)
    assert statuses <= {503}, (statuses, out)
    assert proc.returncode == 1 and "nmt-serve-engine" in out, out


def test_a_hung_engine_makes_ready_503_then_is_killed_and_the_server_exits_non_zero(tiny_checkpoint):
    """An engine that stops answering without ending (SIGSTOP here; a deadlock alike): requests and /ready get 503
    once the front-ends' heartbeat misses it (5 s), so a load balancer stops sending; after NMT_ENGINE_TIMEOUT_S the
    parent kills it and the server exits non-zero, for the service manager to restart it. /ready once said 200, and
    the server ran on, answering 503 for ever."""
    with live_server(tiny_checkpoint, timeout=120, NMT_FRONTENDS="1", NMT_COMPILE="off",
                     NMT_ENGINE_TIMEOUT_S="12") as (proc, base):  # fmt: skip
        engine = children(proc.pid)[0]  # started first
        os.kill(engine, signal.SIGSTOP)
        deadline, ready = time.monotonic() + 60, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                r = httpx.get(f"{base}/ready", timeout=10)
            except httpx.TransportError:  # the front-end stopped
                break
            if r.status_code == 503:
                ready = r.json()
                assert httpx.post(f"{base}/translate", json={"text": TEXTS[0]}, timeout=10).status_code == 503
                break
            time.sleep(0.5)
        out, _ = proc.communicate(timeout=90)
    assert ready is not None and "has not answered" in ready["error"], (ready, out)
    assert proc.returncode == 1 and "had not answered for" in out and gone(engine), out


def test_a_file_job_running_when_the_engine_dies_is_finished_by_the_next_server(tiny_checkpoint, tmp_path):
    """The engine's death is not the job's fault: the job is left running, as a stopped server leaves it, and the next
    server on the same NMT_JOB_DIR finishes it. It was saved failed for good ("the engine process is gone")."""
    env = {"NMT_FRONTENDS": "1", "NMT_COMPILE": "off", "NMT_JOB_DIR": str(tmp_path / "jobs")}
    text = "\n\n".join(f"A man is riding a bike number {i}. Two dogs play in the snow." for i in range(400))
    with live_server(tiny_checkpoint, timeout=120, **env) as (proc, base):
        r = httpx.post(f"{base}/files", files={"file": ("a.txt", text.encode())}, timeout=60)
        assert r.status_code == 202, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 60
        while httpx.get(f"{base}/files/{job}", timeout=10).json()["progress"]["done"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        os.kill(children(proc.pid)[0], signal.SIGKILL)  # the engine, started first
        out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1, out
    assert json.loads((tmp_path / "jobs" / job / "job.json").read_text())["status"] == "running", out
    with live_server(tiny_checkpoint, timeout=120, **env) as (_, base):
        deadline = time.monotonic() + 120
        while (state := httpx.get(f"{base}/files/{job}", timeout=10).json())["status"] != "done":
            assert state["status"] in ("queued", "running") and time.monotonic() < deadline, state
            time.sleep(0.2)
    assert state["progress"] == {"done": 400, "total": 400}


def stream_events(base: str, body: dict, started: threading.Barrier) -> list[dict] | str:
    """A stream's events, waiting at `started` once its first came; or how its connection broke."""
    try:
        with httpx.Client(base_url=base, timeout=60) as client, client.stream("POST", "/translate", json=body) as r:
            lines = (json.loads(line.removeprefix("data: ")) for line in r.iter_lines() if line)
            events = [next(lines)]
            started.wait(30)
            return events + list(lines)
    except httpx.TransportError as e:
        return f"{type(e).__name__}: {e}"


def test_a_killed_front_end_loses_its_connections_only_the_engine_frees_its_rows_and_the_server_exits_non_zero(split):
    """16 streams in flight across both front-ends; one front-end killed (SIGKILL). Its streams' connections break;
    the engine finds it gone at its next reply and cancels its requests; the server then stops as after any process
    ended: the other front-end's streams run to their last event (lost 0), and the parent exits 1 naming the dead."""
    proc, base = split
    engine, _, victim = children(proc.pid)
    body = {"text": "Two girls are playing in the park.", "stream": True, "max_new_tokens": 250}
    started = threading.Barrier(17)
    with ThreadPoolExecutor(16) as pool:
        streams = [pool.submit(stream_events, base, body, started) for _ in range(16)]
        started.wait(60)  # every stream has its first event: all 16 decode in the engine
        os.kill(victim, signal.SIGKILL)
        ends = [s.result(timeout=120) for s in streams]
    out, _ = proc.communicate(timeout=60)
    broken, whole = [e for e in ends if isinstance(e, str)], [e for e in ends if not isinstance(e, str)]
    assert broken and whole, ends  # connections reach both front-ends (SO_REUSEPORT spreads 16 of them)
    for events in whole:
        assert events[-1].get("finish_reason") in ("eos", "length"), events[-1]
        assert events[-1]["usage"]["output_tokens"] == len(events) - 1
    assert re.search(r"front-end \w+ is gone: cancelling its [1-9]\d* request", out), out
    assert proc.returncode == 1 and f"nmt-serve-frontend-1 (pid {victim}) exited with status -9" in out, out
    assert all(gone(pid) for pid in (engine, victim))


def loaded(pid: int, *libraries: str) -> list[str]:
    """The shared objects of `libraries` (parts of a path) that the process `pid` has mapped."""
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted(p for p in paths if any(lib in p for lib in libraries))


# torch's libraries, and sentencepiece's (which transformers' tokenizers load)
TORCH = ("libtorch", "torch/_C", "sentencepiece")


def translate_a_file(proc, client: httpx.Client) -> None:
    """A file uploaded to /files, translated as a job and downloaded."""
    r = client.post("/files", files={"file": ("notes.html", f"<p>{TEXTS[0]}</p><p>{TEXTS[1]}</p>".encode())})
    assert r.status_code == 202, r.text
    status = partial(client.get, r.headers["Location"])
    job = poll_until(proc, lambda: (j := status().json())["status"] in ("done", "failed") and j, 60)
    assert job and job["status"] == "done" and client.get(job["download"]).status_code == 200, job


@pytest.fixture
def split_en_de(tiny_checkpoint, tmp_path):
    """`split`, its model English to German, as LibreTranslate and DeepL requests name it."""
    model = shutil.copytree(tiny_checkpoint, tmp_path / "tiny-en-de")
    write_metadata(model, {**read_metadata(model), "source_language": "en", "target_language": "de"})
    with live_server(model, timeout=120, NMT_FRONTENDS="2", NMT_COMPILE="off") as pair:
        yield pair


def test_metrics_and_deepl_usage_count_every_front_end_s_requests_whichever_answers(split_en_de):
    """Each front-end writes its series where every one's /metrics reads them (prometheus_client's multiprocess
    mode): a scrape gives the server's counts, not the answering front-end's (which Prometheus read as resets)."""
    _, base = split_en_de

    def counts() -> tuple[float, float, float, int]:
        families = metric_families(httpx.get(f"{base}/metrics", timeout=30).text)
        requests = sum(v for k, v in families["nmt_requests"].items() if k == "nmt_requests_total")
        usage = httpx.get(f"{base}/deepl/v2/usage", timeout=30).json()["character_count"]
        return (requests, families["nmt_request_duration_seconds"]["nmt_request_duration_seconds_count"],
                families["nmt_sentence_confidence"]["nmt_sentence_confidence_count"], usage)  # fmt: skip

    before = counts()
    for i in range(12):  # a connection each: the kernel spreads them over the front-ends
        assert httpx.post(f"{base}/translate", json={"text": f"A dog {i}."}, timeout=60).status_code == 200
        r = httpx.post(f"{base}/deepl/v2/translate", data={"text": "A cat.", "target_lang": "DE"}, timeout=60)
        assert r.status_code == 200, r.text
    for scrape in range(6):  # each scrape and usage request counts too: 2 before, 2 each since
        after = counts()
        assert after[0] - before[0] == after[1] - before[1] == 24 + 2 + 2 * scrape, (before, after)
        assert (after[2] - before[2], after[3] - before[3]) == (24, 12 * len("A cat.")), (before, after)


def test_front_ends_never_load_torch_while_they_serve_every_kind_of_request(split_en_de):
    proc, base = split_en_de
    engine, *fronts = children(proc.pid)
    for _ in range(3):  # new connections each time, so that both front-ends (SO_REUSEPORT) serve some
        answers(base)
        with httpx.Client(base_url=base, timeout=60) as client:
            for path, body in {
                "/libretranslate/translate": {"q": TEXTS[0], "source": "auto", "target": "de"},
                "/libretranslate/detect": {"q": TEXTS[0]},
                "/deepl/v2/translate": {"text": TEXTS, "target_lang": "DE", "tag_handling": "html"},
            }.items():
                r = client.post(path, json=body)
                assert r.status_code == 200, (path, r.text)
            for path in ("/info", "/models", "/metrics", "/libretranslate/languages"):
                assert client.get(path).status_code == 200, path
            translate_a_file(proc, client)
    assert loaded(engine, "libtorch")  # the engine process's, which owns the model
    assert {pid: loaded(pid, *TORCH) for pid in fronts} == {pid: [] for pid in fronts}


# The engine process's side of app/, which imports torch: nothing else in app/ may (a front-end imports any of the rest)
ENGINE_SIDE = {"app.engine.compiling", "app.engine.core", "app.engine.core_server", "app.engine.device",
               "app.engine.memory", "app.engine.scheduler"}  # fmt: skip
BARRED = """
import importlib, sys

class Barred:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers", "sentencepiece"):
            raise ImportError(f"a front-end imported {name}")

sys.meta_path.insert(0, Barred())
"""


def test_the_engine_package_imports_nothing_of_app_outside_itself():
    """app/engine/ is the layer below the text and HTTP sides: no import of theirs, at a module's top or in a
    function (app/text/ and app/*.py may import the engine, never the other way round)."""
    root = Path(__file__).parents[2]
    found = []
    for path in sorted((root / "app" / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] == "app" and n.split(".")[:2] != ["app", "engine"]]  # fmt: skip
    assert found == []


def test_the_front_side_of_app_imports_without_torch():
    """Every module of app/ but the engine side's, imported with torch, transformers and sentencepiece barred: the
    traceback names the chain that reached one."""
    root = Path(__file__).parents[2]
    modules = sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in (root / "app").rglob("*.py")
    )
    assert ENGINE_SIDE <= set(modules)
    front = [m for m in modules if m not in ENGINE_SIDE]
    code = BARRED + f"for m in {front!r}:\n    importlib.import_module(m)\n"
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
