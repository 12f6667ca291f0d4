"""Continuous batching gives every sequence exactly what greedy decoding alone gives it, and faults stay local."""

from __future__ import annotations

import asyncio
import copy
import threading

import pytest
import torch

from app.engine.errors import EngineFailure, EngineUnavailable, OutOfMemory, QueueFull
from app.engine.scheduler import MAX_OOM_RETRIES, Batcher
from model.decoding import greedy_decode
from model.options import DecodingOptions
from tests.app.conftest import StepGate, failing_on_step
from tests.app.helpers import TEXTS, slow, until

pytestmark = pytest.mark.anyio


def ends_early(tiny_model):
    """A copy of the tiny model that emits </s> after (source length % 7 + 2) tokens, so lengths vary."""
    m = copy.deepcopy(tiny_model)
    real, eos = m.decode_greedy, m.config.eos_id

    def decode_greedy(tokens, cache):
        n = tokens.size(0)
        pos, src_len = cache.positions[:n].clone(), cache.src_keep[:n].sum(1)  # (N,), (N,)
        ids, logprobs = real(tokens, cache)  # (N,), (N,)
        return torch.where(pos == src_len % 7 + 2, eos, ids), logprobs

    m.decode_greedy = decode_greedy
    return m


@pytest.fixture
def sources(tokenizer):
    return [tokenizer.encode(t) for t in TEXTS]


def batcher(model, max_batch_size=32, max_len=60, prefill_tokens=2048, max_queue=256) -> Batcher:
    b = Batcher(model, max_batch_size, max_len, max_src_len=64, prefill_tokens=prefill_tokens, max_queue=max_queue)
    b.start()
    return b


def alone(model, src: list[int], budget: int):
    (h,) = greedy_decode(model, torch.tensor([src]), budget)
    return h


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


async def test_arrivals_while_rows_decode_are_held_a_few_steps_and_encoded_together(tiny_model, sources):
    model = slow(tiny_model)
    b = Batcher(model, 32, 200, max_src_len=64, prefill_tokens=2048, waiting_served_ratio=1.0, max_waiting_steps=3)
    b.start()

    def prefills() -> float:
        return b.metrics.sample("nmt_prefill_duration_seconds_count")

    try:
        running = asyncio.create_task(b.generate(sources[:4], [150] * 4))
        await until(lambda: prefills() >= 1)  # counted once the rows are in the cache
        assert prefills() == 1 and b.cache.n == 4  # nothing was running: admitted at once, in one prefill
        steps = b.steps
        late = await b.generate(sources[4:6], [5, 5])  # 2 arrivals < 1.0 x 4 running rows: held, then encoded together
        assert prefills() == 2 and b.steps - steps >= 3 + 5
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        b.stop()
    assert [h.tokens for h in late] == [alone(model, s, 5).tokens for s in sources[4:6]]


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
    model.decode_greedy = failing_on_step(model.decode_greedy, 3)
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


def failing_steps(tiny_model, error: Exception, at: set[int]):
    """A copy of the tiny model whose decoder step raises `error` on the given (1-based) calls."""
    m = copy.deepcopy(tiny_model)
    real, calls = m.decode_greedy, []

    def decode_greedy(tokens, cache):
        calls.append(tokens.size(0))
        if len(calls) in at:
            raise error
        return real(tokens, cache)

    m.decode_greedy = decode_greedy
    return m, calls


def sample(b: Batcher, name: str) -> float:
    return b.metrics.sample(name) or 0.0


async def test_a_stream_gets_every_token_in_order_and_then_the_whole_hypothesis(tiny_model, sources):
    model = ends_early(tiny_model)
    b = batcher(model)
    try:
        plain = asyncio.create_task(b.generate(sources[:3], [20] * 3))  # decoding alongside, without a stream
        stream = b.stream(sources[4], 20)
        tokens = [t async for t in stream]
        hyp = await stream.result()
        assert [h.tokens for h in await plain] == [alone(model, s, 20).tokens for s in sources[:3]]
    finally:
        b.stop()
    ref = alone(model, sources[4], 20)
    assert tokens == hyp.tokens == ref.tokens and hyp.finish_reason == ref.finish_reason
    assert b.load == 0


async def test_closing_a_stream_frees_its_row_before_the_next_step(tiny_model, sources):
    b = batcher(slow(tiny_model), max_len=200)
    try:
        stream = b.stream(sources[0], 200)
        await anext(stream)
        stream.close()
        await until(lambda: b.cache.n == 0 and sample(b, "nmt_running_batch_size") == 0)
        assert b.steps < 100 and b.load == 0
    finally:
        b.stop()


