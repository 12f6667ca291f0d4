"""Decoding strategies as peers behind one interface: greedy, beam search and sampling.

A `Search` turns one source into hypotheses while holding `rows` rows of a KVCache. Each step the model
gives every row its next-token distribution and each search picks its rows' tokens:

- `Greedy`: one row, the most likely token. Only greedy rows in a step: the step is model.decode_greedy
  (compiled, screened, no full log_softmax), exactly the path the server had before the others came.
- `Sampling`: 1..n rows decoded independently: a forced target prefix, then the most likely token (top-k 1)
  or a random draw among the k most likely (0 = all), from a generator seeded per search, so that a seed
  gives the same text alone or in any batch.
- `BeamSearch`: beam_size rows whose hypotheses are reordered among themselves each step, as CTranslate2's
  beam search does: the 2 x beam_size best continuations are ranked; one of the first beam_size that ends with
  </s> (or reaches the budget) is a finished hypothesis and the next unfinished candidate takes its place.
  It stops when beam_size hypotheses have finished, or with length_penalty 0 once the best beam has finished
  and num_hypotheses have. A hypothesis's score is the sum of its log-probabilities (</s> included) divided by
  its length (</s> included) ** length_penalty: with the default 1.0 that is greedy's mean log-probability. A
  model whose budget ends with a forced </s> (TransformerConfig.force_eos, Marian's and mBART's
  forced_eos_token_id) takes it as transformers does: a step after the others, so the search may have stopped
  before, and counted in the length with log-probability 0.

`RowBatch` holds the live searches' rows in one KVCache and steps them together (model/batch.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from model.constraints import Constraints, Progress
from model.hypothesis import Hypothesis
from model.options import GREEDY, DecodingOptions  # noqa: F401 - where their users have always found them

if TYPE_CHECKING:
    from model.batch import StepRow
from model.transformer import Transformer, TransformerConfig, padding_mask, subsequent_mask

NEG_INF = float("-inf")


class Search:
    """One source's decoding. `rows`: the cache rows it holds; `done`: its results are final."""

    rows = 1
    greedy = False  # decodes from the step's greedy picks alone (the fast path)
    per_row = False  # picks each row's token by `choose` from the row's step (a constrained one-row search)
    start: tuple[int, ...] = ()  # fed to its rows before it picks any token (DecodingOptions.start)
    started = 0  # how many of them its rows have been fed

    def __init__(self, budget: int, config: TransformerConfig):
        self.steps = budget - config.force_eos  # decoder steps it may take: a forced </s> is not decoded
        self.force_eos = config.force_eos
        self.eos = config.eos_id
        self.done = self.steps <= 0
        self.restart: Callable[[], Search]  # a fresh search of the same kind for the same source (set by search())

    def results(self) -> list[Hypothesis]:
        """The hypotheses, best first."""
        raise NotImplementedError

    def _take(self, hyp: Hypothesis, token: int, logprob: float, facts: tuple[float, float] | None = None) -> bool:
        """Append a token (and its step's attention facts) to a hypothesis; True once it is finished (</s>, or the
        budget is spent)."""
        hyp.start = len(self.start)
        hyp.logprobs.append(logprob)
        hyp.saw(facts)
        if token == self.eos:
            hyp.finish_reason = "eos"
            return True
        hyp.tokens.append(token)
        if len(hyp.logprobs) < self.steps:
            return False
        hyp.forced_end = int(self.force_eos)
        return True

    @property
    def tokens(self) -> list[int]:
        """The first hypothesis's tokens so far (what a stream of a one-row search has produced)."""
        return self.results()[0].tokens


