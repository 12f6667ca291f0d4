"""What a model prefills and steps its KVCache with: its own functions, or graphs of them (`Transformer.steps`).

    model.steps.prefill(src)                                   # cross_kv for new rows (KVCache.add)
    cache.step(model.steps.greedy_step, tokens)                # one token for every live row (Transformer.decode_*)

Every field starts as the model's eager function of the same name; model/compile's `adopt` puts AOTInductor graphs
(or model/cuda_graphs.py's CUDA graphs) in their place and `uncompile` puts the eager functions back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


class StepGraphs:
    """A decoder step run on graphs (model/compile's CompiledStep, model/cuda_graphs.py's GraphedStep) rather than by
    the model's own code: KVCache.step hands it key and source windows of at least MIN_WINDOW and its tokens from the
    cache's own buffer (the same strides every step), so that one graph serves every window."""

    def padded(self, n: int, longest: int, src_len: int) -> tuple[int, int, int] | None:
        """The (rows, key window, source window) to hand over for n live rows whose keys reach `longest` and sources
        `src_len`, the step then told the live row count; None: the live shape (AOTInductor's dynamic graphs)."""
        return None


@dataclass(frozen=True)
class Steps:
    """The functions KVCache prefills and steps with, each named as the model function it runs: that function itself
    (eager), or its graphs."""

    prefill: Callable[[torch.Tensor], torch.Tensor]  # src (B, S) -> cross_kv (2, L, B, H, S, Dh)
    prefill_packed: Callable[..., torch.Tensor]  # ids, positions, seq (T,), index (B, S) -> cross_kv
    greedy_step: Callable[..., Sequence[torch.Tensor]]  # a step's inputs -> ids, logprobs, hidden, facts, kv
    logprob_step: Callable[..., Sequence[torch.Tensor]]  # a step's inputs -> logprobs (N, V), facts, kv

    @classmethod
    def eager(cls, model) -> Steps:
        """The model's (model/transformer.py's Transformer) own functions."""
        return cls(model.prefill, model.prefill_packed, model.greedy_step, model.logprob_step)
