"""Continuous batching gives every sequence exactly what greedy decoding alone gives it, and faults stay local."""

from __future__ import annotations

import asyncio
import copy
import time

import pytest
import torch

from app.batcher import Batcher, EngineFailure, EngineUnavailable
from model.decoding import greedy_decode

pytestmark = pytest.mark.anyio
TEXTS = [
    "A man is riding a bike.", "Two girls are playing in the park.", "The cat sleeps.", "A dog runs near the water.",
    "An old man is standing in the snow.", "Three people eat.", "Hi", "The boy is jumping at the beach near the water.",
]  # fmt: skip


def ends_early(tiny_model):
    """A copy of the tiny model that emits </s> after (source length % 7 + 2) tokens, so lengths vary."""
    m = copy.deepcopy(tiny_model)
    real, eos = m.decode_step, m.config.eos_id

    def decode_step(tokens, cache):
        n = tokens.size(0)
        pos, src_len = cache.positions[:n].clone(), cache.src_keep[:n].sum(1)  # (N,), (N,)
        logits = real(tokens, cache)  # (N, V)
        logits[pos == src_len % 7 + 2, eos] = 1e4
        return logits

    m.decode_step = decode_step
    return m


def slow(tiny_model, seconds: float = 0.002):
    """A copy of the tiny model whose decoder step takes a little while, so a test can act mid-sequence."""
    m = copy.deepcopy(tiny_model)
    real = m.decode_step

    def decode_step(tokens, cache):
        time.sleep(seconds)
        return real(tokens, cache)

    m.decode_step = decode_step
    return m


@pytest.fixture
def sources(tokenizer):
    return [tokenizer.encode(t) for t in TEXTS]


def batcher(model, max_batch_size=32, max_len=60, prefill_tokens=2048) -> Batcher:
    b = Batcher(model, max_batch_size, max_len, max_src_len=64, prefill_tokens=prefill_tokens)
    b.start()
    return b


def alone(model, src: list[int], budget: int):
    (h,) = greedy_decode(model, torch.tensor([src]), budget)
    return h


async def until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def test_staggered_sequences_through_a_small_cache_equal_greedy_alone(tiny_model, sources):
    model = ends_early(tiny_model)
    b = batcher(model, max_batch_size=3, prefill_tokens=12)
    try:

        async def one(i: int, src: list[int]):
            await asyncio.sleep(0.003 * (i % 3))  # arrive while others are mid-sequence
            return await b.generate([src], [2 + i])

        results = await asyncio.gather(*(one(i, s) for i, s in enumerate(sources * 2)))
    finally:
        b.stop()
    for i, (src, (h,)) in enumerate(zip(sources * 2, results)):
        ref = alone(model, src, 2 + i)
        assert (h.tokens, h.finish_reason) == (ref.tokens, ref.finish_reason)
        assert h.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
    assert {h.finish_reason for (h,) in results} == {"eos", "length"}
    assert 1 < b.peak_rows <= 3 and b.cache.n == 0


async def test_admission_budget_of_one_sequence_per_step_keeps_order(tiny_model, sources):
    model = ends_early(tiny_model)
    b = batcher(model, max_batch_size=2, prefill_tokens=1)
    try:
        hyps = await b.generate(sources, [20] * len(sources))
    finally:
        b.stop()
    assert [h.tokens for h in hyps] == [alone(model, s, 20).tokens for s in sources]


async def test_a_cancelled_request_leaves_the_batch(tiny_model, sources):
    b = batcher(slow(tiny_model), max_len=200)
    try:
        task = asyncio.create_task(b.generate(sources[:2], [200, 200]))
        await until(lambda: b.cache.n == 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until(lambda: b.cache.n == 0)
        assert b.steps < 100
        (h,) = await b.generate(sources[:1], [3])
        assert len(h.logprobs) == 3
    finally:
        b.stop()


async def test_a_failing_step_fails_its_sequences_and_the_next_ones_succeed(tiny_model, sources):
    model = copy.deepcopy(tiny_model)
    real, calls = model.decode_step, []

    def flaky(tokens, cache):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected fault")
        return real(tokens, cache)

    model.decode_step = flaky
    b = batcher(model)
    try:
        with pytest.raises(EngineFailure, match="injected fault"):
            await b.generate(sources[:3], [10, 10, 10])
        assert b.cache.n == 0
        (h,) = await b.generate(sources[:1], [10])
        assert h.tokens == alone(tiny_model, sources[0], 10).tokens
    finally:
        b.stop()


async def test_a_failed_admission_fails_only_the_new_sequence(tiny_model, sources, monkeypatch):
    b = batcher(slow(tiny_model))
    try:
        first = asyncio.create_task(b.generate(sources[:1], [60]))
        await until(lambda: b.cache.n == 1)

        def broken_add(model, src):
            raise RuntimeError("no memory left")

        monkeypatch.setattr(b.cache, "add", broken_add)
        with pytest.raises(EngineFailure, match="no memory left"):
            await b.generate(sources[1:2], [5])
        monkeypatch.undo()
        (h,) = await first
        assert h.tokens == alone(tiny_model, sources[0], 60).tokens
    finally:
        b.stop()


async def test_calls_run_between_steps_and_their_errors_are_contained(tiny_model):
    b = batcher(tiny_model)
    try:
        assert await b.call(lambda x: x + 1, 41) == 42
        with pytest.raises(EngineFailure, match="ZeroDivisionError"):
            await b.call(lambda: 1 / 0)
        assert await b.call(torch.is_inference_mode_enabled)
    finally:
        b.stop()


async def test_stop_fails_waiting_work_and_refuses_new_work(tiny_model, sources):
    b = batcher(slow(tiny_model), max_batch_size=2, max_len=200)
    task = asyncio.create_task(b.generate(sources, [200] * len(sources)))
    await until(lambda: b.cache.n == 2)
    await asyncio.to_thread(b.stop)
    with pytest.raises(EngineUnavailable, match="shutting down"):
        await task
    with pytest.raises(EngineUnavailable):
        await b.generate(sources[:1], [5])