class Greedy(Search):
    """The most likely token each step, on one row."""

    greedy = True

    def __init__(self, budget: int, config: TransformerConfig, length_penalty: float = 1.0):
        super().__init__(budget, config)
        self.hyp = Hypothesis(length_penalty=length_penalty)  # which scores it, as a beam's

    def take(self, slot: int, token: int, logprob: float, facts: tuple[float, float] | None = None) -> bool:
        """The row's next token, its log-probability and its step's attention facts; True when the search is done."""
        self.done = self._take(self.hyp, token, logprob, facts)
        return self.done

    def results(self) -> list[Hypothesis]:
        return [self.hyp]


class Sampling(Search):
    """Independent rows: the target prefix forced, then argmax (top-k 1) or a seeded random draw per row, each row
    made to contain the constraints, if any (model/constraints.py)."""

    def __init__(self, options: DecodingOptions, budget: int, config: TransformerConfig, device):
        super().__init__(budget, config)
        self.rows, self.prefix, self.options = options.num_hypotheses, options.prefix, options
        self.topk, self.temperature = options.sampling_topk, options.sampling_temperature
        self.hyps = [Hypothesis(length_penalty=options.length_penalty) for _ in range(self.rows)]  # scored, ranked
        self.live = self.rows
        self.generator = None
        if self.topk != 1:
            self.generator = torch.Generator(device=device).manual_seed(options.seed)
        self.constraints, self.margin, self.glued = None, options.constraint_margin, options.glued
        self._glued_host = None
        if options.constraints:
            self.constraints = Constraints(options.constraints, options.stops)
            self.progress = [Progress()] * self.rows
            self.term_at: list[int | None] = [None] * self.rows  # the source position a term's token translates
            self.per_row = True

    def next_token(self, slot: int, logprobs: torch.Tensor, argmax: int) -> int:
        """The row's next token, given its log-probabilities (V,) (logits would draw the same) and their argmax."""
        t = len(self.hyps[slot].logprobs)
        if t < len(self.prefix):
            return self.prefix[t]
        if self.options.begins_word(t):  # after a prefix that ended in a space
            logprobs = logprobs.masked_fill(self.glued, NEG_INF)
            argmax = int(logprobs.argmax())
        return self._draw(logprobs, argmax)

    def choose(self, slot: int, row: StepRow) -> int:
        """A constrained row's next token, from its step (model/batch.py's StepRow): the whole distribution is read
        only where a pick needs it (a draw, or tokens barred that the model would have picked)."""
        t = len(self.hyps[slot].logprobs)
        k, p = self.constraints, self.progress[slot]
        if t < len(self.prefix):
            token = self.prefix[t]
        elif (token := k.forced(p)) is None:
            if row.argmax == self.eos and not k.done(p):  # the model would end here: the terms close the sentence
                p = self.progress[slot] = k.closing(p)
            # no </s> (nor the sentence's end) while a constraint is unmet; after a term, a token that begins a word and
            # is not the one it replaced
            barred = ([] if k.done(p) else [self.eos, *k.stops]) + (k.replaced[p.ended] if p.ended >= 0 else [])
            glued = (p.ended >= 0 or self.options.begins_word(t)) and self.glued is not None
            choice = row.argmax  # what the row picks, unless it is barred (the closing terms need no pick)
            if not p.closing and (self.generator is not None or choice in barred or glued and self._glued()[choice]):
                logprobs = row.full().copy()
                if glued:
                    logprobs[self._glued()] = NEG_INF
                logprobs[barred] = NEG_INF
                choice = self._draw(torch.from_numpy(logprobs), int(logprobs.argmax()))
            if k.done(p):
                token = self.eos if p.closing else choice
            else:
                # the source term the step translates begins its term where a word begins
                at = None if self.glued is not None and self._glued()[choice] else row.aligned
                spaced = t > 0 and self.hyps[slot].tokens[-1] in self.options.spaces  # a term would add a second
                token = k.pick(p, row, choice, self.steps - t, self.margin, at, spaced)
        after = self.progress[slot] = k.after(p, token)
        if after.current >= 0 or len(after.met) > len(p.met):
            self.hyps[slot].terms.add(t)  # a term's token: the caller's choice, not the model's
            i, j = (
                (after.current, after.at - 1) if after.current >= 0 else (after.ended, len(k.phrases[after.ended]) - 1)
            )
            # aligned to its source term (the step's attention wanders over forced tokens): where the tags go in HTML
            self.term_at[slot] = k.source_of(i, j, self.term_at[slot] if j else row.aligned)
        else:
            self.term_at[slot] = None
        return token

    def _glued(self) -> np.ndarray:
        if self._glued_host is None:
            self._glued_host = self.glued.cpu().numpy()
        return self._glued_host

    def _draw(self, logprobs: torch.Tensor, argmax: int) -> int:
        """The most likely token, or a draw (see next_token)."""
        if self.generator is None:
            return argmax
        logprobs = logprobs.double()  # float32 would round a temperature below ~1e-45 to 0
        scores = (logprobs - logprobs.max()) / self.temperature  # the best at 0: no inf - inf at a tiny temperature
        if 0 < self.topk < scores.size(0):
            scores, ids = scores.topk(self.topk)
            return int(ids[torch.multinomial(scores.softmax(-1), 1, generator=self.generator)])
        return int(torch.multinomial(scores.softmax(-1), 1, generator=self.generator))

    def take(self, slot: int, token: int, logprob: float, facts: tuple[float, float] | None = None) -> bool:
        """The row's token, its log-probability under the model and its step's attention facts; True when that row
        is finished."""
        if self.constraints is not None and facts is not None and (at := self.term_at[slot]) is not None:
            facts = (facts[0], at)
        finished = self._take(self.hyps[slot], token, logprob, facts)
        if finished:
            self.live -= 1
            self.done = not self.live
        return finished

    def results(self) -> list[Hypothesis]:
        if len(self.hyps) == 1:
            return self.hyps
        return sorted(self.hyps, key=lambda h: h.score, reverse=True)


