"""KV cache, prefill, the one-token decoder step, and greedy decoding (cached and the recompute reference)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from model.hypothesis import Hypothesis
from model.options import max_new_tokens_for  # noqa: F401 - where its users have always found it
from model.steps import StepGraphs
from model.transformer import Transformer, padding_mask, subsequent_mask

MIN_WINDOW = 2  # shortest key window a compiled step sees: lengths 0 and 1 would each need their own graph
PACK_MAX_TOKENS = 512  # packed prefill attends over all the packed tokens at once: only for small admissions
MOVE_BY_SLICES = 8  # KVCache.remove moves up to this many rows one by one, more with index tensors


class KVCache:
    """Preallocated decoder state for up to `max_batch` rows (slots).

    Per decoder layer: self-attention keys/values written by position as tokens are decoded, and
    cross-attention keys/values computed once from `memory` when a row is admitted. Live rows are
    always 0..n-1; `remove` moves the last live rows into the holes, so a scheduler can add and drop
    sequences between steps without copying the whole cache. Keys and values share one buffer, so a
    step takes one view of each and writes its new keys and values with one store.
    """

    def __init__(self, model: Transformer, max_batch: int, max_len: int, max_src_len: int, device=None, dtype=None):
        c = model.config
        p = next(model.parameters())
        device, dtype = device or p.device, dtype or p.dtype
        L, H, Dh = c.n_decoder_layers, c.n_heads, c.head_dim
        if max_len > c.max_positions:
            raise ValueError(f"max_len={max_len} exceeds the model's max_positions={c.max_positions}")
        self.max_batch, self.max_len, self.max_src_len = max_batch, max_len, max_src_len
        # One row and one slot more than are ever used: the live rows and a window then never span a whole
        # dimension, which would make the view contiguous and send a compiled step (model/compile) to a
        # different graph.
        rows = max_batch + 1
        self.kv = torch.zeros(2, L, rows, H, max_len + 1, Dh, device=device, dtype=dtype)  # keys, values
        self.cross_kv = torch.zeros(2, L, rows, H, max_src_len + 1, Dh, device=device, dtype=dtype)
        self.src_keep = torch.zeros(rows, max_src_len + 1, dtype=torch.bool, device=device)  # True = real token
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=device)  # next position per row
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=device)  # a compiled step's input rows
        self.n = 0
        self.facts = torch.zeros(0, 2, device=device)  # the last step's attention facts of each live row (N, 2)
        # Host-side bookkeeping, so that sizing a step's windows needs no device sync and no per-row work:
        # a row's position is the steps taken since it was added (steps - _start[row]).
        self.steps = 0
        self._start = np.zeros(max_batch, dtype=np.int64)
        self._src_len = np.zeros(max_batch, dtype=np.int64)  # up to each row's last real source token
        self._oldest = self._newest = 0  # the smallest and largest _start among live rows
        self._longest_src = 0  # the largest _src_len among live rows

    @property
    def free(self) -> int:
        return self.max_batch - self.n

    @torch.inference_mode()
    def add(self, model: Transformer, src: torch.Tensor) -> range:
        """Prefill: encode src (B, S) once, store its cross-attention K/V in new rows; returns those rows."""
        b, s = src.shape
        if b > self.free:
            raise ValueError(f"{b} new rows but only {self.free} free slots")
        if s > self.max_src_len:
            raise ValueError(f"source length {s} exceeds the cache's max_src_len={self.max_src_len}")
        keep = src != model.config.source_pad_id  # (B, S)
        last = torch.arange(1, s + 1, device=keep.device) * keep  # (B, S): 1-based index of real tokens, else 0
        lengths = keep.sum(1)  # (B,)
        # one transfer: each row's window up to its last real token, and its count of real tokens
        src_len, host_lengths = torch.stack([last.max(1).values.clamp(min=1), lengths]).cpu()  # 2 x (B,)
        real = int(host_lengths.sum())
        # Sources of different lengths, padded at the end only: encode them laid end to end (prefill_packed),
        # so that no padding is encoded. Sentences arriving together at a server differ in length by ~30%.
        if 1 < b and real * 10 < b * s * 9 and real <= PACK_MAX_TOKENS and torch.equal(host_lengths, src_len):
            cross_kv = model.steps.prefill_packed(*packed(src, keep, lengths, real))  # (2, L, B, H, S, Dh)
        else:
            cross_kv = model.steps.prefill(src)  # (2, L, B, H, S, Dh)
        rows = range(self.n, self.n + b)
        sl = slice(rows.start, rows.stop)
        self.cross_kv[:, :, sl, :, :s] = cross_kv
        self.src_keep[sl] = False
        self.src_keep[sl, :s] = keep
        self.positions[sl] = 0
        self._start[sl] = self.steps
        self._src_len[sl] = src_len.numpy()
        if not self.n:
            self._oldest, self._longest_src = self.steps, 0
        self._newest = self.steps
        self._longest_src = max(self._longest_src, int(self._src_len[sl].max()))
        self.n += b
        return rows

    def remove(self, rows) -> list[tuple[int, int]]:
        """Free `rows`; the last live rows move into the holes. Returns the (from, to) moves made."""
        dead = set(rows)
        new_n = self.n - len(dead)
        holes = sorted(r for r in dead if r < new_n)
        movers = [r for r in range(new_n, self.n) if r not in dead]
        if holes:
            # Only the windows the movers have written: a step never reads a row past its own position
            # or source length (masked), and whole rows would copy ~3 MB each here.
            t_len, s_len = int(self.steps - self._start[movers].min()), int(self._src_len[movers].max())
            # a few rows one by one (plain strided copies beat building index tensors), more all at once
            device = self.kv.device
            moves = zip(movers, holes) if len(holes) <= MOVE_BY_SLICES else [
                (torch.tensor(movers, device=device), torch.tensor(holes, device=device))
            ]  # fmt: skip
            for src, dst in moves:
                self.kv[:, :, dst, :, :t_len] = self.kv[:, :, src, :, :t_len]
                self.cross_kv[:, :, dst, :, :s_len] = self.cross_kv[:, :, src, :, :s_len]
                self.src_keep[dst] = self.src_keep[src]
                self.positions[dst] = self.positions[src]
            self._start[holes] = self._start[movers]
            self._src_len[holes] = self._src_len[movers]
        self.n = new_n
        if new_n:
            self._oldest, self._newest = int(self._start[:new_n].min()), int(self._start[:new_n].max())
            self._longest_src = int(self._src_len[:new_n].max())
        return list(zip(movers, holes))

    def duplicate(self, rows: list[int]) -> range:
        """New rows at the end, copies of `rows` (their source keys/values and what they have written): a beam
        search's rows start as copies of its one prefilled row. Returns the new rows."""
        if len(rows) > self.free:
            raise ValueError(f"{len(rows)} new rows but only {self.free} free slots")
        new = range(self.n, self.n + len(rows))
        if rows:
            src = torch.tensor(rows, device=self.kv.device)
            dst = slice(new.start, new.stop)
            t_len, s_len = int(self.steps - self._start[rows].min()), int(self._src_len[rows].max())
            self.kv[:, :, dst, :, :t_len] = self.kv[:, :, src, :, :t_len]
            self.cross_kv[:, :, dst, :, :s_len] = self.cross_kv[:, :, src, :, :s_len]
            self.src_keep[dst] = self.src_keep[src]
            self.positions[dst] = self.positions[src]
            self._start[dst], self._src_len[dst] = self._start[rows], self._src_len[rows]
            self._newest = max(self._newest, int(self._start[dst].max()))
            self.n += len(rows)
        return new

    def reorder(self, dst: list[int], src: list[int]) -> None:
        """Row dst[i] takes over the self-attention keys/values row src[i] has written (rows at one position, as a
        beam search's are): a beam that continues another beam's hypothesis continues its state. The source
        keys/values stay: the rows of one beam search share a source."""
        if not dst:
            return
        t_len = int(self.steps - self._start[src].min())
        device = self.kv.device
        self.kv[:, :, torch.tensor(dst, device=device), :, :t_len] = self.kv[
            :, :, torch.tensor(src, device=device), :, :t_len
        ]

    def step(self, fn: Callable[..., Sequence[torch.Tensor]], tokens: torch.Tensor) -> list[torch.Tensor]:
        """Run the decoder step `fn` for the live rows, write their new keys/values, advance.

        fn: the model's `step`, or one of its Steps (model/steps.py: greedy_step, logprob_step, eager or on graphs);
        tokens (N,) -> fn's outputs but the last two (logits (N, V); log-probabilities (N, V); ids (N,), their
        log-probabilities (N,) and hidden states (N, D)); `facts` then holds what the step's cross-attention said of
        each row (N, 2) (model/transformer.py's `attention_facts`). A step on graphs (StepGraphs) sees key and source
        windows of at least MIN_WINDOW, so that one graph serves every window.
        """
        n = tokens.size(0)
        if n != self.n:
            raise ValueError(f"{n} tokens for {self.n} live rows")
        longest = position = self.steps - self._oldest  # the furthest position of any live row
        if longest >= self.max_len:
            raise ValueError(f"a row reached the cache's max_len={self.max_len}")
        src_len, rows, live = self._longest_src, n, {}
        if isinstance(fn, StepGraphs):
            longest = min(max(longest, MIN_WINDOW), self.max_len)
            src_len = min(max(src_len, MIN_WINDOW), self.max_src_len)
            shape = fn.padded(n, longest, src_len)  # CUDA graphs (model/cuda_graphs.py) run padded shapes
            if shape is not None:
                (rows, longest, src_len), live = shape, {"live": n}
                if rows > n:
                    self.positions[n:rows] = 0  # the padding rows' outputs are never read: any valid position
            self.tokens[:n] = tokens  # always a view of one buffer: the same strides, the same guards
            tokens = self.tokens[:rows]
        *out, facts, kv = fn(
            tokens, self.positions[:rows], self.kv[:, :, :rows, :, :longest],  # (2, L, N, H, T, Dh)
            self.cross_kv[:, :, :rows, :, :src_len], self.src_keep[:rows, :src_len], **live,
        )  # fmt: skip
        if self._oldest == self._newest:  # every row at one position (always at batch 1): a plain strided copy
            self.kv[:, :, :n, :, position] = kv
        else:
            live = torch.arange(n, device=kv.device)
            self.kv[:, :, live, :, self.positions[:n]] = kv.permute(2, 0, 1, 3, 4)  # (N, 2, L, H, Dh)
        self.positions[:n] += 1
        self.steps += 1
        self.facts = facts[:n]
        return out


