"""A decoded hypothesis: its ids, their log-probabilities and what ended it (plain Python: no tensors)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hypothesis:
    tokens: list[int] = field(default_factory=list)  # generated ids, without <s> and </s>
    logprobs: list[float] = field(default_factory=list)  # one per generated id, </s> included
    finish_reason: str = "length"  # "eos" or "length"
    length_penalty: float = 1.0
    start: int = 0  # forced tokens before `tokens` (a target language): counted in the length with log-probability 0
    # 1 where the budget ended it with a forced </s> (TransformerConfig.force_eos): counted in the length with
    # log-probability 0, as transformers' forced_eos_token_id counts it, though it is never decoded
    forced_end: int = 0
    terms: set[int] = field(default_factory=set)  # positions of tokens a constraint put there (model/constraints.py)
    # per generated id (</s> included), what its step's cross-attention said (KVCache.facts): how far from
    # uniform it lay, and the source position the id aligns to; empty where the decoding kept none
    attention: list[float] = field(default_factory=list)
    aligned: list[int] = field(default_factory=list)

    def saw(self, facts: tuple[float, float] | None) -> None:
        """Record a step's attention facts (distance from uniform, aligned source position) for its new token."""
        if facts is not None:
            self.attention.append(facts[0])
            self.aligned.append(int(facts[1]))

    @property
    def score(self) -> float:
        """The summed log-probabilities over length ** length_penalty (</s> counted, and the forced start tokens, as
        transformers counts a forced_bos_token_id): with 1.0, the mean. A constraint's tokens are the caller's
        choice, not the model's, and count in neither (with them, a hypothesis that went on past its sentence would
        spread their cost over more tokens and outrank the one that ended it), but for its first: where a term
        begins is the search's choice, and that token's log-probability says how well it fits there ("Ein Köter
        Mann" against "seinem Köter")."""
        if not self.logprobs:
            return 0.0
        if self.terms:
            chosen = [lp for i, lp in enumerate(self.logprobs) if i not in self.terms or i - 1 not in self.terms]
            return sum(chosen) / max(len(chosen) + self.start + self.forced_end, 1) ** self.length_penalty
        return sum(self.logprobs) / (len(self.logprobs) + self.start + self.forced_end) ** self.length_penalty
