"""What EngineCore.attention returns: a teacher-forced pass's attention weights, in lists (no tensors, so that a
front-end without torch receives them whole)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AttentionWeights:
    """A teacher-forced pass's attention weights, the chosen layers and heads (rounded to 4 decimals): the core's
    answer, in lists, which an engine turns into an `Attention`."""

    decoder_ids: list[int]  # <s>, the start tokens and the target: the rows of the decoder's weights
    encoder: list  # [L][H][S][S]
    decoder: list  # [L][H][T][T]
    cross: list  # [L][H][T][S]
