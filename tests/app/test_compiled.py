"""NMT_COMPILE and NMT_SCREEN_LOGITS serve the same translations as the plain eager model, through HTTP."""

import asyncio
import os
import shutil

import pytest
import torch

from app.settings import Settings
import model.compile as model_compile
from model.compile import PACKAGE_DIR
from tests.app.conftest import StepGate, serve, serve_in
from tests.app.helpers import assert_stream_matches, sse

pytestmark = pytest.mark.anyio
TEXTS = ["A man is riding a bike.", "Two girls are playing in the park.", "The cat sleeps.", "Hi", ""]


async def translate(
    settings: Settings, startup_timeout: float = 60, mode: str = "one process"
) -> tuple[dict, list[dict]]:
    """/info and the translations of TEXTS (and a stream) from a server in one of MODES."""
    async with serve_in(mode, settings, startup_timeout) as (_, client):
        info = (await client.get("/info")).json()
        # truncate: the one-row packages' limits (NMT_MAX_INPUT_TOKENS=16) are below the tiny vocabulary's 23 tokens
        # for TEXTS[1]
        r = await client.post("/translate", json={"text": TEXTS, "return_scores": True, "truncate": True})
        assert r.status_code == 200, r.text
        stream = await client.post("/translate", json={"text": TEXTS[0], "stream": True})
        assert stream.status_code == 200 and TEXTS and r.json()["translations"][0]["text"] in stream.text
        return info, r.json()["translations"]


@pytest.mark.compiles
async def test_compiled_server_translates_exactly_like_the_eager_one_and_a_restart_loads_its_graphs(
    trained_checkpoint, one_row_packages, tmp_path, monkeypatch
):
    # One row at a time, one_row_packages' limits: few graphs keep the compile short, and the prefill (built in the
    # "default" mode however NMT_COMPILE_MODE reads) is one_row_packages' own
    base = dict(model_dir=trained_checkpoint, max_new_tokens=31, max_input_tokens=16, max_batch_size=1,
                screen_logits=False)  # fmt: skip
    (prefill,) = one_row_packages[0].glob("*/prefill-*.pt2")  # in the weights' digest's directory
    (tmp_path / PACKAGE_DIR / prefill.parent.name).mkdir(parents=True)
    shutil.copy(prefill, tmp_path / PACKAGE_DIR / prefill.parent.name)
    info, compiled = await translate(Settings(**base, compile="blocking", compile_cache_dir=tmp_path), 600)
    eager_info, eager = await translate(Settings(**base, compile=False))
    assert info["compiled"] is True and eager_info["compiled"] is False and info["warnings"] == []
    assert info["compile"]["mode"] == "blocking" and info["compile"]["seconds"] > 0
    assert (info["compile"]["built"], info["compile"]["loaded"]) == (2, 1)  # the greedy and the full step for 1 row
    assert info["compile"]["jobs"] == min(2, len(os.sched_getaffinity(0)))  # built side by side (NMT_COMPILE_JOBS)
    assert info["compile"]["serving"] == ["greedy_step-1-1", "prefill-1-1", "logprob_step-1-1"]
    # NMT_COMPILE_MODE=max-autotune tunes the one-row steps' GEMMs; the prefill's go to oneDNN untuned
    autotuned = {p.name.split("-")[0]: p.name.endswith("-max-autotune.pt2") for p in tmp_path.glob("*/*/*.pt2")}
    assert autotuned == {"greedy_step": True, "logprob_step": True, "prefill": False}
    assert [t["text"] for t in compiled] == [t["text"] for t in eager]
    assert [t["score"] for t in compiled] == pytest.approx([t["score"] for t in eager], abs=1e-4)

    # restarted as a front-end and an engine process: the engine loads the graphs, /info reports them through it
    restarted_info, restarted = await translate(Settings(**base, compile="blocking", compile_cache_dir=tmp_path),
                                                mode="front-end")  # fmt: skip
    assert restarted_info["compile"]["built"] == 0 and restarted_info["compile"]["loaded"] == 3
    assert restarted_info["compile"]["jobs"] == 0
    assert [t["text"] for t in restarted] == [t["text"] for t in eager]
    assert restarted_info["compile"]["gemms"] == {}  # no step of LARGE_ROWS rows or more: nothing to choose

    # Were 1 row a large one, each step is built both ways, timed on this CPU, and the faster serves (/info says
    # which, and how fast each was); the default-mode greedy step is one_row_packages', the full step's is built
    monkeypatch.setattr(model_compile.graphs, "LARGE_ROWS", 1)
    (step,) = one_row_packages[0].glob("*/greedy_step-*-default.pt2")
    shutil.copy(step, tmp_path / PACKAGE_DIR / prefill.parent.name)
    measured_info, measured = await translate(Settings(**base, compile="blocking", compile_cache_dir=tmp_path), 600)
    gemms = measured_info["compile"]["gemms"]
    assert set(gemms) == {"greedy_step-1-1", "logprob_step-1-1"} and measured_info["compile"]["built"] == 1
    for graph, chosen in gemms.items():
        assert set(chosen["ms"]) == {"default", "max-autotune"} and min(chosen["ms"].values()) > 0
        assert chosen["chosen"] == min(chosen["ms"], key=chosen["ms"].get) and chosen["rows"] == 1
        (left,) = tmp_path.glob(f"*/*/{graph.split('-')[0]}-*.pt2")  # the other build's package is removed
        assert left.name.endswith(f"-{chosen['chosen']}.pt2")
    assert [t["text"] for t in measured] == [t["text"] for t in eager]
    again_info, _ = await translate(Settings(**base, compile="blocking", compile_cache_dir=tmp_path))
    assert again_info["compile"]["built"] == 0 and again_info["compile"]["gemms"] == gemms  # read, not timed again


