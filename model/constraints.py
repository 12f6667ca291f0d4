"""Lexically constrained decoding: target phrases (a glossary's terms, as token ids) that a hypothesis must contain.

A hypothesis's `Progress` says which constraints it has produced and how far it is through the one it has begun.
Once begun, a constraint is produced to its end (its next token is forced); </s> is barred until every constraint is
met; and when the budget left is just enough for the unmet ones and </s>, the next one begins. A constraint begins
wherever the search picks its first token, whether the model chose it or a rule below did. Two searches use this:

Each constraint may name the tokens it stands in for (`Phrase.instead_of`: the first token of the model's own
rendering of the glossary's source term): where a search would pick one of them and the constraint is unmet, the
constraint begins there instead, so the term takes the place of the word it translates. Two searches use this:

- One row (model/search.py's `Sampling` given constraints: a greedy request's, or a sampled one's): besides in place
  of its rendering, a constraint begins where the model's log-probability for its first token is within `margin` of
  the token the row would pick (DecodingOptions.constraint_margin), or where the model would end the sentence with it
  unmet (the term then closes it), at no cost in rows.
- `ConstrainedBeamSearch`: dynamic beam allocation (Post & Vilar 2018, vectorized by Hu et al. 2019). Each beam's
  candidates are its best continuations, the first token of every constraint it has not begun, and that token in
  place of a rendering among the continuations (at the rendering's score); the beams are shared out among banks of
  candidates that have produced as many constraint tokens, round robin from the furthest bank, best score first
  within a bank, so hypotheses that have placed a term live beside those that have not yet. A hypothesis finishes
  only with every constraint met.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model.search import NEG_INF, BeamSearch, DecodingOptions
from model.transformer import TransformerConfig


@dataclass(frozen=True, slots=True)
class Phrase:
    """A constraint: target token ids a hypothesis must contain, and the tokens it begins in place of."""

    tokens: tuple[int, ...]
    instead_of: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Progress:
    """One hypothesis's way through the constraints."""

    met: frozenset[int] = frozenset()  # the constraints produced
    current: int = -1  # the constraint begun and not finished, or -1
    at: int = 0  # how many of its tokens are produced
    closing: bool = False  # one row: the model would have ended with constraints unmet; they follow one another
    ended: int = -1  # the constraint the last token finished: the next token begins a word, and is not its rendering


class Constraints:
    """Target phrases as token ids, each of which a hypothesis must produce (duplicates count once)."""

    def __init__(self, phrases: tuple[Phrase, ...]):
        merged: dict[tuple[int, ...], frozenset[int]] = {}
        for p in phrases:
            if p.tokens:
                merged[p.tokens] = merged.get(p.tokens, frozenset()) | p.instead_of
        self.phrases = tuple(merged)
        self.firsts: dict[int, list[int]] = {}  # first token -> the constraints that begin with it
        self.instead: dict[int, list[int]] = {}  # a rendering's token -> the constraints that begin in its place
        self.replaced = [sorted(merged[phrase]) for phrase in self.phrases]  # each constraint's renderings
        for i, phrase in enumerate(self.phrases):
            self.firsts.setdefault(phrase[0], []).append(i)
            for t in merged[phrase]:
                self.instead.setdefault(t, []).append(i)
        self.total = sum(map(len, self.phrases))

    def forced(self, p: Progress) -> int | None:
        """The next token of the constraint begun, or None."""
        return self.phrases[p.current][p.at] if p.current >= 0 else None

    def unmet(self, p: Progress) -> list[int]:
        """The constraints neither produced nor begun."""
        return [i for i in range(len(self.phrases)) if i not in p.met and i != p.current]

    def produced(self, p: Progress) -> int:
        """Constraint tokens produced so far (a hypothesis's bank)."""
        return sum(len(self.phrases[i]) for i in p.met) + p.at

    def needed(self, p: Progress) -> int:
        """Constraint tokens still to produce."""
        return self.total - self.produced(p)

    def done(self, p: Progress) -> bool:
        return len(p.met) == len(self.phrases)

    def after(self, p: Progress, token: int) -> Progress:
        """The progress once `token` is produced (a token other than the one forced abandons the constraint begun:
        only a target prefix can do that)."""
        if p.current >= 0:
            if token == self.phrases[p.current][p.at]:
                if p.at + 1 == len(self.phrases[p.current]):
                    return Progress(p.met | {p.current}, closing=p.closing, ended=p.current)
                return Progress(p.met, p.current, p.at + 1, p.closing)
            p = Progress(p.met, closing=p.closing)
        for i in self.firsts.get(token, ()):
            if i not in p.met:
                if len(self.phrases[i]) == 1:
                    return Progress(p.met | {i}, closing=p.closing, ended=i)
                return Progress(p.met, i, 1, p.closing)
        return Progress(p.met, closing=p.closing) if p.ended >= 0 else p

    def instead_of(self, p: Progress, token: int) -> int | None:
        """The first token of an unmet constraint that begins in place of `token`, or None."""
        return next((self.phrases[i][0] for i in self.instead.get(token, ()) if i not in p.met), None)

    def pick(self, p: Progress, row, choice: int, left: int, margin: float) -> int:
        """One row's next token: `choice` is what it would pick from its step `row` (model/batch.py's StepRow) with
        </s> barred; `left`: the tokens it may still take, this one and </s> included."""
        if (token := self.forced(p)) is not None:
            return token
        unmet = self.unmet(p)
        if not unmet:
            return choice
        if (token := self.instead_of(p, choice)) is not None:
            return token
        firsts = [self.phrases[i][0] for i in unmet]
        if choice in firsts:
            return choice
        *scores, chosen = row.logprobs([*firsts, choice])
        best = max(range(len(firsts)), key=scores.__getitem__)
        if p.closing or left - 1 <= self.needed(p) or scores[best] >= chosen - margin:
            return firsts[best]
        return choice

    def closing(self, p: Progress) -> Progress:
        """The row would have ended with constraints unmet: they follow one another from here."""
        return Progress(p.met, p.current, p.at, True, p.ended)


class ConstrainedBeamSearch(BeamSearch):
    """Beam search whose hypotheses all contain the constraints (dynamic beam allocation: see the module doc)."""

    constrained = True

    def __init__(self, options: DecodingOptions, budget: int, config: TransformerConfig):
        super().__init__(options, budget, config)
        self.constraints, self.glued = Constraints(options.constraints), options.glued
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
        if barred or ended:
            total = total.clone()
            total[barred, eos] = NEG_INF  # no </s> while a constraint is unmet
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
        for rank, (score, b, token) in enumerate(ranked[:k]):
            if token == eos or last:
                progress = K.after(self.progress[b], token)
                if K.done(progress):
                    self._finish(score, b, token)
                    self.best_finished |= rank == 0
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