class BeamSearch(Search):
    """beam_size rows; each step the best continuations of all beams compete for them (see the module doc)."""

    constrained = False  # a ConstrainedBeamSearch (model/constraints.py) chooses its continuations itself

    def __init__(self, options: DecodingOptions, budget: int, config: TransformerConfig):
        super().__init__(budget, config)
        self.rows, self.n, self.penalty = options.beam_size, options.num_hypotheses, options.length_penalty
        self.prefix, self.options = options.prefix, options
        # each beam's tokens, their log-probabilities and their steps' attention facts
        self.beams: list[tuple[list[int], list[float], list[tuple[float, float]]]] = [([], [], [])] * self.rows
        self.facts: list[tuple[float, float]] | None = None  # this step's attention facts, a beam's row each
        self.scores = [0.0] + [NEG_INF] * (self.rows - 1)  # summed log-probabilities; the copies start out dead
        self.finished: list[Hypothesis] = []
        self.best_finished = False

    @property
    def length(self) -> int:
        """Tokens each beam has so far."""
        return len(self.beams[0][0])

    def forced(self) -> int | None:
        """The prefix token this step must produce, or None."""
        t = self.length
        return self.prefix[t] if t < len(self.prefix) else None

    def advance(self, scores: list[float], flat: list[int], vocab: int) -> tuple[list[int], list[int]] | None:
        """Take this step's 2 x beam_size best candidates, best first, as summed scores and flat indices
        (beam * vocab + token). Returns each row's parent beam and next token, or None once done."""
        k, last = self.rows, self.length + 1 >= self.steps
        candidates = [(s, *divmod(i, vocab)) for s, i in zip(scores, flat)]  # (score, parent, token)
        spares = (c for c in candidates[k:] if c[2] != self.eos)  # what takes the place of a finished one
        chosen = []
        for rank, candidate in enumerate(candidates[:k]):
            score, parent, token = candidate
            if token == self.eos or last and not self.force_eos:
                if score > NEG_INF:
                    self._finish(score, parent, token)
                    self.best_finished |= rank == 0
                candidate = next(spares, candidate)
            chosen.append(candidate)
        enough = self.best_finished and len(self.finished) >= self.n if self.penalty == 0 else len(self.finished) >= k
        if last and self.force_eos and not enough:  # the beams go on to the budget's </s>, which ends each
            for score, parent, token in chosen:
                if token != self.eos and score > NEG_INF:
                    self._finish(score, parent, token)
        if last or enough:
            self.done = True
            return None
        self.beams = [self._extend(score, parent, token) for score, parent, token in chosen]
        self.scores = [c[0] for c in chosen]
        return [c[1] for c in chosen], [c[2] for c in chosen]

    def _logprob(self, score: float, parent: int) -> float:
        return score - self.scores[parent] if score > NEG_INF else NEG_INF

    def _extend(self, score: float, parent: int, token: int) -> tuple[list[int], list[float], list]:
        """The parent beam continued by `token` at summed log-probability `score`."""
        tokens, logprobs, seen = self.beams[parent]
        facts = seen + [self.facts[parent]] if self.facts is not None else seen
        return tokens + [token], logprobs + [self._logprob(score, parent)], facts

    def _finish(self, score: float, parent: int, token: int) -> None:
        tokens, logprobs, seen = self._extend(score, parent, token)
        eos = token == self.eos
        hyp = Hypothesis(tokens[:-1] if eos else tokens, logprobs, "eos" if eos else "length", self.penalty,
                         len(self.start), forced_end=int(self.force_eos and not eos))  # fmt: skip
        for facts in seen:
            hyp.saw(facts)
        self.finished.append(hyp)

    def results(self) -> list[Hypothesis]:
        if not self.finished:  # not started
            return [Hypothesis(length_penalty=self.penalty, start=len(self.start))]
        return sorted(self.finished, key=lambda h: h.score, reverse=True)[: self.n]


