"""The training pairs in batches: sentences of similar length together, each batch as padded tensors."""

from __future__ import annotations

import random

import torch


def make_batches(pairs: list[tuple[list[int], list[int]]], batch_tokens: int, seed: int) -> list[list[int]]:
    """Indices grouped by similar length so that (rows x longest side) stays under batch_tokens."""
    rng = random.Random(seed)
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0]) + rng.random(), len(pairs[i][1])))
    batches, cur, longest = [], [], 0
    for i in order:
        n = max(len(pairs[i][0]), len(pairs[i][1]))
        if cur and (len(cur) + 1) * max(longest, n) * 2 > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(pairs, idx: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> src (B, S), tgt_in (B, T) = <s> y, tgt_out (B, T) = y </s>"""
    s_len = max(len(pairs[i][0]) for i in idx)
    t_len = max(len(pairs[i][1]) for i in idx) - 1
    src = torch.full((len(idx), s_len), pad_id, dtype=torch.long)
    tgt = torch.full((len(idx), t_len + 1), pad_id, dtype=torch.long)
    for r, i in enumerate(idx):
        s, t = pairs[i]
        src[r, : len(s)] = torch.tensor(s)
        tgt[r, : len(t)] = torch.tensor(t)
    return src, tgt[:, :-1], tgt[:, 1:]
