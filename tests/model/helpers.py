"""Helpers the model tests share: a padded batch of token rows, and the rows most of them decode."""

import torch


def batch(rows: list[list[int]], pad: int = 0) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


SOURCES = [[5, 6, 7, 8, 9, 10, 2], [11, 12, 2], [13, 14, 15, 16, 2], [17, 2]]
