"""The HTTP API on the GPU, in-process: start-up with the decoder step captured as CUDA graphs before /ready, then
/translate (plain, batched and streamed), /tokenize, /attention and what the viewer page loads."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch
from asgi_lifespan import LifespanManager

from app import models
from app.main import create_app
from app.settings import Settings
from model.cuda_graphs import FAMILIES, graph_name, row_buckets, window_buckets
from tests.app.conftest import serve
from tests.app.helpers import (
    SENTENCES,
    assert_attention_of_the_served_translation,
    assert_stream_matches,
    stream_and_plain,
)
from tests.cuda.conftest import CUDA, DEVICE, ON_CUDA, cuda_only

pytestmark = [*CUDA, pytest.mark.anyio]
READY_WITHIN_S = 300
MORE = ["A café, 42 years old — naïve!", "Zwei Männer!", "Three dogs play in the snow near a red house."]


@pytest.fixture(scope="module")
async def served(bundled):
    """The app on the bundled checkpoint (float32, the KV cache's rows sized by the GPU's memory), graphs captured
    before /ready on CUDA (eager on the CPU), and how long its start took: (app, client, seconds)."""
    settings = Settings(model_dir=bundled, device=DEVICE, compile="blocking" if ON_CUDA else "off")
    seconds: dict[str, float] = {}
    load = models.load_engine

    def timed(s, metrics=None, **where):  # where: Models.load's model_dir, name, threads, gpu_memory_fraction
        t0 = time.perf_counter()
        engine = load(s, metrics, **where)
        seconds["load"] = time.perf_counter() - t0
        return engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "load_engine", timed)
        t0 = time.perf_counter()
        app = create_app(settings)
        async with LifespanManager(app, startup_timeout=60, shutdown_timeout=60):
            transport = httpx.ASGITransport(app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://nmt", timeout=120) as client:
                while (ready := await client.get("/ready")).status_code != 200:
                    assert app.state.load_error is None, app.state.load_error
                    assert time.perf_counter() - t0 < READY_WITHIN_S, ready.json()
                    await asyncio.sleep(0.05)
                seconds["ready"] = time.perf_counter() - t0
                patch.undo()
                yield app, client, seconds


@pytest.fixture
def client(served) -> httpx.AsyncClient:
    return served[1]


async def test_start_up_captures_the_graphs_before_ready(served, report):
    app, client, seconds = served
    assert (await client.get("/ready")).json()["status"] == "ready"
    info = (await client.get("/info")).json()
    cache, memory = app.state.engine.core.batcher.cache, info["memory"]
    report(load_s=round(seconds["load"], 2), capture_s=info["compile"]["seconds"], ready_s=round(seconds["ready"], 2),
           graphs=len(info["compile"]["serving"]), rows=memory["rows"], kv_cache_bytes=memory["kv_cache_bytes"],
           device_name=info["device_name"])  # fmt: skip
    assert info["device"].startswith(DEVICE) and info["dtype"] == "float32"
    assert info["limits"]["max_batch_size"] == memory["rows"] == cache.max_batch
    assert (memory["max_len"], memory["max_src_len"]) == (cache.max_len, cache.max_src_len)
    assert memory["kv_cache_bytes"] == sum(
        t.numel() * t.element_size() for t in (cache.kv, cache.cross_kv, cache.src_keep)
    )
    if not ON_CUDA:
        assert (info["compiled"], memory["rows"], memory["rows_from"]) == (False, 32, "cpu")
        return
    total = torch.cuda.get_device_properties(DEVICE).total_memory
    assert (memory["rows_from"], memory["gpu_memory_fraction"]) == ("gpu memory", 0.9)
    assert memory["kv_cache_bytes"] <= 0.9 * total
    assert memory["rows"] == 1024, "the bundled model's 1024 rows take ~3.3 GB in float32: any GPU's 90% holds them"
    assert info["compiled"] and info["compile"]["state"] == "compiled", info["compile"]
    windows = window_buckets(max(cache.max_len, cache.max_src_len))
    expected = {graph_name(f, r, w) for f in FAMILIES for r in row_buckets(cache.max_batch) for w in windows}
    assert set(info["compile"]["serving"]) == expected
    assert info["compile"]["seconds"] <= seconds["ready"]


@cuda_only
async def test_in_the_background_the_graphs_serve_once_captured(bundled, report):
    """NMT_COMPILE=background: the eager model answers at once, the graphs are captured between its steps, and the
    translations stay the same."""
    texts = [*SENTENCES, *MORE]
    settings = Settings(model_dir=bundled, device=DEVICE, compile="background", max_batch_size=64)
    async with serve(settings) as (app, client):
        t0 = time.perf_counter()
        first = [(await client.post("/translate", json={"text": t})).json()["translations"][0]["text"] for t in texts]
        served_while_capturing = 0
        while (info := (await client.get("/info")).json())["compile"]["state"] != "compiled":
            assert info["compile"]["state"] in ("pending", "compiling"), info["compile"]
            assert time.perf_counter() - t0 < READY_WITHIN_S, info["compile"]
            r = await client.post("/translate", json={"text": texts[served_while_capturing % len(texts)]})
            assert r.status_code == 200, r.text
            served_while_capturing += 1
        later = [(await client.post("/translate", json={"text": t})).json()["translations"][0]["text"] for t in texts]
        cache = app.state.engine.core.batcher.cache
    report(capture_s=info["compile"]["seconds"], served_while_capturing=served_while_capturing)
    graphs = (
        len(FAMILIES) * len(row_buckets(cache.max_batch)) * len(window_buckets(max(cache.max_len, cache.max_src_len)))
    )
    assert info["compiled"] and len(info["compile"]["serving"]) == graphs
    assert later == first


async def test_translate_one_many_and_streamed_agree(client, report):
    texts = [*SENTENCES, *MORE]
    alone = []
    for text in texts:
        events, plain = await stream_and_plain(client, {"text": text})
        assert_stream_matches(events, plain)  # the stream's tokens and text are the plain translation's
        alone.append(plain["translations"][0])
    r = await client.post("/translate", json={"text": texts, "return_tokens": True})
    assert r.status_code == 200, r.text
    assert r.json()["translations"] == alone
    report(translations=[t["text"] for t in alone[:2]])
    assert all(t["text"] and t["finish_reason"] == "eos" for t in alone)
    assert alone[0]["text"].startswith("Ein Mann")  # "A man is riding a bike."


async def test_tokenize_gives_the_tokenizers_ids_and_offsets(served):
    app, client, _ = served
    tokenizer = app.state.engine.tokenizer
    texts = [SENTENCES[0], MORE[0]]
    (first, second) = (await client.post("/tokenize", json={"text": texts})).json()["results"]
    for text, result in zip(texts, (first, second)):
        assert [t["id"] for t in result["tokens"]] == tokenizer.encode(text) and result["count"] == len(
            result["tokens"]
        )
        assert result["tokens"][-1] == {"id": tokenizer.eos_id, "text": "</s>", "start": len(text), "end": len(text),
                                        "special": True}  # fmt: skip


async def test_attention_has_a_row_per_query_that_sums_to_one(served):
    app, client, _ = served
    engine = app.state.engine
    await assert_attention_of_the_served_translation(client, engine.core.model.config, engine.tokenizer, SENTENCES[0])


async def test_what_the_viewer_loads(served):
    """The page, then its calls (app/static/main.js and its modules): /info; /tokenize, a beam search with
    alternatives, scores and alignments, and /attention teacher-forced on the best translation."""
    app, client, _ = served
    tokenizer = app.state.engine.tokenizer
    page = await client.get("/")
    assert page.status_code == 200 and 'src="static/main.js"' in page.text
    assert (await client.get("/static/main.js")).status_code == 200
    info = (await client.get("/info")).json()
    assert info["languages"] == {"source": "en", "target": "de"} and info["limits"]["max_input_tokens"] > 0
    text = "A little girl climbs into a wooden playhouse."
    tokens = (await client.post("/tokenize", json={"text": text, "side": "source"})).json()["results"][0]["tokens"]
    request = {"text": text, "return_tokens": True, "return_scores": True, "return_alignment": True}
    r = await client.post("/translate", json={**request, "beam_size": 4, "num_hypotheses": 3})
    assert r.status_code == 200, r.text
    (t,) = r.json()["translations"]
    assert len(t["hypotheses"]) == 3 and t["hypotheses"][0]["text"] == t["text"]
    scores = [h["score"] for h in t["hypotheses"]]
    assert scores == sorted(scores, reverse=True) and t["score"] == scores[0]
    assert [a["target_token"] for a in t["alignment"]] == list(range(len(t["token_ids"])))
    assert all(0 <= a["source_token"] < len(tokens) for a in t["alignment"])
    body = (await client.post("/attention", json={"text": text, "target": t["text"]})).json()
    assert body["decoder_tokens"][1:] == [
        tokenizer.id_to_token(i) for i in tokenizer.encode(t["text"], side="target")[1:-1]
    ]
    assert len(body["cross_attention"][0][0]) == len(body["decoder_tokens"])
    assert len(body["cross_attention"][0][0][0]) == len(tokens)
