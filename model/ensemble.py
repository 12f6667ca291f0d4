"""Several models with one vocabulary decoding as one: a teacher for sequence-level distillation (nmt-eval).

Each step every member decodes its own rows of its own KVCache, and the ensemble's log-probabilities are the log
of the members' mean probabilities (fairseq's and Marian's ensembles average likewise). `Ensemble` and
`EnsembleCache` take the places of a Transformer and its KVCache in model.batch's RowBatch and `decode`, so
greedy decoding, beam search, n-best lists and sampling work on an ensemble unchanged.
"""

from __future__ import annotations

import math

import torch

from model.decoding import KVCache
from model.transformer import Transformer


class Ensemble:
    """Transformers that share their vocabulary and special ids, decoding as one model."""

    def __init__(self, models: list[Transformer]):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        ids = {(m.config.src_vocab_size, m.config.tgt_vocab_size, m.config.pad_id, m.config.bos_id, m.config.eos_id,
                m.config.source_pad_id) for m in models}  # fmt: skip
        if len(ids) > 1:
            raise ValueError("the models of an ensemble must share their vocabularies and special ids")
        self.models, self.config = models, models[0].config

    def parameters(self):
        return self.models[0].parameters()

    def new_cache(self, max_batch: int, max_len: int, max_src_len: int) -> EnsembleCache:
        return EnsembleCache([KVCache(m, max_batch, max_len, max_src_len) for m in self.models])

    def decode_logprobs(self, tokens: torch.Tensor, cache: EnsembleCache) -> torch.Tensor:
        """tokens (N,) -> log of the members' mean next-token probabilities (N, V), float32"""
        each = [m.decode_logprobs(tokens, c) for m, c in zip(self.models, cache.caches)]
        if len(each) == 1:
            return each[0]
        return torch.stack(each).logsumexp(0) - math.log(len(each))

    def decode_greedy(self, tokens: torch.Tensor, cache: EnsembleCache) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (N,) -> the ensemble's most likely next ids (N,) and their log-probabilities (N,)"""
        best, ids = self.decode_logprobs(tokens, cache).max(-1)
        return ids, best


class EnsembleCache:
    """One KVCache per member, their rows kept in step: every cache adds, removes, copies and reorders alike."""

    def __init__(self, caches: list[KVCache]):
        self.caches = caches
        first = caches[0]
        self.kv = first.kv  # RowBatch reads the device from it
        self.max_batch, self.max_len, self.max_src_len = first.max_batch, first.max_len, first.max_src_len

    @property
    def facts(self):
        """The first member's attention facts of the last step (KVCache.facts): members align alike enough."""
        return self.caches[0].facts

    @property
    def n(self) -> int:
        return self.caches[0].n

    @property
    def free(self) -> int:
        return self.caches[0].free

    def add(self, model: Ensemble, src: torch.Tensor) -> range:
        rows = [c.add(m, src) for m, c in zip(model.models, self.caches)]
        return rows[0]  # the same rows in every cache

    def remove(self, rows) -> list[tuple[int, int]]:
        rows = list(rows)
        moves = [c.remove(rows) for c in self.caches]
        return moves[0]

    def duplicate(self, rows: list[int]) -> range:
        new = [c.duplicate(rows) for c in self.caches]
        return new[0]

    def reorder(self, dst: list[int], src: list[int]) -> None:
        for c in self.caches:
            c.reorder(dst, src)
