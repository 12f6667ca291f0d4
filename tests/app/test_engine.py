"""The engine: limits, streaming, timeouts, and a many-text request coming back whole and in order."""

from __future__ import annotations

import asyncio

import pytest
import torch

from app.engine import InputTooLong, InvalidRequest, QueueFull, RequestTimeout
from app.loading import load_engine
from app.settings import BUNDLED_MODEL_DIR, Settings
from app.text import INLINE_CHARS, Engine
from model.checkpoint import load_checkpoint
from model.decoding import max_new_tokens_for
from model.evaluate import translate_corpus
from tests.app.helpers import TEXTS, slow, until

pytestmark = pytest.mark.anyio


@pytest.fixture
async def engine(tiny_model, tokenizer):
    e = Engine.local(
        tiny_model, tokenizer, max_input_tokens=32, max_new_tokens=40, max_batch_texts=10, max_batch_size=3
    )
    await e.start()
    yield e
    e.stop()


async def test_many_texts_come_back_in_order_as_each_translates_alone(engine, tiny_model, tokenizer):
    texts = [*TEXTS, "", "  "]
    out = await engine.translate(texts)
    for text, t in zip(texts, out):  # the default budget is nmt-eval's, capped at max_new_tokens
        budget = max_new_tokens_for(len(tokenizer.encode(text)), limit=40)
        expected = translate_corpus(tiny_model, tokenizer, [text], max_new_tokens=budget)
        assert [t.text] == expected
    assert [t.output_tokens for t in out[-2:]] == [0, 0]
    assert engine.ready and engine.core.batcher.peak_rows == 3