async def test_the_batch_gauges_count_a_beam_search_as_one_sequence_of_its_rows(tiny_model, sources):
    """nmt_running_batch_size counted rows: 3 texts at beam 4 were 12 "sequences", the autoscaler's in-flight sum
    (with nmt_queue_length, which counts sequences) up to 4 times the real one."""
    b = batcher(slow(tiny_model), max_len=200)
    try:
        task = asyncio.create_task(b.search(sources[:3], [150] * 3, DecodingOptions(beam_size=4)))
        await until(lambda: b.cache.n == 12)
        assert (sample(b, "nmt_running_batch_size"), sample(b, "nmt_batch_rows")) == (3, 12)
        assert sample(b, "nmt_queue_length") == 0
        task.cancel()
        # the worker thread frees the rows, then counts their sequences out: wait for both, not just the first
        await until(lambda: b.cache.n == 0 and sample(b, "nmt_running_batch_size") == 0)
        assert sample(b, "nmt_batch_rows") == 0
    finally:
        b.stop()


async def test_a_full_queue_refuses_sequences_until_some_are_answered(tiny_model, sources):
    b = batcher(slow(tiny_model), max_len=200, max_queue=3)
    try:
        first = asyncio.create_task(b.generate(sources[:2], [200, 200]))
        await until(lambda: b.cache.n == 2)
        with pytest.raises(
            QueueFull, match="2 sequences are waiting or decoding and this request adds 2; the limit is 3"
        ):
            await b.generate(sources[2:4], [5, 5])
        fits = b.stream(sources[2], 5)
        with pytest.raises(QueueFull):
            b.stream(sources[3], 5)
        assert b.load == 3
        first.cancel()
        fits.close()
        await until(lambda: b.load == 0)
        assert len(await b.generate(sources[2:5], [3, 3, 3])) == 3
    finally:
        b.stop()


async def test_out_of_memory_at_admission_retries_fewer_rows_with_the_same_results(tiny_model, sources, monkeypatch):
    model = ends_early(tiny_model)
    b = batcher(model)
    real, widths = b.cache.add, []

    def add(m, src):
        widths.append(src.size(0))
        if len(widths) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return real(m, src)

    monkeypatch.setattr(b.cache, "add", add)
    try:
        hyps = await b.generate(sources[:6], [20] * 6)
    finally:
        b.stop()
    assert [h.tokens for h in hyps] == [alone(model, s, 20).tokens for s in sources[:6]]
    assert widths[:2] == [6, 3] and b.peak_rows <= 3
    assert sample(b, "nmt_oom_retries_total") == 1


async def test_out_of_memory_in_a_step_restarts_its_rows_in_a_smaller_batch(tiny_model, sources):
    model, calls = failing_steps(ends_early(tiny_model), torch.cuda.OutOfMemoryError("injected"), at={3})
    b = batcher(model)
    try:
        hyps = await b.generate(sources, [20] * len(sources))
    finally:
        b.stop()
    reference = ends_early(tiny_model)
    for h, src in zip(hyps, sources):
        ref = alone(reference, src, 20)
        assert (h.tokens, h.finish_reason) == (ref.tokens, ref.finish_reason)
        assert h.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
    assert calls[2] == len(sources) and max(calls[3:]) <= len(sources) // 2


async def test_a_sequence_that_never_fits_gets_out_of_memory_and_the_worker_keeps_serving(
    tiny_model, sources, monkeypatch
):
    b = batcher(tiny_model)
    real, attempts = b.cache.add, []

    def add(m, src):
        attempts.append(src.size(0))
        raise torch.cuda.OutOfMemoryError("injected")

    monkeypatch.setattr(b.cache, "add", add)
    try:
        with pytest.raises(OutOfMemory, match="ran out of memory .* even in a smaller batch"):
            await b.generate(sources[:1], [5])
        assert attempts == [1] * (MAX_OOM_RETRIES + 1)
        monkeypatch.setattr(b.cache, "add", real)
        (h,) = await b.generate(sources[:1], [5])
        assert h.tokens == alone(tiny_model, sources[0], 5).tokens
    finally:
        b.stop()


async def test_out_of_memory_fails_a_stream_that_already_sent_tokens_and_restarts_the_rest(tiny_model, sources):
    model, _ = failing_steps(tiny_model, torch.cuda.OutOfMemoryError("injected"), at={4})
    b = batcher(model)
    try:
        stream = b.stream(sources[0], 30)
        plain = asyncio.create_task(b.generate(sources[1:2], [30]))
        with pytest.raises(OutOfMemory):
            async for _ in stream:
                pass
            await stream.result()
        (h,) = await plain
    finally:
        b.stop()
    assert h.tokens == alone(tiny_model, sources[1], 30).tokens


