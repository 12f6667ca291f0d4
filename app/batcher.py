"""Continuous batching on one worker thread that owns the model.

Callers on any event loop submit sequences and await futures. Between decoder steps the worker admits
waiting sequences into free KV-cache rows (the encoder runs once per sequence), steps every live row
by one token, and lets finished rows leave at once, so a short request never waits for a long one.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from model.decoding import Hypothesis, KVCache
from model.transformer import Transformer

log = logging.getLogger("nmt_serve.batcher")


class EngineUnavailable(RuntimeError):
    """The worker is not running: still starting, or shutting down."""


class EngineFailure(RuntimeError):
    """The model raised while serving this request; requests outside that step were not affected."""


@dataclass(eq=False)
class _Job:
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass(eq=False)
class _Sequence(_Job):
    src: list[int]
    max_new_tokens: int
    hyp: Hypothesis = field(default_factory=Hypothesis)


@dataclass(eq=False)
class _Call(_Job):
    fn: Callable[[], Any]


_STOP = object()


def _resolve(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if not future.done():
        future.set_result(result) if error is None else future.set_exception(error)


class Batcher:
    """Greedy decoding for sequences that come and go; `call` runs other model work between steps."""

    def __init__(self, model: Transformer, max_batch_size: int, max_len: int, max_src_len: int, prefill_tokens: int):
        self.model, self.prefill_tokens = model, prefill_tokens
        self.device = next(model.parameters()).device
        self.cache = KVCache(model, max_batch_size, max_len, max_src_len)
        self.steps = self.peak_rows = 0  # decoder steps taken; most rows ever decoded together
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: deque[_Sequence] = deque()  # submitted, not yet in the cache
        self._rows: list[_Sequence] = []  # _rows[r] owns cache row r
        self._lock = threading.Lock()
        self.stopped = False
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
            return list(await asyncio.gather(*(s.future for s in seqs)))
        except BaseException:
            for s in seqs:  # the worker drops cancelled rows at their next step
                s.future.cancel()
            raise

    async def call(self, fn: Callable, *args: Any) -> Any:
        """Run fn(*args) on the worker thread between two decoder steps."""
        loop = asyncio.get_running_loop()
        job = _Call(loop.create_future(), loop, partial(fn, *args))
        self._submit(job)
        return await job.future

    def _submit(self, *jobs: _Job) -> None:
        with self._lock:
            if self.stopped or not self._thread.is_alive():
                raise EngineUnavailable("the model is not running: the server is starting or shutting down")
            for job in jobs:
                self._inbox.put(job)

    # ---- the worker thread -----------------------------------------------------------------------

    def _serve(self) -> None:
        tokens = torch.empty(0, dtype=torch.long, device=self.device)  # (N,) next input token per live row
        with torch.inference_mode():
            while self._collect(block=not self._rows and not self._waiting):
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
            if isinstance(job, _Call):
                try:
                    self._settle(job, job.fn())
                except Exception as e:  # noqa: BLE001 - any failure goes back to its caller
                    self._fail([job], e)
            else:
                self._waiting.append(job)

    def _admit(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encode waiting sequences into free cache rows, up to `prefill_tokens` source tokens per step."""
        batch, budget = [], self.prefill_tokens
        while self._waiting and len(batch) < self.cache.free:
            seq = self._waiting[0]
            if batch and len(seq.src) > budget:
                break
            self._waiting.popleft()
            if not seq.future.cancelled():
                budget -= len(seq.src)
                batch.append(seq)
        if not batch:
            return tokens
        c, width = self.model.config, max(len(s.src) for s in batch)
        try:
            src = torch.tensor([s.src + [c.pad_id] * (width - len(s.src)) for s in batch], device=self.device)  # (B, S)
            self.cache.add(self.model, src)
        except Exception as e:  # noqa: BLE001 - fail only the sequences being admitted
            self._fail(batch, e)
            return tokens
        self._rows += batch
        bos = torch.full((len(batch),), c.bos_id, dtype=torch.long, device=self.device)  # (B,)
        return torch.cat([tokens, bos])  # (N + B,)

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One token for every live row; rows that emit </s> or reach their budget leave and are answered."""
        eos = self.model.config.eos_id
        try:
            logprobs = self.model.decode_step(tokens, self.cache).float().log_softmax(-1)  # (N, V)
            best, ids = logprobs.max(-1)  # (N,)
            self.steps, self.peak_rows = self.steps + 1, max(self.peak_rows, len(self._rows))
            done = []
            for r, (seq, tok, lp) in enumerate(zip(self._rows, ids.tolist(), best.tolist())):
                seq.hyp.logprobs.append(lp)
                if tok == eos:
                    seq.hyp.finish_reason = "eos"
                    done.append(r)
                else:
                    seq.hyp.tokens.append(tok)
                    if len(seq.hyp.logprobs) >= seq.max_new_tokens or seq.future.cancelled():
                        done.append(r)
            if not done:
                return ids
            for r in done:
                self._settle(self._rows[r], self._rows[r].hyp)
            moves = self.cache.remove(done)
            if moves:
                src_rows, dst_rows = map(list, zip(*moves))
                ids[dst_rows] = ids[src_rows]
                for f, t in moves:
                    self._rows[t] = self._rows[f]
            del self._rows[self.cache.n :]
            return ids[: self.cache.n]
        except Exception as e:  # noqa: BLE001 - fail this step's sequences only; the loop keeps serving
            failed, self._rows = self._rows, []
            self.cache.remove(range(self.cache.n))
            self._fail(failed, e)
            return tokens[:0]

    def _settle(self, job: _Job, result: Any, error: BaseException | None = None) -> None:
        try:
            job.loop.call_soon_threadsafe(_resolve, job.future, result, error)
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
            if job is not _STOP:
                jobs.append(job)
        for job in jobs:
            self._settle(job, None, error)
        self.cache.remove(range(self.cache.n))
        self._rows, self._waiting = [], deque()
