"""Continuous batching on one worker thread that owns the model.

Callers on any event loop submit sequences and await futures. Between decoder steps the worker admits
waiting sequences into free KV-cache rows (the encoder runs once per sequence; while rows are decoding,
arrivals may gather for a few steps to be encoded together), steps every live row by one token, and
lets finished rows leave at once, so a short request never waits for a long one.
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from app.metrics import Metrics
from model.decoding import Hypothesis, KVCache
from model.transformer import Transformer

log = logging.getLogger("nmt_serve.batcher")
MAX_OOM_RETRIES = 3  # a sequence pushed back this often by CUDA out-of-memory errors gets a 503
REGROW_STEPS = 64  # after an out-of-memory error, allow one more live row per this many clean steps


class EngineUnavailable(RuntimeError):
    """The worker is not running: still starting, or shutting down."""


class EngineFailure(RuntimeError):
    """The model raised while serving this request; requests outside that step were not affected."""


class QueueFull(RuntimeError):
    """`max_queue` sequences are already waiting or decoding; the caller should retry later."""


class OutOfMemory(RuntimeError):
    """The device ran out of memory for this sequence even in a smaller batch."""


@dataclass(eq=False)
class _Job:
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass(eq=False)
class _Sequence(_Job):
    src: list[int]
    max_new_tokens: int
    stream: asyncio.Queue | None = None  # streaming only: each new token id, then None once the future is set
    hyp: Hypothesis = field(default_factory=Hypothesis)
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float = 0.0  # perf_counter() when its first token came out; 0.0 before
    ooms: int = 0  # times a CUDA out-of-memory error pushed it back to the waiting line


@dataclass(eq=False)
class _Call(_Job):
    fn: Callable[[], Any]


_STOP = object()
_PURGE = object()  # a caller gave up on a sequence: drop the cancelled ones before the next step


def _resolve(job: _Job, result: Any, error: BaseException | None) -> None:
    if not job.future.done():
        job.future.set_result(result) if error is None else job.future.set_exception(error)
    if getattr(job, "stream", None) is not None:
        job.stream.put_nowait(None)


def _put_all(items: list[tuple[asyncio.Queue, int]]) -> None:
    for queue_, token in items:
        queue_.put_nowait(token)


class TokenStream:
    """A submitted sequence's token ids as they are generated (not </s>); `close()` drops it if it is unfinished."""

    def __init__(self, batcher: Batcher, seq: _Sequence):
        self._batcher, self._seq = batcher, seq

    def __aiter__(self) -> TokenStream:
        return self

    async def __anext__(self) -> int:
        token = await self._seq.stream.get()
        if token is None:
            raise StopAsyncIteration
        return token

    async def result(self) -> Hypothesis:
        """The finished hypothesis, once the tokens have run out; raises what the sequence failed with."""
        return await self._seq.future

    def close(self) -> None:
        self._batcher.drop([self._seq])


