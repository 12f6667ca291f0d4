"""Lexically constrained decoding: target phrases (a glossary's terms, as token ids) that a hypothesis must contain.

A hypothesis's `Progress` says which constraints it has produced and how far it is through the one it has begun.
Once begun, a constraint is produced to its end (its next token is forced); </s> is barred until every constraint is
met, and so, where the source ends a sentence (.!?), are the target tokens that end one (`stops`: a term the model
has not placed when it would end the sentence goes before its punctuation, "Ein Hund Köter.", not "Ein Hund. Köter");
and when the budget left is just enough for the unmet ones and </s>, the next one begins. A constraint begins
wherever the search picks its first token, whether the model chose it or a rule below did.

Each constraint may name the tokens it stands in for (`Phrase.instead_of`: the first token of the model's own
rendering of the glossary's source term): where a search would pick one of them and the constraint is unmet, the
constraint begins there instead, so the term takes the place of the word it translates. Two searches use this:

- One row (model/search.py's `Sampling` given constraints: a greedy request's, or a sampled one's): a constraint also
  begins where the step translates its source term: the step's cross-attention says which source token the new
  token aligns to (model/transformer.py's `attention_facts`), the constraint names its term's source positions
  (`Phrase.source_at`), and where the new token would begin a word aligned to one of them, the term begins instead.
  And where the model's log-probability for its first token is within `margin` of the token the row would pick
  (DecodingOptions.constraint_margin), or where the model would end the text with it unmet (the term then closes
  it). All at no cost in rows.
- `ConstrainedBeamSearch` (model/constrained_beam.py): dynamic beam allocation (Post & Vilar 2018, vectorized by Hu
  et al. 2019). Each beam's candidates are its best continuations, the first token of every constraint it has not
  begun, and that token in place of a rendering among the continuations (at the rendering's score); the beams are
  shared out among banks of candidates that have produced as many constraint tokens, round robin from the furthest
  bank, best score first within a bank, so hypotheses that have placed a term live beside those that have not yet. A
  hypothesis finishes only with every constraint met. (The source positions would help it less: measured on
  Multi30k, they cost en→fr 1 BLEU, docs/performance-history.md.)
"""

from __future__ import annotations

from dataclasses import dataclass


def continues_word(piece: str) -> bool:
    """Whether a target token goes on the word before it: no "▁" in front, and a letter, a digit or a hyphen first
    (none may follow a term: "Velo" + "-Fahrer" is another word than the term)."""
    return not piece.startswith("▁") and (piece[:1].isalnum() or piece[:1] in ("-", "‐", "‑"))


