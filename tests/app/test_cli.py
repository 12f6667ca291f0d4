"""A real `nmt-serve` process on a free port, talked to over TCP, stopped with SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from app.cli import main
from bench.server import free_port, nmt_serve
from model.compile import PACKAGE_DIR
from tests.app.live import env, live_server, start_server, wait_ready


@pytest.fixture
def server(tiny_checkpoint):
    with live_server(tiny_checkpoint) as pair:
        yield pair


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
        client.get("/libretranslate/languages?api_key=s3cret-guess&x=1")  # as LibreTranslate's clients send it
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "engine stopped" in out and "Finished server process" in out
    assert "/libretranslate/languages?api_key=***&x=1" in out and "s3cret" not in out  # not in the access log


def test_sigterm_lets_a_running_stream_finish_then_exits_0(server):
    """SIGTERM right after a long stream's first event: uvicorn stops accepting, the stream runs to its end."""
    proc, base = server
    body = {"text": "Two girls are playing in the park.", "stream": True, "max_new_tokens": 250}
    with httpx.Client(base_url=base, timeout=60) as client, client.stream("POST", "/translate", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = (line for line in r.iter_lines() if line)
        first = next(lines)
        proc.send_signal(signal.SIGTERM)
        events = [json.loads(line.removeprefix("data: ")) for line in (first, *lines)]
    *tokens, last = events
    assert [e["index"] for e in tokens] == list(range(len(tokens)))
    assert last["finish_reason"] in ("eos", "length") and last["text"].startswith(tokens[-1]["text_so_far"])
    assert last["usage"]["output_tokens"] == len(tokens) + (last["finish_reason"] == "eos")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "engine stopped" in out


def test_a_checkpoint_that_cannot_load_stops_the_server_with_its_reason(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--model-dir", str(tmp_path / "missing"), "--port", str(free_port()), "--log-level", "warning"])
    assert "could not load the model" in str(exit.value.code) and "does not exist" in str(exit.value.code)


def test_a_bad_setting_is_named_as_set_with_what_is_allowed(monkeypatch):
    monkeypatch.setenv("NMT_MAX_INPUT_TOKENS", "0")
    with pytest.raises(SystemExit) as exit:
        main(["--port", "70000"])
    said = str(exit.value.code)
    assert said == (
        "nmt-serve: NMT_MAX_INPUT_TOKENS='0': Input should be greater than or equal to 1; "
        "NMT_PORT=70000: Input should be less than or equal to 65535"
    ), said  # it was pydantic's text: field names, a link, and every setting for a rule between two


def test_the_model_dir_flag_overrides_nmt_models_and_blank_nmt_models_is_unset(monkeypatch):
    served = []
    monkeypatch.setattr("app.cli.serve", lambda settings: served.append(settings) or 0)
    monkeypatch.setenv("NMT_MODELS", "fr=checkpoints/multi30k-en-fr")
    with pytest.raises(SystemExit):
        main(["--model-dir", "checkpoints/multi30k-en-de"])
    assert served[-1].model_dirs() == {"": Path("checkpoints/multi30k-en-de")}  # it served fr, saying nothing
    monkeypatch.setenv("NMT_MODELS", " ")  # as an env file's `NMT_MODELS= ` gives it: a traceback at start
    with pytest.raises(SystemExit):
        main([])
    assert served[-1].models is None and served[-1].model_dirs() == {"": served[-1].model_dir}


def test_half_precision_on_cpu_is_refused_before_starting():
    with pytest.raises(SystemExit, match="float16 needs a CUDA device"):
        main(["--device", "cpu", "--dtype", "float16"])


@pytest.mark.compiles
def test_two_precompiles_at_once_on_one_directory_both_succeed_and_a_server_then_loads_every_graph(
    trained_checkpoint, one_row_packages, tmp_path
):
    """nmt-serve --precompile fills NMT_COMPILE_CACHE_DIR and exits; two of them racing on one directory (two
    replicas starting together) both finish, and a server started after compiles nothing. The directory already
    holds two of the three graphs (one_row_packages, the limits below are theirs): the two race on the third, the
    full step's, both building it and writing its package, while loading the others."""
    settings = {"NMT_COMPILE_CACHE_DIR": str(tmp_path), "NMT_COMPILE_MODE": "default", "NMT_MAX_BATCH_SIZE": "1",
                "NMT_MAX_NEW_TOKENS": "31", "NMT_MAX_INPUT_TOKENS": "16", "NMT_SCREEN_LOGITS": "0"}  # fmt: skip
    shutil.copytree(one_row_packages[0], tmp_path / PACKAGE_DIR)
    cmd = nmt_serve("--model-dir", str(trained_checkpoint), "--device", "cpu", "--precompile")
    racing = [
        subprocess.Popen(cmd, env={**env(), **settings}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=900)[0] for p in racing]
    assert [p.returncode for p in racing] == [0, 0], outputs
    assert all("graphs compiled and 2 already there" in out for out in outputs), outputs
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp.pt2")]
    assert not leftovers, "a temporary package was left behind"

    proc, base = start_server(trained_checkpoint, **settings, NMT_COMPILE="blocking")
    try:
        wait_ready(proc, base, timeout=120)
        compile_info = httpx.get(f"{base}/info").json()["compile"]
    finally:
        proc.kill()
        log = proc.communicate(timeout=10)[0]
    assert compile_info["state"] == "compiled" and compile_info["built"] == 0 and compile_info["loaded"] == 3, log


def test_precompile_of_a_missing_checkpoint_fails_with_its_reason(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--model-dir", str(tmp_path / "nowhere"), "--device", "cpu", "--precompile"])
    assert exit_.value.code == 1 and "does not exist" in capsys.readouterr().err
