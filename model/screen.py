"""The greedy choice over the output projection, screened in bfloat16 and confirmed in float32.

At 32 rows the (N, D) x (D, V) output projection is a third of a decoder step on this CPU, and a
bfloat16 matmul of that shape runs ~3x faster than a float32 one where the CPU has AVX512-BF16 or
AMX. The screen computes the logits in bfloat16 (a), takes each row's K best by a, recomputes those
K in float32 (z) and keeps the best of them. That is the float32 argmax whenever

    z_best > a_K + u |a_K| + eps ||h|| max_j ||W_j||

(a_K: the K-th screened logit; u |a_K| covers a being rounded to bfloat16; eps ||h|| ||W_j|| bounds
how far the screened logit of any token j can be from its float32 one: h and W_j rounded to
bfloat16, relative error 2^-8 each, plus both float32 accumulations; Cauchy-Schwarz bounds
sum |h_i W_ji|). No token outside the K can then beat z_best. A row where the bound does not hold
gets id -1 and `confirm` settles it with the full float32 projection, so the tokens are always
float32 greedy's. Measured on test2016 with the bundled model: the bound held for all 14,927 steps
with K = 8 (56 failed with K = 4).

A bias on the logits (an imported model's, with -inf at tokens never generated) is added to both, in
bfloat16 to the screened logits and in float32 to the K recomputed ones; its rounding, u |b_j|, widens
the margin by u max |b|.

The log-probability is z_best - logsumexp over the screened logits with the K replaced by their
float32 values: off by 4e-5 (median) and 3e-3 (worst) on that set, so scores are not bit-exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CANDIDATES = 8  # K: float32 logits recomputed per row
BLOCK = 64  # columns per block in top_k's first round
MIN_ROWS = 4  # below this a bfloat16 matmul of this shape is no faster on this CPU


def greedy_pick(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's most likely token and its log-probability, without a full log_softmax. (N, V) -> 2 x (N,)

    Run eagerly it overwrites `logits` (float32) with the exponentials it sums: torch.logsumexp's own arithmetic
    (shift by the row's maximum, exp, sum, log) without its (N, V) temporary, which at NLLB-200's 256k-token
    vocabulary is 33 MB a 32-row step, fresh pages from the system every step (~6% of an eager step). Traced, it is
    logsumexp, which the graphs fuse."""
    logits = logits.float()
    best, ids = logits.max(-1)
    if torch.compiler.is_compiling():
        return ids, best - logits.logsumexp(-1)
    peak = best.masked_fill(best.isinf(), 0)  # as logsumexp: an infinite maximum is not subtracted
    return ids, best - logits.sub_(peak.unsqueeze(-1)).exp_().sum(-1).log_().add_(peak)


def supported(weight: torch.Tensor) -> bool:
    """Whether the screen pays for this output projection: float32, on a CPU with native bfloat16 matmuls."""
    return (
        weight.dtype == torch.float32 and weight.device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


class LogitScreen(nn.Module):
    """greedy_pick for (N, D) hidden states, with the output projection screened in bfloat16."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None = None, candidates: int = CANDIDATES,
        min_rows: int = MIN_ROWS,
    ):  # fmt: skip
        super().__init__()
        weight = weight.detach()  # (V, D), float32
        self.register_buffer("weight_bf16", weight.bfloat16(), persistent=False)
        unit = 2.0**-8  # bfloat16's unit roundoff (8 significant bits, round to nearest)
        accumulation = weight.size(1) * 2.0**-24  # a float32 dot product of length D
        self.eps = 1.01 * (2 * unit + unit * unit + 2 * accumulation) * float(weight.norm(dim=1).max())
        self.unit = 1.01 * unit
        bias = None if bias is None else bias.detach().float()  # (V,)
        self.register_buffer("bias", bias, persistent=False)
        self.register_buffer("bias_bf16", None if bias is None else bias.bfloat16(), persistent=False)
        finite = None if bias is None else bias[bias.isfinite()]
        self.bias_error = self.unit * float(finite.abs().max()) if finite is not None and finite.numel() else 0.0
        self.candidates, self.min_rows = min(candidates, weight.size(0)), min_rows

    def forward(self, hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden (N, D), weight (V, D) float32 -> ids (N,) (-1 where unconfirmed), logprobs (N,)"""
        screened = F.linear(hidden.bfloat16(), self.weight_bf16, self.bias_bf16)  # (N, V) bfloat16
        top, cand = self.top_k(screened)  # (N, K) float32, (N, K)
        exact = torch.bmm(weight[cand], hidden[:, :, None])[..., 0]  # (N, K) float32
        if self.bias is not None:
            exact = exact + self.bias[cand]
        best, j = exact.max(-1)
        ids = cand.gather(-1, j[:, None])[:, 0]  # (N,)
        kth = top[:, -1]
        sure = best > kth + self.unit * kth.abs() + self.eps * hidden.norm(dim=-1) + self.bias_error
        # logsumexp with the K screened logits swapped for their float32 values (no (N, V) float32 copy)
        peak = top[:, :1]  # (N, 1)
        rest = (screened.float() - peak).exp().sum(-1) - (top - peak).exp().sum(-1)  # the V - K others
        lse = peak[:, 0] + (rest.clamp(min=0) + (exact - peak).exp().sum(-1)).log()
        return torch.where(sure, ids, -1), best - lse

    def top_k(self, screened: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's K largest values and their indices, (N, V) -> 2 x (N, K), in two rounds of topk:
        over the maxima of blocks of BLOCK columns, then within the K best blocks (which hold the K
        largest values). A topk over all V columns took a tenth of a 32-row step here."""
        n, v = screened.shape
        k, blocks = self.candidates, -(-v // BLOCK)
        b = min(k, blocks)
        grid = F.pad(screened, (0, blocks * BLOCK - v), value=float("-inf")).view(n, blocks, BLOCK)
        best_blocks = grid.amax(-1).topk(b, -1).indices  # (N, b)
        within = grid.gather(1, best_blocks[:, :, None].expand(n, b, BLOCK)).view(n, b * BLOCK)
        top, at = within.topk(k, -1)  # (N, K)
        return top.float(), best_blocks.gather(1, at // BLOCK) * BLOCK + at % BLOCK

    @staticmethod
    def confirm(ids, logprobs, hidden, generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Settle the rows the screen left at -1 with the float32 projection `generator`. (N,), (N,), (N, D)"""
        unsure = ids < 0
        if bool(unsure.any()):  # one host check; the screen runs only on CPUs, where it costs no device sync
            ids, logprobs = ids.clone(), logprobs.clone()
            ids[unsure], logprobs[unsure] = greedy_pick(generator(hidden[unsure]))  # (U, V) logits
        return ids, logprobs