@torch.inference_mode()
def beam_search_reference(
    model: Transformer, src: list[int], budget: int, options: DecodingOptions
) -> list[Hypothesis]:
    """The baseline for BeamSearch: one source, every beam's whole prefix decoded again at every step, the
    rules of the module doc written out plainly. Returns options.num_hypotheses hypotheses, best first."""
    c, k, eos = model.config, options.beam_size, model.config.eos_id
    src_ids = torch.tensor([src])
    src_mask = padding_mask(src_ids, c.source_pad_id)
    memory = model.encode(src_ids, src_mask)
    beams = [([], [], 0.0)]  # (tokens, log-probabilities, their sum): one beam until the first step's choice
    finished, best_finished = [], False
    steps = budget - c.force_eos
    for t in range(steps):
        ys = torch.tensor([[c.bos_id, *tokens] for tokens, _, _ in beams])  # (beams, t + 1)
        hidden = model.decode(ys, memory.expand(len(beams), -1, -1), src_mask, subsequent_mask(t + 1))
        logprobs = model.generator(hidden[:, -1]).float().log_softmax(-1)  # (beams, V)
        if t < len(options.prefix):  # forced: the first beam goes on with the prefix token, alone
            tokens, lps, score = beams[0]
            token = options.prefix[t]
            lp = logprobs[0, token].item()
            if t + 1 < steps:
                beams = [(tokens + [token], lps + [lp], score + lp)]
                continue
            candidates = [(score + lp, 0, token)]
        else:
            total = logprobs + torch.tensor([score for _, _, score in beams])[:, None]
            if options.begins_word(t):
                total = total.masked_fill(torch.as_tensor(options.glued), NEG_INF)
            top, flat = total.view(-1).topk(2 * k)
            candidates = [(s, *divmod(i, total.size(1))) for s, i in zip(top.tolist(), flat.tolist())]
        last = t + 1 == steps
        spares = iter([cand for cand in candidates[k:] if cand[2] != eos])
        next_beams = []
        for rank, (score, parent, token) in enumerate(candidates[:k]):
            tokens, lps, parent_score = beams[parent]
            if token == eos or last and not c.force_eos:
                ended = tokens if token == eos else tokens + [token]
                reason = "eos" if token == eos else "length"
                finished.append(Hypothesis(ended, lps + [score - parent_score], reason, options.length_penalty))
                best_finished |= rank == 0
                score, parent, token = next(spares, (score, parent, token))
                tokens, lps, parent_score = beams[parent]
            next_beams.append((tokens + [token], lps + [score - parent_score], score, token))
        beams = [beam[:3] for beam in next_beams]
        if options.length_penalty == 0:
            enough = best_finished and len(finished) >= options.num_hypotheses
        else:
            enough = len(finished) >= k
        if last and c.force_eos and not enough:  # a step more: the budget's </s> ends each beam (log-probability 0)
            finished += [Hypothesis(tokens, lps, "length", options.length_penalty, forced_end=1)
                         for tokens, lps, score, token in next_beams if token != eos and score > NEG_INF]  # fmt: skip
        if enough:
            break
    finished.sort(key=lambda h: h.score, reverse=True)
    return finished[: options.num_hypotheses]