@dataclass(frozen=True, slots=True)
class Phrase:
    """A constraint: target token ids a hypothesis must contain, and the tokens it begins in place of."""

    tokens: tuple[int, ...]
    instead_of: frozenset[int] = frozenset()
    source_at: frozenset[int] = frozenset()  # the source positions of the term it translates (encoder input's)
    # the source positions of its source term where it is kept as written (an HTML element with translate="no"): a
    # step that translates one is no place for the term, which would take the kept element's place
    kept_at: frozenset[int] = frozenset()


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

    def __init__(self, phrases: tuple[Phrase, ...], stops: frozenset[int] = frozenset()):
        merged: dict[tuple[int, ...], frozenset[int]] = {}
        sources: dict[tuple[int, ...], frozenset[int]] = {}
        kept: dict[tuple[int, ...], frozenset[int]] = {}
        for p in phrases:
            if p.tokens:
                merged[p.tokens] = merged.get(p.tokens, frozenset()) | p.instead_of
                sources[p.tokens] = sources.get(p.tokens, frozenset()) | p.source_at
                kept[p.tokens] = kept.get(p.tokens, frozenset()) | p.kept_at
        self.phrases = tuple(merged)
        self.stops = sorted(stops)  # the target tokens that end a sentence, where the source ends one
        self.translating: dict[int, list[int]] = {}  # a source position -> the constraints whose term is there
        self.away: dict[int, set[int]] = {}  # a source position -> the constraints whose term is kept as written there
        self.firsts: dict[int, list[int]] = {}  # first token -> the constraints that begin with it
        self.instead: dict[int, list[int]] = {}  # a rendering's token -> the constraints that begin in its place
        self.replaced = [sorted(merged[phrase]) for phrase in self.phrases]  # each constraint's renderings
        for i, phrase in enumerate(self.phrases):
            self.firsts.setdefault(phrase[0], []).append(i)
            for t in merged[phrase]:
                self.instead.setdefault(t, []).append(i)
            for at in sources[phrase]:
                self.translating.setdefault(at, []).append(i)
            for at in kept[phrase] - sources[phrase]:
                self.away.setdefault(at, set()).add(i)
        # each constraint's source term's occurrences: runs of consecutive source positions
        self.runs = [_runs(sorted(sources[phrase])) for phrase in self.phrases]
        self.total = sum(map(len, self.phrases))

    def source_of(self, i: int, j: int, near: int | None) -> int | None:
        """The source position the j-th token of constraint i translates: of its source term's occurrence at (or
        nearest) `near`, the token as far into it as j is into the constraint; None where its term's are not known."""
        if not (runs := self.runs[i]):
            return None
        run = runs[0] if near is None else min(runs, key=lambda r: 0 if r[0] <= near <= r[-1] else abs(r[0] - near))
        return run[min(len(run) - 1, j * len(run) // len(self.phrases[i]))]

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

    def instead_of(self, p: Progress, token: int, away: set[int] | tuple = ()) -> int | None:
        """The first token of an unmet constraint that begins in place of `token`, or None (`away`: constraints that
        may not begin here)."""
        return next((self.phrases[i][0] for i in self.instead.get(token, ()) if i not in p.met and i not in away), None)

    def aligned(self, p: Progress, at: int | None) -> list[int]:
        """The unmet constraints whose source term is at `at`, the source position a step's new token aligns to."""
        return [i for i in self.translating.get(at, ()) if i not in p.met and i != p.current] if at is not None else []

    def pick(
        self, p: Progress, row, choice: int, left: int, margin: float, at: int | None = None, spaced: bool = False
    ) -> int:
        """One row's next token: `choice` is what it would pick from its step `row` (model/batch.py's StepRow) with
        </s> barred; `left`: the tokens it may still take, this one and </s> included; `at`: the source position the
        step's new token aligns to, where the step said (None); `spaced`: the last token was a space alone, after
        which no constraint begins (its first token's own space would make two) unless the budget leaves no choice."""
        if (token := self.forced(p)) is not None:
            return token
        unmet = self.unmet(p)
        if not unmet:
            return choice
        away = self.away.get(at, ()) if at is not None else ()  # the step translates a word kept as written
        if spaced:
            away = set(unmet)
        if (token := self.instead_of(p, choice, away)) is not None:
            return token
        firsts = [self.phrases[i][0] for i in unmet]
        if choice in firsts:
            return choice
        if away and not p.closing and left - 1 > self.needed(p):
            if not (unmet := [i for i in unmet if i not in away]):
                return choice
            firsts = [self.phrases[i][0] for i in unmet]
        if there := self.aligned(p, at):  # the step translates a term's source term: the term in its place
            if len(there) == 1:
                return self.phrases[there[0]][0]
            firsts = [self.phrases[i][0] for i in there]
            scores = row.logprobs(firsts)
            return firsts[max(range(len(firsts)), key=scores.__getitem__)]
        *scores, chosen = row.logprobs([*firsts, choice])
        best = max(range(len(firsts)), key=scores.__getitem__)
        if p.closing or left - 1 <= self.needed(p) or scores[best] >= chosen - margin:
            return firsts[best]
        return choice

    def closing(self, p: Progress) -> Progress:
        """The row would have ended with constraints unmet: they follow one another from here."""
        return Progress(p.met, p.current, p.at, True, p.ended)


def _runs(positions: list[int]) -> list[list[int]]:
    """Sorted positions as runs of consecutive ones: [1, 2, 5] -> [[1, 2], [5]]."""
    out: list[list[int]] = []
    for at in positions:
        if out and at == out[-1][-1] + 1:
            out[-1].append(at)
        else:
            out.append([at])
    return out
