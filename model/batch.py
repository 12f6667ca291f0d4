"""The rows of live searches in one KVCache, stepped together: what continuous batching and nmt-eval share."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from model.constrained_beam import ConstrainedBeamSearch
from model.decoding import Hypothesis, KVCache
from model.ensemble import Ensemble
from model.search import BeamSearch, DecodingOptions, Greedy, Sampling, Search
from model.transformer import Transformer, TransformerConfig


def new_search(
    options: DecodingOptions, budget: int, config: TransformerConfig, device: torch.device | str = "cpu"
) -> Search:
    """A fresh search of the kind `options` ask for, for one source with `budget` output tokens (</s> included;
    `options.start` not counted): greedy, sampling (also a target prefix, n samples or a constrained one-row
    search), beam search, or constrained beam search."""
    if options.beam_size > 1 and options.constraints:
        search: Search = ConstrainedBeamSearch(options, budget, config)
    elif options.beam_size > 1:
        search = BeamSearch(options, budget, config)
    elif options.sampling_topk != 1 or options.prefix or options.num_hypotheses > 1 or options.constraints:
        search = Sampling(options, budget, config, device)
    else:
        search = Greedy(budget, config, options.length_penalty)
    search.start = options.start
    search.restart = partial(new_search, options, budget, config, device)
    return search


class StepRow:
    """One row of a step as a search that picks per row sees it: the model's most likely token and its
    log-probability, and on demand the log-probabilities of other tokens, from the row's full log-probabilities
    or, after a greedy step, from its hidden state (a few logits against the greedy pick's normalizer)."""

    def __init__(self, model, argmax: int, best: float, hidden: torch.Tensor | None, logprobs: torch.Tensor | None,
                 weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 aligned: int | None = None):  # fmt: skip
        self.model, self.argmax, self.best = model, argmax, best
        self.aligned = aligned  # the source position the step's cross-attention weighs most (None: not said)
        self._hidden, self._logprobs, self._host = hidden, logprobs, None
        self._weight, self._bias = weight, bias  # the generator's (V, D) and (V,), where it has plain ones

    def full(self) -> np.ndarray:
        """Every token's log-probability (V,), on the host."""
        if self._host is None:
            logprobs = self._logprobs
            if logprobs is None:
                logprobs = self.model.generator(self._hidden[None]).float().log_softmax(-1)[0]
            self._host = logprobs.detach().cpu().numpy()
        return self._host

    def logprobs(self, tokens: list[int]) -> list[float]:
        """These tokens' log-probabilities."""
        if tokens == [self.argmax]:  # most steps: the pick, whose log-probability the step gave
            return [self.best]
        if self._host is not None or self._hidden is None or self._weight is None:
            return self.full()[tokens].tolist()
        ids = torch.tensor([self.argmax, *tokens], device=self._hidden.device)
        logits = self._weight[ids].float() @ self._hidden.float()  # (1 + T,)
        if self._bias is not None:
            logits = logits + self._bias[ids].float()
        values = logits.tolist()
        normalizer = values[0] - self.best  # the logits' log-sum-exp, as the pick's log-probability has it
        return [v - normalizer for v in values[1:]]


class RowBatch:
    """Searches of any kind decoding together, one row per hypothesis in progress.

    `add` prefills sources into free rows (a search with k rows gets its one encoded row copied k - 1 times),
    `step` runs the decoder once for every row and lets each search pick its rows' tokens, and rows leave as
    soon as their hypothesis or search is finished. With only greedy searches live a step is
    model.decode_greedy; otherwise it computes every token's log-probability, and greedy rows take the best.
    A search with `start` tokens (a target language) has its rows fed them first, whatever the step picked: rows
    of any direction share a step.
    """

    def __init__(self, model: Transformer, cache: KVCache):
        self.model, self.cache = model, cache
        self.device = cache.kv.device
        self.rows: list[tuple[Search, int]] = []  # rows[r]: the search owning cache row r, and its slot in it
        self.tokens = torch.empty(0, dtype=torch.long, device=self.device)  # (N,) next input token per row
        self.other = 0  # live rows of searches that are not greedy
        self.starting = 0  # live rows still being fed their search's start tokens
        self._at = torch.empty(0, dtype=torch.long, device=self.device)  # a step's row -> its row of log-probabilities
        self._host = None  # CUDA: pinned buffers for the step's one device-to-host copy
        if self.device.type == "cuda":
            n = cache.max_batch
            self._host = (
                torch.empty(n, dtype=torch.long, pin_memory=True),
                torch.empty(n, dtype=torch.float32, pin_memory=True),
                torch.empty(n, 2, dtype=torch.float32, pin_memory=True),
            )

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, searches: list[Search], src: torch.Tensor) -> None:
        """Prefill src (B, S) for B searches (which need sum(s.rows) free rows)."""
        first = self.cache.add(self.model, src)
        copies = [row for search, row in zip(searches, first) for _ in range(search.rows - 1)]
        try:  # nothing changes unless all of it is done (an out-of-memory error retries the searches later)
            self.cache.duplicate(copies)
            bos = torch.full((len(first) + len(copies),), self.model.config.bos_id, dtype=torch.long,
                             device=self.device)  # fmt: skip
            tokens = torch.cat([self.tokens, bos])
        except BaseException:
            self.cache.remove(range(first.start, self.cache.n))
            raise
        self.rows += [(s, 0) for s in searches] + [(s, j) for s in searches for j in range(1, s.rows)]
        self.other += sum(s.rows for s in searches if not s.greedy)
        self.starting += sum(s.rows for s in searches if s.start)
        self.tokens = tokens

    def clear(self) -> list[Search]:
        """Free every row; returns the searches that held them."""
        searches = list(dict.fromkeys(s for s, _ in self.rows))
        self.cache.remove(range(self.cache.n))
        self.rows, self.other, self.starting, self.tokens = [], 0, 0, self.tokens[:0]
        return searches

    def drop(self, searches: set[Search]) -> None:
        """Free the rows of searches nobody waits for any more."""
        gone = [r for r, (s, _) in enumerate(self.rows) if s in searches]
        if gone:
            self.tokens = self._remove(gone, self.tokens)

    def step(self) -> list[Search]:
        """One token for every live row; returns the searches that finished, whose rows are already free."""
        forced = self._starts() if self.starting else {}
        if not self.other:
            ids, logprobs = self.model.decode_greedy(self.tokens, self.cache)  # (N,), (N,)
            ids_host, logprobs_host, facts = self._to_host(ids, logprobs)
            done = [r for r, ((s, slot), tok, lp, f) in enumerate(zip(self.rows, ids_host, logprobs_host, facts))
                    if r not in forced and s.take(slot, tok, lp, f)]  # fmt: skip
            if forced:
                ids = ids.clone()  # a compiled step's output buffer is its own
                ids[torch.tensor(list(forced), device=self.device)] = torch.tensor(list(forced.values()),
                                                                                   device=self.device)  # fmt: skip
        else:
            ids, done = self._step_all(forced)
        if not done:
            self.tokens = ids
            return []
        finished = list(dict.fromkeys(s for s, _ in (self.rows[r] for r in done) if s.done))
        self.tokens = self._remove(done, ids)
        return finished

    def _starts(self) -> dict[int, int]:
        """The rows still being fed their search's start tokens, with the token each is fed next (the searches move
        on to the next one)."""
        forced, searches = {}, set()
        for r, (s, _) in enumerate(self.rows):
            if s.started < len(s.start):
                forced[r] = s.start[s.started]
                searches.add(s)
        for s in searches:
            s.started += 1
            if s.started == len(s.start):
                self.starting -= s.rows
        return forced

    def _step_all(self, forced: dict[int, int]) -> tuple[torch.Tensor, list[int]]:
        """A step with full log-probabilities: greedy rows take the best, the other searches their own picks; the
        `forced` rows are fed their start token. Where most rows are greedy or pick per row (a constrained one-row
        search reads a few log-probabilities), the step is the greedy one (screened) and only the rows that need
        them get full log-probabilities, from their hidden states: `at` maps a row to its row of `logprobs`."""
        n, hidden = len(self.rows), None
        full = [r for r, (s, _) in enumerate(self.rows) if not s.greedy and not s.per_row]
        if 2 * len(full) <= n and hasattr(self.model, "decode_greedy_hidden"):
            ids, best, hidden = self.model.decode_greedy_hidden(self.tokens, self.cache)  # (N,), (N,), (N, D)
            logprobs = at = None  # no row needs them: greedy and constrained one-row searches only
            if full:
                rows = torch.tensor(full, dtype=torch.long, device=self.device)
                logprobs = self.model.generator(hidden[rows]).float().log_softmax(-1)  # (R, V)
                at = torch.zeros(n, dtype=torch.long, device=self.device)
                at[rows] = torch.arange(len(full), device=self.device)
        else:
            logprobs = self.model.decode_logprobs(self.tokens, self.cache)  # (N, V) float32
            best, ids = logprobs.max(-1)
            at = torch.arange(n, device=self.device)
        self._at = at
        weight = bias = None
        if hidden is not None and isinstance(w := self.model.generator_weight, torch.Tensor):
            weight, bias = w, self.model.output_bias  # int8's packed weight is no tensor: StepRow projects whole rows
        ids_host, logprobs_host, facts = self._to_host(ids, best)
        steps = {}  # the rows that pick per row, and their StepRows
        for r, (s, slot) in enumerate(self.rows):
            if s.per_row and r not in forced:
                steps[r] = StepRow(self.model, ids_host[r], logprobs_host[r], hidden[r] if hidden is not None else None,
                                   logprobs[r] if hidden is None else None, weight, bias,
                                   None if facts[r] is None else int(facts[r][1]))  # fmt: skip
        next_ids, done = list(ids_host), []
        sampled: list[tuple[Sampling, int, int]] = []
        beams: dict[int, dict[BeamSearch, list[int]]] = {}  # beam size -> search -> its rows by slot
        for r, (s, slot) in enumerate(self.rows):
            if r in forced:
                next_ids[r] = forced[r]
            elif s.greedy:
                if s.take(slot, ids_host[r], logprobs_host[r], facts[r]):
                    done.append(r)
            elif s.per_row:
                row = steps[r]
                next_ids[r] = token = s.choose(slot, row)
                if s.take(slot, token, row.logprobs([token])[0], facts[r]):
                    done.append(r)
            elif isinstance(s, BeamSearch):
                beams.setdefault(s.rows, {}).setdefault(s, [0] * s.rows)[slot] = r
            else:
                sampled.append((s, slot, r))
        if sampled:  # a search draws for its rows in slot order, wherever they sit in the batch
            self._sample(sorted(sampled, key=lambda x: x[1]), logprobs, ids_host, next_ids, done, facts)
        moves: tuple[list[int], list[int]] = ([], [])
        for k, searches in beams.items():
            for s, own in searches.items():
                s.facts = [facts[r] for r in own] if facts[own[0]] is not None else None
            self._beam(k, searches, logprobs, next_ids, done, moves)
        self.cache.reorder(*moves)
        return torch.tensor(next_ids, dtype=torch.long, device=self.device), done

    def _sample(self, sampled, logprobs, argmax, next_ids, done, facts) -> None:
        rows = self._at[torch.tensor([r for _, _, r in sampled], device=self.device)]
        at = rows.tolist()
        tokens = [s.next_token(slot, logprobs[a], argmax[r]) for (s, slot, r), a in zip(sampled, at)]
        picked = logprobs[rows, torch.tensor(tokens, device=self.device)]
        for (s, slot, r), tok, lp in zip(sampled, tokens, picked.tolist()):
            next_ids[r] = tok
            if s.take(slot, tok, lp, facts[r]):
                done.append(r)

    def _beam(self, k: int, searches: dict[BeamSearch, list[int]], logprobs, next_ids, done, moves) -> None:
        """Every beam search of size k at once: (G, k, V) continuations, their 2k best per search."""
        rows = self._at[torch.tensor(list(searches.values()), device=self.device)]  # (G, k): rows of logprobs
        scores = torch.tensor([s.scores for s in searches], device=self.device)  # (G, k)
        total = logprobs[rows] + scores[..., None]  # (G, k, V)
        for g, s in enumerate(searches):
            if (token := s.forced()) is not None and not s.constrained:  # only beam 0 goes on, with the prefix token
                keep = total[g, 0, token].clone()
                total[g] = float("-inf")
                total[g, 0, token] = keep
            elif s.options.begins_word(s.length):  # after a prefix that ended in a space
                total[g] = total[g].masked_fill(s.options.glued, float("-inf"))
        vocab = total.size(-1)
        best, flat = total.view(len(searches), -1).topk(2 * k)  # (G, 2k)
        for g, (s, own, b, f) in enumerate(zip(searches, searches.values(), best.tolist(), flat.tolist())):
            # a constrained beam search (model/constraints.py) picks from its own continuations
            picked = s.choose(total[g]) if s.constrained else s.advance(b, f, vocab)
            if picked is None:
                done += own
                continue
            parents, tokens = picked
            for j, (parent, token) in enumerate(zip(parents, tokens)):
                next_ids[own[j]] = token
                if parent != j:
                    moves[0].append(own[j])
                    moves[1].append(own[parent])

    def _remove(self, rows: list[int], ids: torch.Tensor) -> torch.Tensor:
        """Free cache rows; the last live rows move into the holes, and their next tokens with them."""
        self.other -= sum(not self.rows[r][0].greedy for r in rows)
        self.starting -= sum(self.rows[r][0].started < len(self.rows[r][0].start) for r in rows)
        moves = self.cache.remove(rows)
        if moves:
            src_rows, dst_rows = map(list, zip(*moves))
            ids[dst_rows] = ids[src_rows]
            for f, t in moves:
                self.rows[t] = self.rows[f]
        del self.rows[self.cache.n :]
        return ids[: self.cache.n]

    def _to_host(self, ids: torch.Tensor, best: torch.Tensor) -> tuple[list[int], list[float], list]:
        """The step's one device-to-host transfer: each row's greedy token, its log-probability, and what the step's
        cross-attention said of the row (KVCache.facts: a (distance, position) pair, or None where this step left
        none: a stand-in step that did not run the cache's)."""
        n = ids.size(0)
        facts = self.cache.facts if self.cache.facts.size(0) == n else None
        if self._host is None:
            return ids.tolist(), best.tolist(), [None] * n if facts is None else facts.tolist()
        host_ids, host_best, host_facts = self._host[0][:n], self._host[1][:n], self._host[2][:n]
        host_ids.copy_(ids, non_blocking=True)
        host_best.copy_(best, non_blocking=True)
        if facts is not None:
            host_facts.copy_(facts, non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return host_ids.tolist(), host_best.tolist(), [None] * n if facts is None else host_facts.tolist()


@torch.inference_mode()
def decode(
    model: Transformer, sources: list[list[int]], budgets: list[int], options: DecodingOptions,
    max_rows: int = 256, cache: KVCache | None = None,
) -> list[list[Hypothesis]]:  # fmt: skip
    """Hypotheses (best first) for each source id list, decoded in batches of up to `max_rows` rows, in order.
    Sources are sorted by length into batches, as nmt-eval does for speed. `cache`: an empty KVCache to reuse
    for every batch (a compiled step keeps its graphs for one cache's shape), with room for max_rows rows,
    the longest budget and the longest source."""
    c, device = model.config, next(model.parameters()).device
    per = max(options.beam_size, options.num_hypotheses)
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[Hypothesis]] = [[] for _ in sources]
    chunk = max(1, max_rows // per)
    for start in range(0, len(order), chunk):
        idx = order[start : start + chunk]
        searches = [new_search(options, budgets[i], c, device) for i in idx]
        live = [(i, s) for i, s in zip(idx, searches) if not s.done]
        for i, s in zip(idx, searches):
            out[i] = s.results()
        if not live:
            continue
        width = max(len(sources[i]) for i, _ in live)
        src = torch.full((len(live), width), c.source_pad_id, dtype=torch.long)
        for row, (i, _) in enumerate(live):
            src[row, : len(sources[i])] = torch.tensor(sources[i])
        rows, length = len(live) * per, max(budgets[i] for i, _ in live) + 1 + len(options.start)
        if cache is None:  # an Ensemble (model/ensemble.py) makes a cache of its own
            new = model.new_cache if isinstance(model, Ensemble) else partial(KVCache, model)
            batch = RowBatch(model, new(rows, length, width))
        elif cache.n or rows > cache.max_batch or length > cache.max_len or width > cache.max_src_len:
            raise ValueError(f"the cache must be empty, with room for {rows} rows, {length} positions, {width} tokens")
        else:
            batch = RowBatch(model, cache)
        batch.add([s for _, s in live], src.to(device))
        while len(batch):
            batch.step()
        for i, s in live:
            out[i] = s.results()
    return out