@torch.inference_mode()
def alignment(
    model: Transformer, src: list[int], hyps: list[list[int]], start: tuple[int, ...] = ()
) -> list[list[int]]:
    """For each target token of each hypothesis of one source, the source token it aligns to: the one that the
    cross-attention of the penultimate decoder layer (the last, if there is one), averaged over heads, weighs most
    at the step that predicts the target token. The special tokens around the source's text (</s>, a language code:
    TransformerConfig.source_lead and source_tail) are left out (attention rests on them when nothing else fits).
    `start`: the tokens the decoder was fed before the hypotheses' (DecodingOptions.start)."""
    return alignments(model, [src], [hyps], start)[0]


def alignments(
    model: Transformer, sources: list[list[int]], hyps: list[list[list[int]]], start: tuple[int, ...] = ()
) -> list[list[list[int]]]:
    """alignment() for many sources at once (each with its hypotheses): one teacher-forced pass over a padded batch,
    a row per hypothesis, rather than a pass per source."""
    rows = [(i, tokens) for i, hs in enumerate(hyps) for tokens in hs]
    out: list[list[list[int]]] = [[] for _ in sources]
    if not rows:
        return out
    c, device = model.config, next(model.parameters()).device
    layer, first = max(0, c.n_decoder_layers - 2), 1 + len(start)
    width, length = max(len(sources[i]) for i, _ in rows), max(len(t) for _, t in rows) + first
    src = torch.full((len(rows), width), c.source_pad_id, dtype=torch.long)
    tgt = torch.full((len(rows), length), c.pad_id, dtype=torch.long)
    for r, (i, tokens) in enumerate(rows):
        src[r, : len(sources[i])] = torch.tensor(sources[i])
        tgt[r, : len(tokens) + first] = torch.tensor([c.bos_id, *start, *tokens])
    src, tgt = src.to(device), tgt.to(device)
    src_mask = padding_mask(src, c.source_pad_id)  # (R, 1, 1, S)
    memory = model.encode(src, src_mask)
    _, _, cross = model.decode(tgt, memory, src_mask, subsequent_mask(length, device), need_weights=True)
    weights = cross[layer].mean(1)  # (R, T, S): row t predicts target token t
    lengths = torch.tensor([len(sources[i]) for i, _ in rows], device=device)
    at = torch.arange(width, device=device)[None, :]
    real = at < lengths[:, None]
    text = real & (at >= c.source_lead) & (at < lengths[:, None] - c.source_tail)  # as attention_facts leaves out
    keep = text | (real & ~text.any(-1, keepdim=True))  # (R, S)
    best = weights.masked_fill(~keep[:, None, :], -1.0).argmax(-1).tolist()
    for r, (i, tokens) in enumerate(rows):
        out[i].append(best[r][len(start) : len(start) + len(tokens)])
    return out