async def test_the_worker_counts_tokens_and_times_first_and_later_tokens(tiny_model, sources):
    model = ends_early(tiny_model)
    b = batcher(model)
    try:
        hyps = await b.generate(sources, [20] * len(sources))
    finally:
        b.stop()
    assert sample(b, "nmt_generated_tokens_total") == sum(len(h.logprobs) for h in hyps)
    assert sample(b, "nmt_time_to_first_token_seconds_count") == len(sources)
    assert sample(b, "nmt_time_per_output_token_seconds_count") == sum(len(h.logprobs) > 1 for h in hyps)
    assert sample(b, "nmt_time_per_output_token_seconds_sum") > 0
    assert sample(b, "nmt_queue_length") == sample(b, "nmt_running_batch_size") == 0


# ---- fairness: requests take turns for free rows ---------------------------------------------------------------


def admissions(b: Batcher, monkeypatch, names: dict[tuple[int, ...], str]) -> list[str]:
    """The name of each sequence the batcher encodes into the cache, in order, by its source ids."""
    order, real = [], b.batch.add

    def add(searches, src):
        pad = b.batch.model.config.source_pad_id  # sources are padded at the end
        order.extend(names[tuple(t for t in row if t != pad)] for row in src.tolist())
        return real(searches, src)

    monkeypatch.setattr(b.batch, "add", add)
    return order


async def paused(b: Batcher) -> threading.Event:
    """Hold the worker between two steps until the returned event is set: what is submitted meanwhile reaches the
    waiting line together."""
    inside, go = threading.Event(), threading.Event()

    def wait() -> None:
        inside.set()
        go.wait(30)

    asyncio.create_task(b.call(wait))
    await until(inside.is_set)
    return go


async def test_a_one_sequence_request_takes_the_first_free_row_ahead_of_a_big_requests_waiting_ones(
    tiny_model, sources, monkeypatch
):
    big, small = sources[:6], sources[6]
    names = {tuple(s): f"big{i}" for i, s in enumerate(big)} | {tuple(small): "small"}
    b = batcher(tiny_model, max_batch_size=2)
    order = admissions(b, monkeypatch, names)
    gate = StepGate(tiny_model, monkeypatch)
    gate.hold(lambda sizes: True)  # the big request's first two rows, at their first step
    try:
        go = await paused(b)
        big_task = asyncio.create_task(b.generate(big, [20] * 6))
        await until(lambda: b.load == 6)
        go.set()
        await until(gate.paused.is_set)
        small_task = asyncio.create_task(b.generate([small], [20]))
        await until(lambda: b.load == 7)
        gate.release()
        (h,), hyps = await small_task, await big_task
    finally:
        gate.release()
        b.stop()
    assert order == ["big0", "big1", "small", "big2", "big3", "big4", "big5"]
    assert h.tokens == alone(tiny_model, small, 20).tokens
    assert [x.tokens for x in hyps] == [alone(tiny_model, s, 20).tokens for s in big]


async def test_two_big_requests_take_turns_one_sequence_each(tiny_model, sources, monkeypatch):
    first, second = sources[:4], sources[4:8]
    names = {tuple(s): f"first{i}" for i, s in enumerate(first)}
    names |= {tuple(s): f"second{i}" for i, s in enumerate(second)}
    b = batcher(slow(tiny_model), max_batch_size=2)
    order = admissions(b, monkeypatch, names)
    try:
        go = await paused(b)
        tasks = [asyncio.create_task(b.generate(first, [20] * 4))]
        await until(lambda: b.load == 4)  # the first arrives first
        tasks.append(asyncio.create_task(b.generate(second, [20] * 4)))
        await until(lambda: b.load == 8)
        go.set()
        await asyncio.gather(*tasks)
    finally:
        b.stop()
    assert order == [f"{name}{i}" for i in range(4) for name in ("first", "second")]


async def test_a_request_cancelled_while_waiting_leaves_the_line_and_the_others_keep_their_turns(
    tiny_model, sources, monkeypatch
):
    names = {tuple(s): f"s{i}" for i, s in enumerate(sources)}
    b = batcher(tiny_model, max_batch_size=1)
    order = admissions(b, monkeypatch, names)
    gate = StepGate(tiny_model, monkeypatch)
    gate.hold(lambda sizes: True)
    try:
        go = await paused(b)
        tasks = [asyncio.create_task(b.generate(sources[i : i + 2], [10, 10])) for i in (0, 2, 4)]
        await until(lambda: b.load == 6)
        go.set()
        await until(gate.paused.is_set)  # s0 decodes; s2, s4, then s1, s3, s5 wait their turns
        tasks[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        gate.release()
        await asyncio.gather(tasks[0], tasks[2])
        (h,) = await b.generate(sources[7:8], [3])  # the line still works
    finally:
        gate.release()
        b.stop()
    assert order == ["s0", "s4", "s1", "s5", "s7"] and b.load == 0 and len(h.logprobs) == 3
