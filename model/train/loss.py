"""The loss a batch trains on: label-smoothed cross-entropy, with R-Drop and word-level knowledge distillation."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def teacher_probs(teachers: list, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """(B, T, V): the teachers' next-token distributions, averaged (an ensemble averages probabilities)."""
    with torch.no_grad():  # not inference_mode: the result is a constant inside the student's autograd graph
        return sum(t(src, tgt_in).float().softmax(-1) for t in teachers) / len(teachers)


def batch_loss(
    net, src, tgt_in, tgt_out, pad_id: int, label_smoothing: float, r_drop: float = 0.0,
    teacher: torch.Tensor | None = None, kd_alpha: float = 0.0,
) -> torch.Tensor:  # fmt: skip
    """The batch's loss summed over its target tokens. With teacher, the teachers' distributions (B, T, V) for each
    target token (word-level knowledge distillation, Kim & Rush 2016): (1 - kd_alpha) x the cross-entropy +
    kd_alpha x KL(teacher || student). With r_drop > 0 (R-Drop, Liang et al. 2021, as its fairseq code): the batch
    runs twice under different dropout; the mean of the two losses plus r_drop times the mean of KL(p1 || p2) and
    KL(p2 || p1) of the two predicted distributions, per target token."""
    if r_drop:
        src, tgt_in = torch.cat([src, src]), torch.cat([tgt_in, tgt_in])
    logits = net(src, tgt_in).float()  # (B or 2B, T, V)
    gold = torch.cat([tgt_out, tgt_out]) if r_drop else tgt_out
    loss = F.cross_entropy(
        logits.flatten(0, 1), gold.flatten(), ignore_index=pad_id, label_smoothing=label_smoothing, reduction="sum"
    )
    if teacher is not None:
        pt = torch.cat([teacher, teacher]) if r_drop else teacher
        kd = (pt * (pt.clamp_min(1e-30).log() - logits.log_softmax(-1))).sum(-1)  # (B or 2B, T): KL(pt || student)
        loss = (1 - kd_alpha) * loss + kd_alpha * kd.masked_fill(gold == pad_id, 0.0).sum()
    if not r_drop:
        return loss
    lp1, lp2 = logits.log_softmax(-1).chunk(2)  # (B, T, V) each
    kl = (lp1.exp() * (lp1 - lp2) + lp2.exp() * (lp2 - lp1)).sum(-1)  # (B, T): KL(p1||p2) + KL(p2||p1)
    kl = kl.masked_fill(tgt_out == pad_id, 0.0).sum()
    return (loss + r_drop * kl / 2) / 2
