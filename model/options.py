"""What a decoding may ask for (DecodingOptions, GREEDY) and a source's default budget: plain Python, no tensors, so
that the side that only tokenizes (an NMT_FRONTENDS front-end) has them without torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.constraints import Phrase

if TYPE_CHECKING:
    import numpy as np
    import torch


@dataclass(frozen=True)
class DecodingOptions:
    beam_size: int = 1
    num_hypotheses: int = 1  # hypotheses returned, best first: at most beam_size, or samples when sampling
    length_penalty: float = 1.0  # score = sum of log-probabilities / length ** length_penalty
    prefix: tuple[int, ...] = ()  # target ids the output must start with (they count towards the budget)
    sampling_topk: int = 1  # 1: the most likely token; k > 1: draw among the k most likely; 0: among all
    sampling_temperature: float = 1.0
    seed: int = 0
    # target ids the decoder is fed after its start token, before any it chooses, and not part of the output (a
    # many-to-many model's target language: transformers' forced_bos_token_id, CTranslate2's target_prefix)
    start: tuple[int, ...] = ()
    # what every hypothesis must contain: a glossary's terms (model/constraints.py)
    constraints: tuple[Phrase, ...] = ()
    constraint_margin: float = 5.0  # one row: a phrase begins where its first token is this close to the pick (nats)
    stops: frozenset[int] = frozenset()  # the target tokens that end a sentence (.!?), where the source ends one
    spaces: frozenset[int] = frozenset()  # the target tokens that are a space alone ("▁"): no phrase begins after one
    # (V,) True for tokens that continue a word: none may follow a phrase. The engine's searches get a tensor on its
    # device; a front-end makes it without torch, as an array, which the engine process turns into one
    glued: torch.Tensor | np.ndarray | None = None
    # the prefix's text ended in a space ("Ein "): the token after it begins a word (none of `glued`)
    word_after_prefix: bool = False

    def begins_word(self, t: int) -> bool:
        """Whether the token at output position `t` must begin a word: the first after a prefix that asks so."""
        return self.word_after_prefix and t == len(self.prefix) and self.glued is not None


GREEDY = DecodingOptions()


def greedy_after(start: tuple[int, ...]) -> DecodingOptions:
    """Greedy decoding after the `start` tokens (a many-to-many model's target language), none: GREEDY."""
    return DecodingOptions(start=start) if start else GREEDY


def max_new_tokens_for(src_len: int, limit: int = 256) -> int:
    """A generous output budget for a source of `src_len` tokens."""
    return min(limit, 2 * src_len + 10)