async def test_a_screened_server_translates_exactly_like_a_float32_one(trained_checkpoint):
    """NMT_SCREEN_LOGITS (model/screen.py) changes no token; on a CPU without bfloat16 matmuls it stays off."""
    from model.screen import supported

    base = dict(model_dir=trained_checkpoint, max_new_tokens=30, max_input_tokens=32, max_batch_size=8, compile=False)
    info, screened = await translate(Settings(**base, screen_logits=True))
    plain_info, plain = await translate(Settings(**base, screen_logits=False))
    assert plain_info["screened_logits"] is False
    assert info["screened_logits"] is supported(torch.zeros(1))
    assert [t["text"] for t in screened] == [t["text"] for t in plain]
    assert [t["score"] for t in screened] == pytest.approx([t["score"] for t in plain], abs=1e-2)


@pytest.mark.compiles
async def test_background_compile_serves_at_once_and_a_stream_in_flight_goes_on_across_the_swap(
    trained_checkpoint, one_row_packages, monkeypatch, tmp_path
):
    """NMT_COMPILE=background: ready before the graphs are; the worker adopts them between two steps of a stream,
    which goes on, in order, to the eager model's tokens; from then on the compiled graphs serve. With
    one_row_packages' limits: the greedy step and the prefill are its packages, loaded; the full step is built."""
    base = dict(model_dir=trained_checkpoint, max_new_tokens=31, max_input_tokens=16, max_batch_size=1,
                screen_logits=False)  # fmt: skip
    shutil.copytree(one_row_packages[0], tmp_path / PACKAGE_DIR)
    body = {"text": TEXTS[0]}
    async with serve(Settings(**base, compile=False)) as (_, client):
        plain = (await client.post("/translate", json={**body, "return_tokens": True})).json()
        assert len(plain["translations"][0]["token_ids"]) >= 4
    background = Settings(**base, compile="background", compile_cache_dir=tmp_path, compile_mode="default",
                          request_timeout_s=600)  # the stream waits for the compile: not a timeout  # fmt: skip
    async with serve(background) as (app, client):
        engine = app.state.engine
        info = (await client.get("/info")).json()
        assert info["compile"].pop("gil") in ("held", "released")  # released once the extension is in (one a process)
        assert info["compiled"] is False and info["compile"] == {"mode": "background", "state": "compiling",
                                                                 "seconds": None, "built": None, "loaded": None,
                                                                 "serving": [], "graphs": "aotinductor",
                                                                 "kernels": "default", "gemms": {},
                                                                 "jobs": None}  # fmt: skip
        gate = StepGate(engine.core.model, monkeypatch, timeout=600)
        gate.hold(lambda sizes: len(sizes) == 3)  # the stream's third step waits for the compiled graphs
        stream = asyncio.create_task(client.post("/translate", json={**body, "stream": True}))
        assert await asyncio.to_thread(gate.paused.wait, 30)
        assert await asyncio.to_thread(engine.core.compiler.built.wait, 600) and not engine.compiled
        gate.release()
        assert_stream_matches(sse(await stream), plain)
        await engine.core.compiler.done()
        assert engine.compiled and engine.core.model.steps.greedy_step.missed == 0
        info = (await client.get("/info")).json()
        assert info["compiled"] is True and info["compile"]["state"] == "compiled" and info["compile"]["seconds"] > 0
        assert info["compile"]["serving"] == ["greedy_step-1-1", "prefill-1-1", "logprob_step-1-1"]
        assert (info["compile"]["built"], info["compile"]["loaded"]) == (1, 2) and info["compile"]["jobs"] == 1
        assert info["compile"]["gil"] == "released", "the graphs run holding the GIL (model/compile/nogil.py)"
        metrics, label = (await client.get("/metrics")).text, f'{{model="{engine.name}"}}'
        assert f"nmt_compiled{label} 1.0" in metrics and f"nmt_compile_duration_seconds{label} 0.0" not in metrics
        again = (await client.post("/translate", json={**body, "return_tokens": True})).json()
        assert again["translations"][0]["token_ids"] == plain["translations"][0]["token_ids"]