def packed(src: torch.Tensor, keep: torch.Tensor, lengths: torch.Tensor, total: int) -> tuple[torch.Tensor, ...]:
    """prefill_packed's inputs for src (B, S) whose real tokens (keep) come first in each row, lengths (B,)
    of them, `total` in all: ids, positions, seq (T,) and index (B, S)"""
    b, s = src.shape
    at = torch.arange(s, device=src.device).expand(b, s)  # (B, S)
    seq = torch.arange(b, device=src.device)[:, None].expand(b, s)  # (B, S)
    start = lengths.cumsum(0) - lengths  # (B,): where each sentence begins in the packed row
    index = (start[:, None] + at).clamp(max=total - 1)  # (B, S); past a sentence's end: masked anyway
    return src[keep], at[keep], seq[keep], index


@torch.inference_mode()
def greedy_decode(
    model: Transformer, src: torch.Tensor, max_new_tokens: int, cache: KVCache | None = None
) -> list[Hypothesis]:
    """Encode once, then one cached decoder step per token; finished rows leave the batch at once.

    `cache`: an empty KVCache to reuse (a compiled step keeps its graphs only for one cache's shape);
    by default one sized for this batch. With config.force_eos the budget's last token is </s>, so a text
    that reaches it has max_new_tokens - 1 tokens.
    """
    c = model.config
    b = src.size(0)
    steps = max_new_tokens - c.force_eos
    if steps <= 0:
        return [Hypothesis() for _ in range(b)]
    if cache is None:
        cache = KVCache(model, b, max_new_tokens + 1, src.size(1))
    elif cache.n or cache.max_len <= max_new_tokens:
        raise ValueError(f"the cache must be empty and longer than max_new_tokens={max_new_tokens}")
    cache.add(model, src)
    hyps = [Hypothesis() for _ in range(b)]
    row_to_seq = list(range(b))
    tokens = torch.full((b,), c.bos_id, dtype=torch.long, device=src.device)
    for _ in range(steps):
        ids, best = model.decode_greedy(tokens, cache)
        ids_host, best_host, facts = ids.tolist(), best.tolist(), cache.facts.tolist()
        done = []
        for r, (tok, lp, f) in enumerate(zip(ids_host, best_host, facts)):
            h = hyps[row_to_seq[r]]
            h.logprobs.append(lp)
            h.saw(f)
            if tok == c.eos_id:
                h.finish_reason = "eos"
                done.append(r)
            else:
                h.tokens.append(tok)
        if done:
            if len(done) == cache.n:
                break
            ids = remove_rows(cache, done, ids, row_to_seq)
        tokens = ids
    cache.remove(range(cache.n))
    return hyps


