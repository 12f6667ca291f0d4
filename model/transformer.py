"""The encoder-decoder Transformer of "Attention Is All You Need", written from primitives: its config, the masks,
and the model with its step functions. Its layers are model/layers.py's."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
from torch import nn

from model.layers import ACTIVATIONS, LAYOUTS, DecoderLayer, Embeddings, EncoderLayer
from model.packed import Linear, PackedWeight
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
    # Special tokens around a source's text, which alignments look past (attention rests on them when nothing else
    # fits): </s> after it; a many-to-many model's language code before it (M2M100, NLLB, mBART-50) or after </s>
    # (NLLB's legacy layout). Set from the tokenizer where a checkpoint is loaded (model/checkpoint.py).
    source_lead: int = 0
    source_tail: int = 1

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {self.activation!r}")
        if self.positions not in LAYOUTS:
            raise ValueError(f"positions must be one of {LAYOUTS}, not {self.positions!r}")
        if self.position_offset < 0:
            raise ValueError(f"position_offset must be >= 0, not {self.position_offset}")
        if self.source_lead < 0 or self.source_tail < 0:
            raise ValueError(f"source_lead and source_tail must be >= 0, not {self.source_lead}, {self.source_tail}")
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


def attention_facts(weights: torch.Tensor, keep: torch.Tensor, lead: int = 0, tail: int = 1) -> torch.Tensor:
    """What one step's cross-attention (the alignment layer's, averaged over heads) says of each row.

    weights (N, S) over the source window, keep (N, S) True = a real source token, padding at the end only ->
    (N, 2) float32: the Wasserstein-1 distance of the weights from the uniform distribution over the row's tokens,
    in source lengths (0 = spread evenly, near 1 = all on one end: attention that rests on one token, as it does
    where the model no longer translates the source; Guerreiro et al., ACL 2023), and the position the weights
    put most on among the source's text, the `lead` special tokens before it and the `tail` after it left out
    (attention rests on </s> or a language code when nothing else fits; all of them where the text is empty): the
    source token the step's new target token aligns to, as model/search.py's `alignment` finds it by a second pass.
    """
    weights, real = weights.float(), keep.float()
    length = real.sum(-1).clamp(min=1)  # (N,)
    uniform = real.cumsum(-1) / length[:, None]
    distance = (weights.cumsum(-1) - uniform).abs().sum(-1) / length  # (N,)
    at = torch.arange(keep.size(-1), device=keep.device)
    last = (at * keep).amax(-1)  # (N,) the closing token's position
    text = keep & (at[None, :] >= lead) & (at[None, :] <= last[:, None] - tail)
    eligible = text | (keep & ~text.any(-1, keepdim=True))
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
        self.output_proj = None if c.tie_output else Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.logits_bias:
            self.register_buffer("logits_bias", torch.zeros(c.tgt_vocab_size))  # (V,), loaded with the weights
        if c.suppress_ids:
            mask = torch.zeros(c.tgt_vocab_size)
            mask[c.suppress_ids] = float("-inf")
            self.register_buffer("logits_mask", mask, persistent=False)  # (V,): -inf where never generated
        self.packed_generator = PackedWeight()  # the tied output projection's oneDNN copy (model/packed.py)
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
            logits = self.packed_generator.linear(hidden, self.tgt_embed.token.weight)
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
                c = self.config
                facts = attention_facts(weights[:, :, 0].mean(1), src_keep, c.source_lead, c.source_tail)
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
