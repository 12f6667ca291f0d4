"""Beam search that every hypothesis's constraints hold in: dynamic beam allocation (model/constraints.py says
how), on model/search.py's BeamSearch."""

from __future__ import annotations

import torch

from model.constraints import Constraints, Progress
from model.search import NEG_INF, BeamSearch, DecodingOptions
from model.transformer import TransformerConfig


class ConstrainedBeamSearch(BeamSearch):
    """Beam search whose hypotheses all contain the constraints (dynamic beam allocation: see the module doc)."""

    constrained = True

    def __init__(self, options: DecodingOptions, budget: int, config: TransformerConfig):
        super().__init__(options, budget, config)
        self.constraints, self.glued = Constraints(options.constraints, options.stops), options.glued
        self.progress = [Progress()] * self.rows
        self.terms: list[frozenset[int]] = [frozenset()] * self.rows  # each beam's Hypothesis.terms

    def choose(self, total: torch.Tensor) -> tuple[list[int], list[int]] | None:
        """Given each beam's summed log-probabilities of every next token (k, V), take this step's hypotheses.
        Returns each row's parent beam and next token, or None once done."""
        K, k, eos = self.constraints, self.rows, self.eos
        last = self.length + 1 >= self.steps
        left = self.steps - self.length  # tokens each beam may still take, </s> included
        alive = [b for b in range(k) if self.scores[b] > NEG_INF]
        barred = [b for b in alive if not K.done(self.progress[b])]
        ended = [b for b in alive if self.progress[b].ended >= 0]
        if self.options.begins_word(self.length):  # after a prefix that ended in a space
            total = total.masked_fill(self.glued, NEG_INF)
        if barred or ended:
            total = total.clone()
            if barred:  # no </s> while a constraint is unmet, nor the sentence's end
                total[torch.tensor(barred)[:, None], torch.tensor([eos, *K.stops])[None, :]] = NEG_INF
            for b in ended:  # a term ends a word: the token after it begins one, and is not the word it replaced
                if self.glued is not None:
                    total[b] = total[b].masked_fill(self.glued, NEG_INF)
                total[b, K.replaced[self.progress[b].ended]] = NEG_INF
        top, ids = total[alive].topk(min(2 * k, total.size(-1)))  # (alive, 2k)
        host = total.detach().cpu().numpy()  # the few more values each beam reads, without a tensor op each
        candidates: dict[tuple[int, int], float] = {}  # (parent, token) -> summed log-probability
        prefix = self.forced()
        for b, scores, tokens in zip(alive, top.tolist(), ids.tolist()):
            p = self.progress[b]
            if prefix is not None or (token := K.forced(p)) is not None:
                token = prefix if prefix is not None else token
                if prefix is None or b == 0:  # a target prefix: beam 0 goes on with it, alone
                    candidates[b, token] = float(host[b, token])
                continue
            firsts = [K.phrases[i][0] for i in K.unmet(p)]
            if not firsts or left - 1 > K.needed(p):  # else there is room only for the constraints
                candidates.update(((b, t), s) for s, t in zip(scores, tokens))
            candidates.update(((b, t), float(host[b, t])) for t in firsts)
            for s, t in zip(scores, tokens):  # a constraint in place of the rendering it stands for
                if (first := K.instead_of(p, t)) is not None:
                    candidates[b, first] = max(candidates.get((b, first), NEG_INF), s)
        ranked = sorted(((s, b, t) for (b, t), s in candidates.items() if s > NEG_INF), reverse=True)
        # the candidates that end: those a bank's share of the beams takes (the hypotheses that have met every
        # constraint are a bank of their own, which the others, not paying for their terms yet, would outrank)
        for score, b, token in self._allocate(ranked, k):
            if token == eos or last:
                progress = K.after(self.progress[b], token)
                if K.done(progress):
                    self._finish(score, b, token)
                    self.best_finished |= (score, b, token) == ranked[0]
        enough = self.best_finished and len(self.finished) >= self.n if self.penalty == 0 else len(self.finished) >= k
        if last or enough or not ranked:
            self.done = True
            return None
        chosen = self._allocate([c for c in ranked if c[2] != eos], k)
        if not chosen:
            self.done = True
            return None
        beams, scores, progress, terms = [], [], [], []
        for score, b, token in chosen:
            beams.append(self._extend(score, b, token))
            scores.append(score)
            progress.append(K.after(self.progress[b], token))
            terms.append(self._terms(b, token))
        while len(beams) < k:  # fewer candidates than beams: dead copies
            beams.append(beams[0])
            scores.append(NEG_INF)
            progress.append(progress[0])
            terms.append(terms[0])
            chosen.append(chosen[0])
        self.beams, self.scores, self.progress, self.terms = beams, scores, progress, terms
        return [c[1] for c in chosen], [c[2] for c in chosen]

    def _terms(self, parent: int, token: int) -> frozenset[int]:
        """The positions of the terms' tokens in the parent's hypothesis continued by `token`."""
        before, after = self.progress[parent], self.constraints.after(self.progress[parent], token)
        if after.current >= 0 or len(after.met) > len(before.met):
            return self.terms[parent] | {self.length}
        return self.terms[parent]

    def _finish(self, score: float, parent: int, token: int) -> None:
        super()._finish(score, parent, token)
        self.finished[-1].terms = set(self._terms(parent, token))

    def _allocate(self, ranked: list[tuple[float, int, int]], k: int) -> list[tuple[float, int, int]]:
        """k of the candidates (best first): round robin over the banks, the furthest first, best first in each."""
        banks: dict[int, list] = {}
        for c in ranked:
            banks.setdefault(self.constraints.produced(self.constraints.after(self.progress[c[1]], c[2])), []).append(c)
        queues = [iter(banks[b]) for b in sorted(banks, reverse=True)]
        chosen: list[tuple[float, int, int]] = []
        while queues and len(chosen) < k:
            for q in list(queues):
                c = next(q, None)
                if c is None:
                    queues.remove(q)
                elif len(chosen) < k:
                    chosen.append(c)
        return sorted(chosen, reverse=True)