async def test_large_requests_are_tokenized_on_a_thread_with_the_same_results(engine, monkeypatch):
    threads = []
    to_thread = asyncio.to_thread
    monkeypatch.setattr(asyncio, "to_thread", lambda fn, *a: threads.append(fn.__name__) or to_thread(fn, *a))
    small = await engine.translate(TEXTS[:2], truncate=True)
    assert threads == [], "a small request is tokenized on the event loop"
    filler = "a dog runs " * (INLINE_CHARS // 10)  # over the inline limit on its own: cut to 32 tokens
    large = await engine.translate([*TEXTS[:2], filler], truncate=True)
    assert threads == ["split_texts", "sources", "translations", "put_back"]
    assert [t.text for t in large[:2]] == [t.text for t in small] and large[2].truncated
    with pytest.raises(InputTooLong, match=r"text\[2\] has \d+ tokens"):  # raised on the thread, as on the loop
        await engine.translate([*TEXTS[:2], filler])


async def test_limits_are_checked_before_any_model_work(engine):
    steps = engine.core.batcher.steps
    with pytest.raises(InvalidRequest, match="11 items; the limit is 10"):
        await engine.translate(["a"] * 11)
    with pytest.raises(InputTooLong, match=r"text\[1\] has \d+ tokens; the limit is 32"):
        await engine.translate(["a", "a dog " * 40])
    with pytest.raises(InvalidRequest, match="between 1 and 40"):
        await engine.translate("a", max_new_tokens=41)
    assert engine.core.batcher.steps == steps
    (t,) = await engine.translate("a dog " * 40, truncate=True, max_new_tokens=1)
    assert t.truncated and t.input_tokens == 32


def test_limits_must_fit_the_model(tiny_model, tokenizer):
    with pytest.raises(ValueError, match="max_positions=512"):
        Engine.local(tiny_model, tokenizer, max_new_tokens=512)


def test_engine_limits_must_admit_a_full_request(tiny_model, tokenizer):
    with pytest.raises(ValueError, match="max_queue=4 is below max_batch_texts=8"):
        Engine.local(tiny_model, tokenizer, max_batch_texts=8, max_queue=4)
    for share in (7, 33):
        with pytest.raises(ValueError, match=f"max_request_sequences={share} must be at least max_batch_texts=8 .* "
                                             "at most max_queue=32"):  # fmt: skip
            Engine.local(tiny_model, tokenizer, max_batch_texts=8, max_queue=32, max_request_sequences=share)


def test_a_request_may_hold_half_of_the_queue_unless_told_but_at_least_a_full_request(tiny_model, tokenizer):
    def share(**limits) -> int:
        return Engine.local(tiny_model, tokenizer, **limits).info()["limits"]["max_request_sequences"]

    assert share(max_batch_texts=8, max_queue=256) == 128
    assert share(max_batch_texts=8, max_queue=10) == 8
    assert share(max_batch_texts=8, max_queue=256, max_request_sequences=256) == 256


async def test_a_stream_has_an_event_per_token_and_ends_with_the_plain_translation(engine):
    for text in [*TEXTS[:4], "A café, 42 years old — naïve!"]:
        (plain,) = await engine.translate(text)
        events = [e async for e in await engine.translate_stream(text)]
        *tokens, last = events
        assert [e.index for e in tokens] == list(range(len(plain.token_ids)))
        assert [e.id for e in tokens] == plain.token_ids
        shown = ""
        for e in tokens:
            assert e.text_so_far == shown + e.text
            shown = e.text_so_far
        assert last.text.startswith(shown)
        assert (last.text, last.finish_reason) == (plain.text, plain.finish_reason)
        assert (last.input_tokens, last.output_tokens) == (plain.input_tokens, plain.output_tokens)
    (blank,) = [e async for e in await engine.translate_stream("  ")]
    assert blank.text == "" and blank.output_tokens == 0


async def test_a_stream_checks_limits_and_the_queue_before_it_starts(engine, monkeypatch):
    with pytest.raises(InputTooLong, match="text has"):
        await engine.translate_stream("a dog " * 40)
    with pytest.raises(InvalidRequest, match="between 1 and 40"):
        await engine.translate_stream("a", max_new_tokens=0)
    monkeypatch.setattr(engine.core.batcher, "load", engine.core.batcher.max_queue)
    with pytest.raises(QueueFull, match="the limit is"):
        await engine.translate_stream("a")
    with pytest.raises(QueueFull):
        await engine.translate(["a", "b"])


async def test_a_request_past_its_timeout_is_dropped_from_the_batch(tiny_model, tokenizer):
    e = Engine.local(slow(tiny_model, 0.01), tokenizer, max_new_tokens=200, request_timeout_s=0.2)
    await e.start()
    try:
        with pytest.raises(RequestTimeout, match=r"not answered within 0.2 s \(NMT_REQUEST_TIMEOUT_S\)"):
            await e.translate("A dog runs.", max_new_tokens=200)
        events = await e.translate_stream("A dog runs.", max_new_tokens=200)
        with pytest.raises(RequestTimeout):
            async for _ in events:
                pass
        await until(lambda: e.core.batcher.cache.n == 0 and e.core.batcher.load == 0)
        assert e.core.batcher.steps < 2 * 200
    finally:
        e.stop()


async def test_the_warm_up_is_no_request_a_slow_model_starts_past_the_request_timeout(tiny_model, tokenizer):
    """A model whose first steps are slower than NMT_REQUEST_TIMEOUT_S (a large one on a busy CPU) still starts; the
    requests after it keep their deadline."""
    e = Engine.local(slow(tiny_model, 0.05), tokenizer, max_new_tokens=200, request_timeout_s=0.1)
    await e.start()  # 8 steps of 0.05 s: past 0.1 s
    try:
        assert e.ready and e.core.batcher.steps >= 3
        with pytest.raises(RequestTimeout):
            await e.translate("A dog runs.", max_new_tokens=200)
    finally:
        e.stop()


# ---- CUDA (skipped without a GPU) ------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
async def test_on_cuda_the_model_and_its_cache_live_on_the_gpu(tiny_checkpoint, tiny_model, tokenizer):
    e = load_engine(Settings(model_dir=tiny_checkpoint, device="cuda", max_new_tokens=40))
    await e.start()
    try:
        assert next(e.core.model.parameters()).is_cuda and e.core.batcher.cache.kv.is_cuda
        info = e.info()
        assert info["device"].startswith("cuda") and info["device_name"] == torch.cuda.get_device_name(e.core.device)
        out = await asyncio.gather(*(e.translate(t) for t in TEXTS))
    finally:
        e.stop()
    budgets = [max_new_tokens_for(len(tokenizer.encode(t)), limit=40) for t in TEXTS]
    expected = [translate_corpus(tiny_model, tokenizer, [t], max_new_tokens=b)[0] for t, b in zip(TEXTS, budgets)]
    assert [t.text for (t,) in out] == expected


@cuda
@pytest.mark.parametrize("dtype, rate", [("float16", 0.9), ("bfloat16", 0.8)])
async def test_half_precision_matches_float32_on_most_tokens(dtype, rate, trained_checkpoint, pairs):
    """Greedy tokens in half precision agree with float32 at >= 90% (float16) / 80% (bfloat16) of positions.

    Position by position up to the longer output, so one early divergence costs the rest of that sentence.
    The bundled checkpoint is used when present, else the tiny trained one."""
    model_dir = BUNDLED_MODEL_DIR if (BUNDLED_MODEL_DIR / "model.safetensors").exists() else trained_checkpoint
    texts = [en for en, _ in pairs[:40]] if model_dir == trained_checkpoint else [*TEXTS, *(en for en, _ in pairs[:32])]
    outputs = {}
    for dt in ("float32", dtype):
        e = load_engine(Settings(model_dir=model_dir, device="cuda", dtype=dt))
        await e.start()
        try:
            assert e.info()["dtype"] == dt
            outputs[dt] = [t.token_ids for t in await e.translate(texts)]
        finally:
            e.stop()
    same = total = 0
    for a, b in zip(outputs["float32"], outputs[dtype]):
        same += sum(x == y for x, y in zip(a, b))
        total += max(len(a), len(b), 1)
    assert same / total >= rate, f"{dtype} matched {same}/{total} float32 tokens"


def test_load_checkpoint_in_half_precision_keeps_every_weight_on_the_device(tiny_checkpoint):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    model, _, _ = load_checkpoint(tiny_checkpoint, device="cuda", dtype=torch.float16)
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cuda", torch.float16)}