@pytest.mark.compiles
async def test_an_int8_server_says_so_and_its_graphs_translate_as_its_eager_int8_model(
    trained_checkpoint, one_row_int8_packages, tmp_path, monkeypatch
):
    """NMT_QUANTIZE=int8: /info reports it (the logit screen off); the compiled int8 graphs give the eager int8
    model's translations (the same function, as in float32); /attention runs the int8 layers too. Greedy requests
    only, with one_row_int8_packages' limits: the server loads the int8 greedy step's and prefill's graphs that
    fixture built (the server quantizes its model as it does), and needs not the full step's, which none would run
    (the int8 full step compiles the same layers: tests/model/test_compile.py has the int8 graphs' kernels)."""
    import model.cpu
    from model.compile import graphs_for, runtime
    from model.quantize import int8_warning

    monkeypatch.setattr(runtime, "graphs_for", lambda model, cache, steps: graphs_for(model, cache, ("greedy",)))
    # on an AVX2-only CPU (no VNNI) int8 decodes slower than float32: /info and the log say so
    monkeypatch.setattr(model.cpu, "cpu_info", lambda: model.cpu.CPUInfo("AMD EPYC", ("fma", "avx2")))
    base = dict(model_dir=trained_checkpoint, max_new_tokens=31, max_input_tokens=16, max_batch_size=1,
                quantize="int8")  # fmt: skip
    shutil.copytree(one_row_int8_packages[0], tmp_path / PACKAGE_DIR)
    info, compiled = await translate(
        Settings(**base, compile="blocking", compile_cache_dir=tmp_path, compile_mode="default"), 600
    )
    eager_info, eager = await translate(Settings(**base, compile=False))
    assert (info["quantize"], info["screened_logits"], info["compiled"]) == ("int8", False, True)
    warning = int8_warning(("fma", "avx2"))
    assert info["warnings"] == eager_info["warnings"] == [warning] and "VNNI" in warning
    assert all("-int8-" in p.name for p in tmp_path.glob("*/*/*.pt2"))
    assert (info["compile"]["built"], info["compile"]["loaded"]) == (0, 2)
    assert info["compile"]["serving"] == ["greedy_step-1-1", "prefill-1-1"]
    assert [t["text"] for t in compiled] == [t["text"] for t in eager]
    assert [t["score"] for t in compiled] == pytest.approx([t["score"] for t in eager], abs=5e-3)
    async with serve(Settings(**base, compile=False)) as (_, client):
        r = await client.post("/attention", json={"text": TEXTS[0]})
        assert r.status_code == 200 and r.json()["translation"] == eager[0]["text"]
    float_info, _ = await translate(Settings(**{**base, "quantize": "none"}, compile=False))
    assert float_info["quantize"] == "none"
