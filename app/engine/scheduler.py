"""Continuous batching on one worker thread that owns the model: the scheduling loop.

Callers on any event loop submit sequences and await futures. Between decoder steps the worker admits
waiting sequences into free KV-cache rows (the encoder runs once per sequence; while rows are decoding,
arrivals may gather for a few steps to be encoded together), steps every live row by one token, and
lets finished rows leave at once, so a short request never waits for a long one. The waiting sequences are
admitted one request at a time in turn (WaitingLine), so a request of many sentences does not keep a later one
of few waiting until all of its own have rows.
A streaming sequence also gets each new token on its caller's loop; a sequence whose caller gives up
(cancelled, timed out, disconnected) leaves the batch before the next step. At most `max_queue`
sequences are waiting or decoding at once; beyond that `generate` and `stream` raise QueueFull.

The worker runs the model on `threads` CPU threads and should be the only thread whose torch work is
parallel. libgomp gives every thread that opens a parallel region a team of its own; once the teams
hold more threads than there are cores, their threads stop spinning between regions and sleep, and
each of the step's many small regions pays for a wake-up. One stray team (the checkpoint loaded on
another thread) made batch-1 decoding 1.6x slower here (82 vs 50 ms a sentence, eager, 2 cores).
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from app.engine.errors import EngineUnavailable, OutOfMemory, QueueFull
from app.engine.metrics import EngineMetrics, Metrics
from app.engine.sequence import PURGE, STOP, Call, Job, Sequence, TokenStream, deliver, fail, settle, settle_all
from app.engine.waiting import WaitingLine
from model.batch import RowBatch, new_search
from model.decoding import Hypothesis, KVCache
from model.options import greedy_after
from model.search import GREEDY, DecodingOptions, Search
from model.transformer import Transformer

log = logging.getLogger("nmt_serve.batcher")
MAX_OOM_RETRIES = 3  # a sequence pushed back this often by CUDA out-of-memory errors gets a 503
REGROW_STEPS = 64  # after an out-of-memory error, allow one more live row per this many clean steps


class Batcher:
    """Sequences that come and go, decoded together whatever their search; `call` runs other model work between
    steps. A sequence holds as many rows as its search has (beam_size for beam search)."""

    def __init__(
        self, model: Transformer, max_batch_size: int, max_len: int, max_src_len: int, prefill_tokens: int,
        max_queue: int = 256, metrics: EngineMetrics | None = None, threads: int = 0, waiting_served_ratio: float = 0.0,
        max_waiting_steps: int = 0,
    ):  # fmt: skip
        self.model, self.prefill_tokens, self.max_queue = model, prefill_tokens, max_queue
        # Admission of arrivals while rows are decoding (as TGI's --waiting-served-ratio and --max-waiting-tokens):
        # they wait until they number waiting_served_ratio x the running rows, or for max_waiting_steps steps, and are
        # then encoded together. Encoding one sentence costs about a third of encoding eight, per sentence.
        self.waiting_served_ratio, self.max_waiting_steps = waiting_served_ratio, max_waiting_steps
        self._held = 0  # steps taken while sequences were waiting and none were admitted
        self.threads = threads or torch.get_num_threads()  # the worker's intra-op threads
        self.device = next(model.parameters()).device
        self.cache = KVCache(model, max_batch_size, max_len, max_src_len)
        self.batch = RowBatch(model, self.cache)
        self.metrics = metrics or Metrics().engine("model")
        self.steps = self.peak_rows = 0  # decoder steps taken; most rows ever decoded together
        self.load = 0  # sequences submitted whose futures are not done yet: what max_queue bounds
        self.running = 0  # sequences holding rows
        self.row_cap = max_batch_size  # live rows allowed: halved by a CUDA out-of-memory error, then regrown
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting = WaitingLine()  # submitted, not yet in the cache
        self._fresh: list[Sequence] = []  # admitted since the last step: their next token is their first
        self._owner: dict[Search, Sequence] = {}  # each search holding rows, and the sequence it decodes
        self._streaming: list[Sequence] = []  # admitted streaming sequences
        self._purge = False
        self._clean_steps = 0
        self._lock = threading.Lock()
        self.stopped = False
        self.metrics.watch(lambda: max(0, self.load - self.running), lambda: self.running, lambda: len(self.batch))
        self._thread = threading.Thread(target=self._serve, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new work, fail whatever is still queued or decoding, and join the worker (blocking)."""
        with self._lock:
            self.stopped = True
            self._inbox.put(STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    async def generate(
        self, srcs: list[list[int]], budgets: list[int], start: tuple[int, ...] = ()
    ) -> list[Hypothesis]:
        """Greedy hypotheses for source id lists (each ending in </s>), at most `budgets[i]` tokens each, after the
        `start` tokens (a many-to-many model's target language: DecodingOptions.start)."""
        return [hyps[0] for hyps in await self.search(srcs, budgets, greedy_after(start))]

    async def search(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> list[list[Hypothesis]]:
        """Each source's hypotheses, best first, decoded as `options` (one for all, or each its own) says."""
        if not srcs:
            return []
        seqs = self._sequences(srcs, budgets, options)
        try:
            if len(seqs) == 1:  # most requests: no gathering future and callbacks on the event loop
                return [await seqs[0].future]
            return list(await asyncio.gather(*(s.future for s in seqs)))
        except BaseException:
            self.drop(seqs)
            raise

    def searching(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> asyncio.Future:
        """`search` submitted now (QueueFull or EngineUnavailable raised here), its answer a future of the caller's
        loop; cancelled, or failed by one sequence, it drops the others. For a caller that answers from the future's
        callback rather than a task (app/engine/core_server.py)."""
        answer = asyncio.get_running_loop().create_future()
        if not srcs:
            answer.set_result([])
            return answer
        seqs, left = self._sequences(srcs, budgets, options), len(srcs)

        def one(future: asyncio.Future) -> None:
            nonlocal left
            error = None if future.cancelled() else future.exception()  # retrieved, whatever the answer is by now
            if answer.done():
                return
            if future.cancelled():
                answer.cancel()
            elif error is not None:
                answer.set_exception(error)
            elif (left := left - 1) == 0:
                answer.set_result([seq.future.result() for seq in seqs])

        def given_up(_: asyncio.Future) -> None:
            if answer.cancelled() or answer.exception() is not None:
                self.drop(seqs)

        for seq in seqs:
            seq.future.add_done_callback(one)
        answer.add_done_callback(given_up)
        return answer

    def _sequences(
        self, srcs: list[list[int]], budgets: list[int], options: DecodingOptions | list[DecodingOptions]
    ) -> list[Sequence]:
        """The sequences of one request, submitted."""
        loop, c, request = asyncio.get_running_loop(), self.model.config, object()
        each = options if isinstance(options, list) else [options] * len(srcs)
        seqs = [
            Sequence(loop.create_future(), loop, s, new_search(o, b, c, self.device), request=request)
            for s, b, o in zip(srcs, budgets, each, strict=True)
        ]
        self._submit(*seqs)
        return seqs

    def stream(
        self, src: list[int], budget: int, options: DecodingOptions = GREEDY, request: object | None = None,
        sink: Any = None,
    ) -> TokenStream:  # fmt: skip
        """Submit one sequence of one row now (raising QueueFull or EngineUnavailable here) and stream its tokens.
        Streams given the same `request` take turns with other requests as one. A `sink` (anything with
        `put_nowait`) takes each token id on the caller's loop, then None, in place of the stream's own queue."""
        loop = asyncio.get_running_loop()
        search = new_search(options, budget, self.model.config, self.device)
        if search.rows != 1:
            raise ValueError("only a search of one row can stream")
        queue_ = asyncio.Queue() if sink is None else sink
        seq = Sequence(loop.create_future(), loop, src, search, stream=queue_, request=request or object())
        self._submit(seq)
        return TokenStream(self, seq)

    def check_capacity(self, n: int) -> None:
        """Raise QueueFull now if `n` more sequences would not fit, before any work is spent on them."""
        if self.load + n > self.max_queue:
            raise QueueFull(
                f"the server is busy: {self.load} sequences are waiting or decoding and this request adds {n}; "
                f"the limit is {self.max_queue}. Retry in a moment"
            )

    def drop(self, seqs: list[Sequence]) -> None:
        """The callers gave up: cancel the unfinished sequences; the worker frees their rows before its next step."""
        for seq in seqs:
            seq.future.cancel()
        if any(seq.future.cancelled() for seq in seqs):  # gather() may have cancelled them already
            self._inbox.put(PURGE)

    async def call(self, fn: Callable, *args: Any) -> Any:
        """Run fn(*args) on the worker thread between two decoder steps."""
        loop = asyncio.get_running_loop()
        job = Call(loop.create_future(), loop, partial(fn, *args))
        self._submit(job)
        return await job.future

    def _submit(self, *jobs: Job) -> None:
        seqs = [job for job in jobs if isinstance(job, Sequence)]
        with self._lock:
            if self.stopped or not self._thread.is_alive():
                raise EngineUnavailable("the model is not running: the server is starting or shutting down")
            self.check_capacity(len(seqs))
            self.load += len(seqs)
            for job in jobs:
                self._inbox.put(job)
        for seq in seqs:  # on the caller's loop, once the future is set or cancelled
            seq.future.add_done_callback(self._release)

    def _release(self, _: asyncio.Future) -> None:
        with self._lock:
            self.load -= 1

    # ---- the worker thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        torch.set_num_threads(self.threads)
        with torch.inference_mode():
            while self._collect(block=not len(self.batch) and not self._waiting):
                if self._purge:
                    self._drop_cancelled()
                self._admit()
                if len(self.batch):
                    self._step()
            self._shutdown()

    def _collect(self, block: bool) -> bool:
        """Move submitted sequences into the waiting line and run calls; False once stop was requested."""
        while True:
            try:
                job = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if job is STOP:
                return False
            if job is PURGE:
                self._purge = True
            elif isinstance(job, Call):
                try:
                    settle(job, job.fn())
                except Exception as e:  # noqa: BLE001 - any failure goes back to its caller
                    fail([job], e)
            else:
                self._waiting.append(job)

    def _drop_cancelled(self) -> None:
        """Free the rows and places in line of sequences whose callers gave up."""
        self._purge = False
        self._waiting.drop_cancelled()
        gone = {s for s, _ in self.batch.rows if self._owner[s].future.cancelled()}
        if gone:
            self.batch.drop(gone)
            self._left([self._owner[s] for s in gone])

    def _left(self, seqs: list[Sequence]) -> None:
        """These sequences no longer hold rows."""
        self.running -= len(seqs)
        for seq in seqs:
            self._owner.pop(seq.search, None)
        if self._streaming:
            self._streaming = [s for s in self._streaming if s not in seqs]

    def _admit(self) -> None:
        """Encode waiting sequences into free cache rows, in the line's order, up to `prefill_tokens` source tokens per
        step."""
        batch, budget = [], self.prefill_tokens
        rows, live = min(self.cache.free, self.row_cap - len(self.batch)), len(self.batch)
        if live and self._waiting and rows and self._held < self.max_waiting_steps:
            enough = min(rows, math.ceil(self.waiting_served_ratio * live))
            if len(self._waiting) < enough:  # too few to encode together yet: let them gather for another step
                self._held += 1
                return
        self._held = 0
        while self._waiting:
            seq = self._waiting.peek()
            need = seq.search.rows
            alone = not live and not batch and need <= self.cache.free  # a beam wider than row_cap goes alone
            if (need > rows and not alone) or (batch and len(seq.src) > budget):
                break
            self._waiting.popleft()
            if seq.future.cancelled():
                continue
            if seq.search.done:  # its one token is the forced </s>: nothing to decode
                settle(seq, seq.search.results())
                continue
            budget -= len(seq.src)
            rows -= need
            batch.append(seq)
        if not batch:
            return
        c, width = self.model.config, max(len(s.src) for s in batch)
        try:
            src = torch.tensor([s.src + [c.source_pad_id] * (width - len(s.src)) for s in batch])  # (B, S)
            if self.device.type == "cuda":  # one asynchronous copy from pinned memory
                src = src.pin_memory().to(self.device, non_blocking=True)
            t0 = time.perf_counter()
            self.batch.add([s.search for s in batch], src)
            self.metrics.prefill_duration.observe(time.perf_counter() - t0)
            self.metrics.prefilled_sequences.inc(len(batch))
        except torch.cuda.OutOfMemoryError as e:  # the running rows are untouched; retry fewer new ones
            self._retry_smaller(batch, e, running=len(self.batch))
            return
        except Exception as e:  # noqa: BLE001 - fail only the sequences being admitted
            fail(batch, e)
            return
        self.running += len(batch)
        self._owner.update((s.search, s) for s in batch)
        self._fresh += batch
        self._streaming += [s for s in batch if s.stream is not None]

    def _step(self) -> None:
        """One token for every live row; sequences whose search is done leave and are answered."""
        metrics, n = self.metrics, len(self.batch)
        try:
            t0 = time.perf_counter()
            finished = self.batch.step()
            now = time.perf_counter()
        except torch.cuda.OutOfMemoryError as e:  # the rows' cache state is unknown: restart them, fewer at a time
            evicted = [self._owner[s] for s in self.batch.clear()]
            self._left(evicted)
            self._fresh = []
            self._retry_smaller(evicted, e, running=0)
            return
        except Exception as e:  # noqa: BLE001 - fail this step's sequences only; the loop keeps serving
            failed = [self._owner[s] for s in self.batch.clear()]
            self._left(failed)
            self._fresh = []
            fail(failed, e)
            return
        self.steps, self.peak_rows = self.steps + 1, max(self.peak_rows, n)
        metrics.decoder_steps.inc()
        metrics.step_duration.observe(now - t0)
        metrics.generated_tokens.inc(n)
        for seq in self._fresh:
            if not seq.first_token:  # not after an out-of-memory restart
                seq.first_token = now
                metrics.time_to_first_token.observe(now - seq.submitted)
        self._fresh = []
        if self._streaming:
            deliver(self._streaming)
        if self.row_cap < self.cache.max_batch:  # regrow after an out-of-memory error
            self._clean_steps += 1
            if self._clean_steps % REGROW_STEPS == 0:
                self.row_cap += 1
        if finished:
            seqs = [self._owner[s] for s in finished]
            self._left(seqs)
            answers = [(seq, seq.search.results()) for seq in seqs]
            for seq, hyps in answers:
                if len(hyps[0].logprobs) > 1:
                    metrics.time_per_output_token.observe((now - seq.first_token) / (len(hyps[0].logprobs) - 1))
            settle_all(answers)  # the rows are already free: an answered client sees them gone

    def _retry_smaller(self, seqs: list[Sequence], error: Exception, running: int) -> None:
        """A CUDA out-of-memory error: put `seqs` back at the front of the line and allow fewer live rows. A sequence
        pushed back MAX_OOM_RETRIES times, or one that already streamed tokens, gets a 503 instead."""
        self.metrics.oom_retries.inc()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        self.row_cap, self._clean_steps = max(1, running + len(seqs) // 2), 0
        log.warning("out of device memory with %d rows; retrying with at most %d: %s", running + len(seqs),
                    self.row_cap, error)  # fmt: skip
        retry, fail = [], []
        for seq in seqs:
            seq.ooms += 1
            gave_out_tokens = seq.stream is not None and seq.sent
            (fail if seq.ooms > MAX_OOM_RETRIES or gave_out_tokens else retry).append(seq)
        for seq in reversed(retry):
            seq.search = seq.search.restart()
            self._waiting.appendleft(seq)
        failure = OutOfMemory(
            f"the device ran out of memory for this request even in a smaller batch ({error}); retry later "
            "or send a shorter text"
        )
        for seq in fail:
            settle(seq, None, failure)

    def _shutdown(self) -> None:
        error = EngineUnavailable("the server is shutting down")
        jobs = [*(self._owner[s] for s in self.batch.clear()), *self._waiting]
        while not self._inbox.empty():
            job = self._inbox.get()
            if job is not STOP and job is not PURGE:
                jobs.append(job)
        for job in jobs:
            settle(job, None, error)
        self._waiting, self.running = WaitingLine(), 0
