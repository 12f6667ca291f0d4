"""The Transformer's layers, in the paper's names: embeddings with positions (sinusoidal or learned), multi-head
attention (self- and cross-, with the cached one-query form the decoder step uses), the position-wise feed-forward
network, the residual sublayer, and the encoder and decoder layers built of them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.packed import Linear

if TYPE_CHECKING:
    from model.transformer import TransformerConfig

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}
LAYOUTS = ("interleaved", "halves", "fairseq", "learned")  # sinusoidal_table's layouts, and a learned table
# Fused attention on CUDA without cuDNN's kernel: it builds an execution plan for every new shape (in half precision
# on an H100 a prefill of a new source length took tens of milliseconds), and the sources change length with every
# admission. The memory-efficient kernel takes the padding mask and needs no plan.
CUDA_ATTENTION = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sinusoidal_table(max_positions: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...). -> (P, D)

    layout "halves" puts the d/2 sines first and the cosines after them, computed in float64 as Marian's
    (transformers' MarianSinusoidalPositionalEmbedding) are. "fairseq" puts them in halves too, at angles
    pos * exp(-i * log(10000) / (d/2 - 1)) computed in float32, with a zero last column when d is odd, as
    fairseq's and transformers' M2M100SinusoidalPositionalEmbedding.get_embedding compute them."""
    if layout == "fairseq":
        half = d_model // 2
        freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))  # (D/2,)
        angle = torch.arange(max_positions, dtype=torch.int64).float()[:, None] * freq[None]  # (P, D/2)
        return torch.cat([angle.sin(), angle.cos(), torch.zeros(max_positions, d_model % 2)], dim=1)  # (P, D)
    if layout == "halves":
        position = torch.arange(max_positions, dtype=torch.float64)[:, None]  # (P, 1)
        angle = position / 10000 ** (2 * torch.arange(d_model // 2, dtype=torch.float64) / d_model)  # (P, D/2)
        return torch.cat([angle.sin(), angle.cos()], dim=1).float()
    position = torch.arange(max_positions, dtype=torch.float32)[:, None]  # (P, 1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model) (unless scale=False) plus positions: sinusoidal, or a learned table
    (layout "learned"), then a LayerNorm where `norm` is set.

    Position p is the table's row p + offset; with pad_position_zero a padding token gets no position vector.
    `token` may be another Embeddings' (a vocabulary shared by sides that have positions of their own)."""

    def __init__(
        self, vocab_size: int, d_model: int, max_positions: int, pad_id: int, dropout: float,
        layout: str = "interleaved", scale: bool = True, offset: int = 0, pad_position_zero: bool = False,
        norm: bool = False, token: nn.Embedding | None = None,
    ):  # fmt: skip
        super().__init__()
        self.d_model, self.scale = d_model, math.sqrt(d_model) if scale else 1.0
        self.pad_id, self.pad_position_zero = pad_id, pad_position_zero
        if token is None:
            token = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
            nn.init.normal_(token.weight, mean=0.0, std=d_model**-0.5)
            with torch.no_grad():
                token.weight[pad_id].zero_()
        self.token = token
        if layout == "learned":
            self.pe = nn.Parameter(torch.randn(max_positions, d_model) * d_model**-0.5)  # (P, D)
        else:
            table = sinusoidal_table(max_positions + offset, d_model, layout)[offset:]  # (P, D): row p is position p
            self.register_buffer("pe", table.contiguous(), persistent=False)
        self.norm = nn.LayerNorm(d_model) if norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids (B, T) [positions (B, T)] -> (B, T, D)"""
        x = self.token(ids) * self.scale
        pe = self.pe[: ids.size(1)] if positions is None else self.pe[positions]  # (T, D) or (B, T, D)
        if self.pad_position_zero:
            pe = pe * (ids != self.pad_id)[..., None]  # (B, T, D)
        x = x + pe.to(x.dtype)
        return self.dropout(x if self.norm is None else self.norm(x))


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over n_heads heads; self-attention projects Q, K, V in one matmul."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, cross: bool):
        super().__init__()
        self.n_heads, self.head_dim, self.cross = n_heads, d_model // n_heads, cross
        if cross:
            self.q_proj = Linear(d_model, d_model)
            self.kv_proj = Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = Linear(d_model, 3 * d_model)
        self.out_proj = Linear(d_model, d_model)
        self.dropout = dropout

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention projections. x (B, T, D) -> 3 x (B, H, T, Dh)"""
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        return self._heads(q), self._heads(k), self._heads(v)

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        return self._heads(self.q_proj(x))  # (B, H, T, Dh)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys/values, computed once per sentence. (B, S, D) -> 2 x (B, H, S, Dh)"""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, need_weights: bool = False,
        fused: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """q (B, H, T, Dh), k/v (B, H, S, Dh), mask broadcastable to (B, H, T, S), True = attend.

        fused: F.scaled_dot_product_attention unless the weights are wanted; False spells the
        attention out in matmuls and a softmax, which torch.compile fuses better for one query.
        """
        dropout = self.dropout if self.training else 0.0
        if need_weights or not fused:
            scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(self.head_dim)  # (B, H, T, S)
            weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            out = F.dropout(weights, dropout, self.training).to(v.dtype) @ v  # (B, H, T, Dh)
        elif q.is_cuda:
            with sdpa_kernel(CUDA_ATTENTION):
                out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout), None
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh)), weights  # (B, T, D)

    def attend_cached(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor,
        past_keep: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        """One new query per row over the cached keys plus its own new key, without writing the cache.

        q, k, v (N, H, 1, Dh); past_k/past_v (N, H, T, Dh); past_keep (N, 1, 1, T), True = attend -> (N, 1, D)
        """
        past = (q @ past_k.transpose(-2, -1)).masked_fill(~past_keep, float("-inf"))  # (N, H, 1, T)
        own = (q * k).sum(-1, keepdim=True)  # (N, H, 1, 1): a token always sees itself
        weights = (torch.cat([past, own], dim=-1) / math.sqrt(self.head_dim)).softmax(dim=-1)  # (N, H, 1, T+1)
        T = past_k.size(2)
        out = weights[..., :T] @ past_v + weights[..., T:] * v  # (N, H, 1, Dh)
        N, H, _, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(N, 1, H * Dh))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, memory: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Self-attention over x, or cross-attention from x (queries) to memory (keys/values)."""
        if self.cross:
            q, (k, v) = self.project_q(x), self.project_memory(memory)
        else:
            q, k, v = self.project_qkv(x)
        return self.attend(q, k, v, mask, need_weights)


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> activation -> Linear."""

    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float):
        super().__init__()
        self.w1, self.w2 = Linear(d_model, d_ff), Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))