def remove_rows(cache: KVCache, rows: list[int], ids: torch.Tensor, row_to_seq: list[int]) -> torch.Tensor:
    """Take finished `rows` out of the cache (greedy_decode's rows leaving). The rows moved into their places carry
    their next token in `ids` (B,) and their sequence in `row_to_seq` along; returns the ids of the rows left."""
    moves = cache.remove(rows)
    if moves:
        src_rows, dst_rows = zip(*moves)
        ids[list(dst_rows)] = ids[list(src_rows)]
        for f, t in moves:
            row_to_seq[t] = row_to_seq[f]
    del row_to_seq[cache.n :]
    return ids[: cache.n]


@torch.inference_mode()
def greedy_decode_reference(model: Transformer, src: torch.Tensor, max_new_tokens: int) -> list[Hypothesis]:
    """The baseline: re-run the decoder over the whole prefix at every step (no cache)."""
    c = model.config
    src_mask = padding_mask(src, c.source_pad_id)
    memory = model.encode(src, src_mask)
    b = src.size(0)
    ys = torch.full((b, 1), c.bos_id, dtype=torch.long, device=src.device)
    hyps = [Hypothesis() for _ in range(b)]
    alive = [True] * b
    for _ in range(max_new_tokens - c.force_eos):
        hidden = model.decode(ys, memory, src_mask, subsequent_mask(ys.size(1), src.device))
        logprobs = model.generator(hidden[:, -1]).float().log_softmax(-1)  # (B, V)
        best, ids = logprobs.max(-1)
        for r, (tok, lp) in enumerate(zip(ids.tolist(), best.tolist())):
            if not alive[r]:
                continue
            hyps[r].logprobs.append(lp)
            if tok == c.eos_id:
                hyps[r].finish_reason, alive[r] = "eos", False
            else:
                hyps[r].tokens.append(tok)
        if not any(alive):
            break
        ys = torch.cat([ys, ids[:, None]], dim=1)
    return hyps