class Batcher:
    """Greedy decoding for sequences that come and go; `call` runs other model work between steps."""

    def __init__(
        self, model: Transformer, max_batch_size: int, max_len: int, max_src_len: int, prefill_tokens: int,
        max_queue: int = 256, metrics: Metrics | None = None, threads: int = 0, waiting_served_ratio: float = 0.0,
        max_waiting_steps: int = 0,
    ):  # fmt: skip
        self.model, self.prefill_tokens, self.max_queue = model, prefill_tokens, max_queue
        self.forced_eos = int(model.config.force_eos)  # the budget's last token is </s> (Marian's forced_eos_token_id)
        # Admission of arrivals while rows are decoding (as TGI's --waiting-served-ratio and --max-waiting-tokens):
        # they wait until they number waiting_served_ratio x the running rows, or for max_waiting_steps steps, and are
        # then encoded together. Encoding one sentence costs about a third of encoding eight, per sentence.
        self.waiting_served_ratio, self.max_waiting_steps = waiting_served_ratio, max_waiting_steps
        self._held = 0  # steps taken while sequences were waiting and none were admitted
        self.threads = threads or torch.get_num_threads()  # the worker's intra-op threads
        self.device = next(model.parameters()).device
        self.cache = KVCache(model, max_batch_size, max_len, max_src_len)
        self.metrics = metrics or Metrics()
        self.steps = self.peak_rows = 0  # decoder steps taken; most rows ever decoded together
        self.load = 0  # sequences submitted whose futures are not done yet: what max_queue bounds
        self.row_cap = max_batch_size  # live rows allowed: halved by a CUDA out-of-memory error, then regrown
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: deque[_Sequence] = deque()  # submitted, not yet in the cache
        self._rows: list[_Sequence] = []  # _rows[r] owns cache row r
        self._fresh: list[_Sequence] = []  # admitted since the last step: their next token is their first
        self._purge = False
        self._clean_steps = 0
        self._lock = threading.Lock()
        self.stopped = False
        self._host = None  # CUDA: pinned buffers for the step's one device-to-host copy
        if self.device.type == "cuda":
            self._host = (
                torch.empty(max_batch_size, dtype=torch.long, pin_memory=True),
                torch.empty(max_batch_size, dtype=torch.float32, pin_memory=True),
            )
        self.metrics.watch(lambda: max(0, self.load - len(self._rows)), lambda: len(self._rows))
        self._thread = threading.Thread(target=self._serve, name="nmt-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Refuse new work, fail whatever is still queued or decoding, and join the worker (blocking)."""
        with self._lock:
            self.stopped = True
            self._inbox.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)

    async def generate(self, srcs: list[list[int]], budgets: list[int]) -> list[Hypothesis]:
        """Greedy hypotheses for source id lists (each ending in </s>), at most `budgets[i]` tokens each."""
        if not srcs:
            return []
        loop = asyncio.get_running_loop()
        seqs = [_Sequence(loop.create_future(), loop, s, b) for s, b in zip(srcs, budgets)]
        self._submit(*seqs)
        try:
            if len(seqs) == 1:  # most requests: no gathering future and callbacks on the event loop
                return [await seqs[0].future]
            return list(await asyncio.gather(*(s.future for s in seqs)))
        except BaseException:
            self.drop(seqs)
            raise

    def stream(self, src: list[int], budget: int) -> TokenStream:
        """Submit one sequence now (raising QueueFull or EngineUnavailable here) and stream its tokens."""
        loop = asyncio.get_running_loop()
        seq = _Sequence(loop.create_future(), loop, src, budget, stream=asyncio.Queue())
        self._submit(seq)
        return TokenStream(self, seq)

    def check_capacity(self, n: int) -> None:
        """Raise QueueFull now if `n` more sequences would not fit, before any work is spent on them."""
        if self.load + n > self.max_queue:
            raise QueueFull(
                f"the server is busy: {self.load} sequences are waiting or decoding and this request adds {n}; "
                f"the limit is {self.max_queue}. Retry in a moment"
            )

    def drop(self, seqs: list[_Sequence]) -> None:
        """The callers gave up: cancel the unfinished sequences; the worker frees their rows before its next step."""
        for seq in seqs:
            seq.future.cancel()
        if any(seq.future.cancelled() for seq in seqs):  # gather() may have cancelled them already
            self._inbox.put(_PURGE)

    async def call(self, fn: Callable, *args: Any) -> Any:
        """Run fn(*args) on the worker thread between two decoder steps."""
        loop = asyncio.get_running_loop()
        job = _Call(loop.create_future(), loop, partial(fn, *args))
        self._submit(job)
        return await job.future

    def _submit(self, *jobs: _Job) -> None:
        seqs = [job for job in jobs if isinstance(job, _Sequence)]
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
        tokens = torch.empty(0, dtype=torch.long, device=self.device)  # (N,) next input token per live row
        with torch.inference_mode():
            while self._collect(block=not self._rows and not self._waiting):
                if self._purge:
                    tokens = self._drop_cancelled(tokens)
                tokens = self._admit(tokens)
                if self._rows:
                    tokens = self._step(tokens)
            self._shutdown()

    def _collect(self, block: bool) -> bool:
        """Move submitted sequences into the waiting line and run calls; False once stop was requested."""
        while True:
            try:
                job = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if job is _STOP:
                return False
            if job is _PURGE:
                self._purge = True
            elif isinstance(job, _Call):
                try:
                    self._settle(job, job.fn())
                except Exception as e:  # noqa: BLE001 - any failure goes back to its caller
                    self._fail([job], e)
            else:
                self._waiting.append(job)

    def _drop_cancelled(self, tokens: torch.Tensor) -> torch.Tensor:
        """Free the rows and places in line of sequences whose callers gave up."""
        self._purge = False
        self._waiting = deque(s for s in self._waiting if not s.future.cancelled())
        gone = [r for r, s in enumerate(self._rows) if s.future.cancelled()]
        return self._remove(gone, tokens) if gone else tokens

    def _remove(self, rows: list[int], ids: torch.Tensor) -> torch.Tensor:
        """Free cache rows; the last live rows move into the holes, and their next tokens with them."""
        moves = self.cache.remove(rows)
        if moves:
            src_rows, dst_rows = map(list, zip(*moves))
            ids[dst_rows] = ids[src_rows]
            for f, t in moves:
                self._rows[t] = self._rows[f]
        del self._rows[self.cache.n :]
        return ids[: self.cache.n]

    def _admit(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encode waiting sequences into free cache rows, up to `prefill_tokens` source tokens per step."""
        batch, budget = [], self.prefill_tokens
        room = min(self.cache.free, self.row_cap - len(self._rows))
        if self._rows and self._waiting and room and self._held < self.max_waiting_steps:
            enough = min(room, math.ceil(self.waiting_served_ratio * len(self._rows)))
            if len(self._waiting) < enough:  # too few to encode together yet: let them gather for another step
                self._held += 1
                return tokens
        self._held = 0
        while self._waiting and len(batch) < room:
            seq = self._waiting[0]
            if batch and len(seq.src) > budget:
                break
            self._waiting.popleft()
            if seq.future.cancelled():
                continue
            if seq.max_new_tokens <= self.forced_eos:  # its one token is the forced </s>: nothing to decode
                self._settle(seq, seq.hyp)
                continue
            budget -= len(seq.src)
            batch.append(seq)
        if not batch:
            return tokens
        c, width = self.model.config, max(len(s.src) for s in batch)
        try:
            src = torch.tensor([s.src + [c.source_pad_id] * (width - len(s.src)) for s in batch])  # (B, S)
            if self._host is not None:  # CUDA: one asynchronous copy from pinned memory
                src = src.pin_memory().to(self.device, non_blocking=True)
            t0 = time.perf_counter()
            self.cache.add(self.model, src)
            self.metrics.prefill_duration.observe(time.perf_counter() - t0)
            self.metrics.prefilled_sequences.inc(len(batch))
        except torch.cuda.OutOfMemoryError as e:  # the running rows are untouched; retry fewer new ones
            self._retry_smaller(batch, e, running=len(self._rows))
            return tokens
        except Exception as e:  # noqa: BLE001 - fail only the sequences being admitted
            self._fail(batch, e)
            return tokens
        self._rows += batch
        self._fresh += batch
        bos = torch.full((len(batch),), c.bos_id, dtype=torch.long, device=self.device)  # (B,)
        return torch.cat([tokens, bos])  # (N + B,)

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One token for every live row; rows that emit </s> or reach their budget leave and are answered."""
        eos, metrics = self.model.config.eos_id, self.metrics
        try:
            t0 = time.perf_counter()
            ids, best = self.model.decode_greedy(tokens, self.cache)  # (N,), (N,)
            ids_host, best_host = self._to_host(ids, best)
            now = time.perf_counter()
            self.steps, self.peak_rows = self.steps + 1, max(self.peak_rows, len(self._rows))
            metrics.decoder_steps.inc()
            metrics.step_duration.observe(now - t0)
            metrics.generated_tokens.inc(len(ids_host))
            for seq in self._fresh:
                if not seq.first_token:  # not after an out-of-memory restart
                    seq.first_token = now
                    metrics.time_to_first_token.observe(now - seq.submitted)
            self._fresh = []
            done, streamed = [], []
            for r, (seq, tok, lp) in enumerate(zip(self._rows, ids_host, best_host)):
                seq.hyp.logprobs.append(lp)
                if tok == eos:
                    seq.hyp.finish_reason = "eos"
                    done.append(r)
                else:
                    seq.hyp.tokens.append(tok)
                    if seq.stream is not None:
                        streamed.append((seq, tok))
                    if len(seq.hyp.logprobs) >= seq.max_new_tokens - self.forced_eos:  # (then </s> is forced)
                        done.append(r)
            if streamed:
                self._deliver(streamed)
            if self.row_cap < self.cache.max_batch:  # regrow after an out-of-memory error
                self._clean_steps += 1
                if self._clean_steps % REGROW_STEPS == 0:
                    self.row_cap += 1
            if not done:
                return ids
            finished = [self._rows[r] for r in done]
            ids = self._remove(done, ids)  # free the rows first: an answered client sees them gone
            for seq in finished:
                if len(seq.hyp.logprobs) > 1:
                    metrics.time_per_output_token.observe((now - seq.first_token) / (len(seq.hyp.logprobs) - 1))
                self._settle(seq, seq.hyp)
            return ids
        except torch.cuda.OutOfMemoryError as e:  # the rows' cache state is unknown: restart them, fewer at a time
            evicted, self._rows, self._fresh = self._rows, [], []
            self.cache.remove(range(self.cache.n))
            self._retry_smaller(evicted, e, running=0)
            return tokens[:0]
        except Exception as e:  # noqa: BLE001 - fail this step's sequences only; the loop keeps serving
            failed, self._rows, self._fresh = self._rows, [], []
            self.cache.remove(range(self.cache.n))
            self._fail(failed, e)
            return tokens[:0]

    def _to_host(self, ids: torch.Tensor, best: torch.Tensor) -> tuple[list[int], list[float]]:
        """The step's one device-to-host transfer: each row's next token and its log-probability."""
        if self._host is None:
            return ids.tolist(), best.tolist()
        n = ids.size(0)
        host_ids, host_best = self._host[0][:n], self._host[1][:n]
        host_ids.copy_(ids, non_blocking=True)
        host_best.copy_(best, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return host_ids.tolist(), host_best.tolist()

    def _deliver(self, streamed: list[tuple[_Sequence, int]]) -> None:
        """Hand this step's tokens to the streaming callers: one wake-up per event loop, not per token."""
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for seq, tok in streamed:
            by_loop.setdefault(seq.loop, []).append((seq.stream, tok))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_put_all, items)
            except RuntimeError:  # the caller's event loop is gone
                pass

    def _retry_smaller(self, seqs: list[_Sequence], error: Exception, running: int) -> None:
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
            gave_out_tokens = seq.stream is not None and seq.hyp.tokens
            (fail if seq.ooms > MAX_OOM_RETRIES or gave_out_tokens else retry).append(seq)
        for seq in reversed(retry):
            seq.hyp = Hypothesis()
            self._waiting.appendleft(seq)
        failure = OutOfMemory(
            f"the device ran out of memory for this request even in a smaller batch ({error}); retry later "
            "or send a shorter text"
        )
        for seq in fail:
            self._settle(seq, None, failure)

    def _settle(self, job: _Job, result: Any, error: BaseException | None = None) -> None:
        try:
            job.loop.call_soon_threadsafe(_resolve, job, result, error)
        except RuntimeError:  # the caller's event loop is gone
            pass

    def _fail(self, jobs: list[_Job], error: Exception) -> None:
        log.error("model failure on %d request(s)", len(jobs), exc_info=error)
        failure = EngineFailure(
            f"the model failed while serving this request ({type(error).__name__}: {error}); "
            "other requests were not affected"
        )
        for job in jobs:
            self._settle(job, None, failure)

    def _shutdown(self) -> None:
        error = EngineUnavailable("the server is shutting down")
        jobs = [*self._rows, *self._waiting]
        while not self._inbox.empty():
            job = self._inbox.get()
            if job is not _STOP and job is not _PURGE:
                jobs.append(job)
        for job in jobs:
            self._settle(job, None, error)
        self.cache.remove(range(self.cache.n))
        self._rows, self._waiting = [], deque()
