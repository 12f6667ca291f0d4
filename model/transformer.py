"""The encoder-decoder Transformer of "Attention Is All You Need", written from primitives."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from model.screen import LogitScreen, greedy_pick, supported
from model.steps import Steps


@dataclass
class TransformerConfig:
    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 256  # width of every residual stream
    n_heads: int = 4  # attention heads; d_model must divide evenly
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024  # inner width of the position-wise feed-forward network
    dropout: float = 0.1  # on embeddings, sublayer outputs
    attention_dropout: float = 0.0  # on attention weights
    activation_dropout: float = 0.0  # inside the feed-forward network
    max_positions: int = 1024  # rows of the sinusoidal table
    norm_first: bool = True  # pre-LN (stable); False = post-LN as in the paper
    activation: str = "relu"  # "relu", "gelu" or "silu" (Marian's "swish")
    share_embeddings: bool = True  # one table for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding matrix
    pad_id: int = 0
    bos_id: int = 1  # the decoder's first input (Marian starts from pad)
    eos_id: int = 2
    unk_id: int = 3
    # Options that imported models need (model/importers/); the defaults are nmt-train's model.
    positions: str = "interleaved"  # sinusoid layout: sin and cos interleaved (the paper), "halves" (Marian) or
    # "fairseq" (M2M100: halves at frequencies 10000^(-i/(d/2 - 1)), a zero column for an odd d_model); or
    # "learned": a trained table per side (mBART), position p at its row p
    position_offset: int = 0  # token i takes the table's row i + offset (M2M100: pad_id + 1)
    pad_position_zero: bool = False  # a padding token gets no position vector (M2M100's zero row at pad_id)
    scale_embedding: bool = True  # token embeddings times sqrt(d_model)
    embed_norm: bool = False  # a LayerNorm per side on token + position embeddings (mBART's layernorm_embedding)
    logits_bias: bool = False  # a learned bias added to the output logits (Marian's final_logits_bias)
    suppress_ids: list[int] = field(default_factory=list)  # never generated (Marian's bad_words_ids: pad)
    force_eos: bool = False  # a text that reaches its token budget ends with </s> (Marian's forced_eos_token_id)
    src_pad_id: int | None = None  # source padding when the source vocabulary's differs from pad_id

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {self.activation!r}")
        if self.positions not in LAYOUTS:
            raise ValueError(f"positions must be one of {LAYOUTS}, not {self.positions!r}")
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, not {self.position_offset}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size")
        bad = [i for i in self.suppress_ids if not 0 <= i < self.tgt_vocab_size]
        if bad:
            raise ValueError(f"suppress_ids {bad} are not target token ids (0..{self.tgt_vocab_size - 1})")

    @property
    def source_pad_id(self) -> int:
        return self.pad_id if self.src_pad_id is None else self.src_pad_id

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; allowed: {sorted(known)}")
        return cls(**d)


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """True where a key is a real token. (B, S) -> (B, 1, 1, S)"""
    return (ids != pad_id)[:, None, None, :]


def subsequent_mask(size: int, device: torch.device | None = None) -> torch.Tensor:
    """True where query i may see key j (j <= i). -> (1, 1, T, T)"""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril_()[None, None]


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
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
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
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
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


def attention_facts(weights: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """What one step's cross-attention (the alignment layer's, averaged over heads) says of each row.

    weights (N, S) over the source window, keep (N, S) True = a real source token, padding at the end only ->
    (N, 2) float32: the Wasserstein-1 distance of the weights from the uniform distribution over the row's tokens,
    in source lengths (0 = spread evenly, near 1 = all on one end: attention that rests on one token, as it does
    where the model no longer translates the source; Guerreiro et al., ACL 2023), and the position the weights
    put most on, the source's closing token left out (attention rests there when nothing else fits): the source
    token the step's new target token aligns to, as model/search.py's `alignment` finds it by a second pass.
    """
    weights, real = weights.float(), keep.float()
    length = real.sum(-1).clamp(min=1)  # (N,)
    uniform = real.cumsum(-1) / length[:, None]
    distance = (weights.cumsum(-1) - uniform).abs().sum(-1) / length  # (N,)
    at = torch.arange(keep.size(-1), device=keep.device)
    last = (at * keep).amax(-1)  # (N,) the closing token's position
    eligible = keep & ((at[None, :] != last[:, None]) | (length[:, None] < 2))
    position = weights.masked_fill(~eligible, -1.0).argmax(-1).float()
    return torch.stack([distance, position], -1)


class Transformer(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        c = self.config = config
        embed = {
            "d_model": c.d_model, "max_positions": c.max_positions, "dropout": c.dropout, "layout": c.positions,
            "offset": c.position_offset, "pad_position_zero": c.pad_position_zero, "norm": c.embed_norm,
            "scale": c.scale_embedding,
        }  # fmt: skip
        self.src_embed = Embeddings(c.src_vocab_size, pad_id=c.source_pad_id, **embed)
        if c.share_embeddings and c.positions != "learned" and not c.embed_norm:
            self.tgt_embed = self.src_embed  # nothing of its own: the same module
        else:  # a shared vocabulary keeps one token table; positions and the norm are the side's
            token = self.src_embed.token if c.share_embeddings else None
            self.tgt_embed = Embeddings(c.tgt_vocab_size, pad_id=c.pad_id, token=token, **embed)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output_proj = None if c.tie_output else nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.logits_bias:
            self.register_buffer("logits_bias", torch.zeros(c.tgt_vocab_size))  # (V,), loaded with the weights
        if c.suppress_ids:
            mask = torch.zeros(c.tgt_vocab_size)
            mask[c.suppress_ids] = float("-inf")
            self.register_buffer("logits_mask", mask, persistent=False)  # (V,): -inf where never generated
        self.screen = None  # a LogitScreen (model/screen.py) for greedy_step, set by use_screen
        self.steps = Steps.eager(self)  # what KVCache prefills and steps with: graphs once model/compile adopts them
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor, need_weights: bool = False):
        """src (B, S), src_mask (B, 1, 1, S) -> memory (B, S, D) [, per-layer weights (B, H, S, S)]"""
        x, weights = self.src_embed(src), []
        for layer in self.encoder_layers:
            x, w = layer(x, src_mask, need_weights)
            weights.append(w)
        memory = self.encoder_norm(x)
        return (memory, weights) if need_weights else memory

    def decode(self, tgt, memory, src_mask, tgt_mask, need_weights: bool = False):
        """tgt (B, T) teacher-forced -> hidden (B, T, D) [, self (B, H, T, T) and cross (B, H, T, S) weights]"""
        x, w_self, w_cross = self.tgt_embed(tgt), [], []
        for layer in self.decoder_layers:
            x, ws, wc = layer(x, memory, src_mask, tgt_mask, need_weights)
            w_self.append(ws)
            w_cross.append(wc)
        x = self.decoder_norm(x)
        return (x, w_self, w_cross) if need_weights else x

    def attention_weights(self, src: torch.Tensor, tgt: torch.Tensor) -> tuple[list, list, list]:
        """A teacher-forced pass that keeps the attention weights. src (1, S); tgt (B, T) starting with <s> (padding
        after a row's end is never attended by its earlier positions) -> per layer: encoder (1, H, S, S), decoder
        self- (B, H, T, T) and cross-attention (B, H, T, S) weights"""
        src_mask = padding_mask(src, self.config.source_pad_id)  # (1, 1, 1, S)
        memory, enc = self.encode(src, src_mask, need_weights=True)
        tgt_mask = subsequent_mask(tgt.size(1), tgt.device)  # (1, 1, T, T)
        _, dec, cross = self.decode(tgt, memory.expand(tgt.size(0), -1, -1), src_mask, tgt_mask, need_weights=True)
        return enc, dec, cross

    @property
    def generator_weight(self) -> torch.Tensor:
        """The output projection's weight (V, D): the target embedding's when tied."""
        return self.tgt_embed.token.weight if self.output_proj is None else self.output_proj.weight

    @property
    def output_bias(self) -> torch.Tensor | None:
        """What the generator adds to the logits (V,): the learned bias and -inf at suppressed ids, or None."""
        bias = getattr(self, "logits_bias", None)
        mask = getattr(self, "logits_mask", None)
        if mask is None:
            return bias
        return mask if bias is None else bias + mask

    def generator(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., D) -> logits (..., V)"""
        if self.output_proj is None:
            logits = F.linear(hidden, self.tgt_embed.token.weight)
        else:
            logits = self.output_proj(hidden)  # a module call: quantize_dynamic may have swapped it
        bias = self.output_bias
        return logits if bias is None else logits + bias.to(logits.dtype)

    def use_screen(self, on: bool = True) -> bool:
        """Screen greedy_step's output projection in bfloat16 (model/screen.py) where that pays; returns
        whether it is on. Call it before model/compile compiles the step."""
        on = on and supported(self.generator_weight)
        self.screen = LogitScreen(self.generator_weight, self.output_bias) if on else None
        return self.screen is not None

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Teacher forcing. src (B, S), tgt (B, T) starting with <s> -> logits (B, T, V)"""
        src_mask = padding_mask(src, self.config.source_pad_id)
        tgt_mask = padding_mask(tgt, self.config.pad_id) & subsequent_mask(tgt.size(1), tgt.device)
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))

    def prefill(self, src: torch.Tensor) -> torch.Tensor:
        """Encode once and project every decoder layer's cross-attention keys/values.
        src (B, S) -> cross_kv (2, L, B, H, S, Dh): keys, then values"""
        return self.cross_kv(self.encode(src, padding_mask(src, self.config.source_pad_id)))

    def cross_kv(self, memory: torch.Tensor) -> torch.Tensor:
        """Every decoder layer's cross-attention keys/values. memory (B, S, D) -> (2, L, B, H, S, Dh)"""
        ks, vs = zip(*(layer.cross_attn.project_memory(memory) for layer in self.decoder_layers))
        return torch.stack([torch.stack(ks), torch.stack(vs)])

    def prefill_packed(self, ids, positions, seq, index):
        """`prefill` for sentences laid end to end in one row, so that no padding is encoded.

        ids, positions, seq (T,): each token, its position in its sentence and its sentence's number;
        index (B, S): where sentence b's token s sits in the row (any valid place past its end)
        -> cross_kv (2, L, B, H, S, Dh), as `prefill` gives it for the padded batch
        """
        x = self.src_embed(ids[None], positions[None])  # (1, T, D)
        mask = (seq[:, None] == seq[None, :])[None, None]  # (1, 1, T, T): a token sees only its own sentence
        for layer in self.encoder_layers:
            x, _ = layer(x, mask)
        kv = self.cross_kv(self.encoder_norm(x))[:, :, 0]  # (2, L, H, T, Dh)
        return kv[:, :, :, index].permute(0, 1, 3, 2, 4, 5)  # (2, L, B, H, S, Dh)

    def step(self, tokens, positions, past_kv, cross_kv, src_keep):
        """The decoder on one new token per row, as a pure function of tensors (what torch.export and the compiler take).

        tokens, positions (N,); past_kv (2, L, N, H, T, Dh): keys and values of positions < T, of which a row
        attends to those before its own position; cross_kv (2, L, N, H, S, Dh) with src_keep (N, S), True = a
        real source token -> logits (N, V), what the step's cross-attention says of each row (N, 2)
        (`attention_facts`), this token's keys and values kv (2, L, N, H, Dh)
        """
        hidden, facts, kv = self.step_hidden(tokens, positions, past_kv, cross_kv, src_keep)
        return self.generator(hidden), facts, kv

    def step_hidden(self, tokens, positions, past_kv, cross_kv, src_keep):
        """`step` up to the final norm: -> hidden (N, D), facts (N, 2), kv (2, L, N, H, Dh)"""
        x = self.tgt_embed(tokens[:, None], positions[:, None])  # (N, 1, D)
        past_keep = (torch.arange(past_kv.size(4), device=tokens.device)[None, :] < positions[:, None])[:, None, None]
        cross_mask = src_keep[:, None, None, :]  # (N, 1, 1, S)
        ks, vs, facts = [], [], None
        for i, layer in enumerate(self.decoder_layers):
            x, k, v, weights = layer.step(
                x, past_kv[0, i], past_kv[1, i], past_keep, cross_kv[0, i], cross_kv[1, i], cross_mask
            )
            ks.append(k)
            vs.append(v)
            if i == self.alignment_layer:
                facts = attention_facts(weights[:, :, 0].mean(1), src_keep)
        return self.decoder_norm(x[:, 0]), facts, torch.stack([torch.stack(ks), torch.stack(vs)])

    @property
    def alignment_layer(self) -> int:
        """The decoder layer whose cross-attention, averaged over heads, aligns target tokens to source tokens: the
        penultimate (the last, if there is one)."""
        return max(0, self.config.n_decoder_layers - 2)

    def greedy_step(self, tokens, positions, past_kv, cross_kv, src_keep):
        """`step`, then each row's most likely token and its log-probability -> ids, logprobs, hidden (N, D),
        facts (N, 2), kv. With a screen and enough rows, ids are -1 where the screen could not vouch for the
        float32 argmax: LogitScreen.confirm settles those (decode_greedy does)."""
        hidden, facts, kv = self.step_hidden(tokens, positions, past_kv, cross_kv, src_keep)
        if self.screen is not None and hidden.size(0) >= self.screen.min_rows:
            return *self.screen(hidden, self.generator_weight), hidden, facts, kv
        return *greedy_pick(self.generator(hidden)), hidden, facts, kv

    def logprob_step(self, tokens, positions, past_kv, cross_kv, src_keep):
        """`step` with float32 log-probabilities rather than logits -> logprobs (N, V), facts (N, 2), kv (what beam
        search and sampling take, in one compiled graph with the decoder)"""
        logits, facts, kv = self.step(tokens, positions, past_kv, cross_kv, src_keep)
        return logits.float().log_softmax(-1), facts, kv

    def decode_step(self, tokens: torch.Tensor, cache) -> torch.Tensor:
        """Feed one token per live cache row at that row's position. tokens (N,) -> logits (N, V)"""
        return cache.step(self.step, tokens)[0]

    def decode_logprobs(self, tokens: torch.Tensor, cache) -> torch.Tensor:
        """logprob_step on the cache's live rows (its graphs once model/compile compiled it).
        tokens (N,) -> log-probabilities (N, V)"""
        return cache.step(self.steps.logprob_step, tokens)[0]

    def decode_greedy(self, tokens: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """greedy_step on the cache's live rows (its graphs once model/compile compiled it), screened rows settled.
        tokens (N,) -> next ids (N,), their log-probabilities (N,)"""
        ids, logprobs, _ = self._greedy(tokens, cache)
        return ids, logprobs

    def decode_greedy_hidden(self, tokens: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """decode_greedy, and the rows' final hidden states (N, D): the generator gives any of them every token's
        logit. tokens (N,) -> next ids (N,), their log-probabilities (N,), hidden (N, D)"""
        ids, logprobs, hidden = self._greedy(tokens, cache)
        return ids, logprobs, hidden[: tokens.size(0)]

    def _greedy(self, tokens: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, logprobs, hidden = cache.step(self.steps.greedy_step, tokens)
        if self.screen is not None and tokens.size(0) >= self.screen.min_rows:  # settle the rows it left at -1
            ids, logprobs = self.screen.confirm(ids, logprobs, hidden, self.generator)
        return ids, logprobs, hidden

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