class Sublayer(nn.Module):
    """Residual connection around a sublayer with LayerNorm before (pre-LN) or after (post-LN) it."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm, self.dropout, self.norm_first = nn.LayerNorm(d_model), nn.Dropout(dropout), norm_first

    def pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.norm_first else x

    def post(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(y)
        return x if self.norm_first else self.norm(x)


class EncoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, cross=False)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation, c.activation_dropout)
        self.sub_attn = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.sub_ffn = Sublayer(c.d_model, c.dropout, c.norm_first)

    def forward(self, x, src_mask, need_weights=False):
        y, w = self.self_attn(self.sub_attn.pre(x), src_mask, need_weights=need_weights)
        x = self.sub_attn.post(x, y)
        return self.sub_ffn.post(x, self.ffn(self.sub_ffn.pre(x))), w


class DecoderLayer(nn.Module):
    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, cross=False)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, cross=True)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation, c.activation_dropout)
        self.sub_self = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.sub_cross = Sublayer(c.d_model, c.dropout, c.norm_first)
        self.sub_ffn = Sublayer(c.d_model, c.dropout, c.norm_first)

    def forward(self, x, memory, src_mask, tgt_mask, need_weights=False):
        """Full target sequence (training, teacher forcing). x (B, T, D), memory (B, S, D)."""
        y, w_self = self.self_attn(self.sub_self.pre(x), tgt_mask, need_weights=need_weights)
        x = self.sub_self.post(x, y)
        y, w_cross = self.cross_attn(self.sub_cross.pre(x), src_mask, memory=memory, need_weights=need_weights)
        x = self.sub_cross.post(x, y)
        return self.sub_ffn.post(x, self.ffn(self.sub_ffn.pre(x))), w_self, w_cross

    def step(self, x, past_k, past_v, past_keep, cross_k, cross_v, cross_mask):
        """One new token per row. x (N, 1, D); past_k/v (N, H, T, Dh) with past_keep (N, 1, 1, T);
        cross_k/v (N, H, S, Dh) with cross_mask (N, 1, 1, S) -> x (N, 1, D), this token's k and v (N, H, Dh),
        the cross-attention weights (N, H, 1, S)"""
        q, k, v = self.self_attn.project_qkv(self.sub_self.pre(x))  # (N, H, 1, Dh)
        x = self.sub_self.post(x, self.self_attn.attend_cached(q, k, v, past_k, past_v, past_keep))
        q = self.cross_attn.project_q(self.sub_cross.pre(x))
        y, weights = self.cross_attn.attend(q, cross_k, cross_v, cross_mask, fused=False)
        x = self.sub_cross.post(x, y)
        return self.sub_ffn.post(x, self.ffn(self.sub_ffn.pre(x))), k[:, :, 0], v[:, :, 0], weights
