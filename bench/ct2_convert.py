"""Convert an nmt-serve checkpoint into a CTranslate2 model directory, weight for weight.

    python bench/ct2_convert.py --model-dir checkpoints/multi30k-en-de --out /tmp/ct2 [--quantization int8]

The CTranslate2 model reads the same token strings as ours (`tokenizer.id_to_token`), starts the
decoder from `<s>`, stops at `</s>`, and gets our exact sinusoidal table (interleaved sin/cos; CT2's
own table is concatenated) so that its greedy output equals ours token for token.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ctranslate2
import numpy as np
import torch
from ctranslate2.specs import common_spec, transformer_spec
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.ct2_translator import BeamTranslator, GreedyTranslator  # noqa: F401 - importable from here too
from model.checkpoint import load_checkpoint
from model.layers import MultiHeadAttention
from model.tokenizer import BOS, EOS, UNK, Tokenizer
from model.transformer import Transformer

ACTIVATIONS = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}  # F.gelu is the erf form


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to("cpu", torch.float32).numpy().copy()


def _linear(spec, module: nn.Linear) -> None:
    spec.weight = _array(module.weight)  # (out, in), as CT2 stores it
    if module.bias is not None:
        spec.bias = _array(module.bias)


def _layer_norm(spec, module: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(module.weight), _array(module.bias)


def _attention(spec, module: MultiHeadAttention, norm: nn.LayerNorm) -> None:
    """Self-attention: linear[0] = fused QKV. Cross-attention: linear[0] = Q, linear[1] = fused KV."""
    if module.cross:
        _linear(spec.linear[0], module.q_proj)
        _linear(spec.linear[1], module.kv_proj)
    else:
        _linear(spec.linear[0], module.qkv_proj)
    _linear(spec.linear[-1], module.out_proj)
    _layer_norm(spec.layer_norm, norm)


def _ffn(spec, layer, norm: nn.LayerNorm) -> None:
    _linear(spec.linear_0, layer.ffn.w1)
    _linear(spec.linear_1, layer.ffn.w2)
    _layer_norm(spec.layer_norm, norm)


def _embeddings(spec, embed_spec, embed) -> None:
    """Token table (CT2 multiplies by sqrt(d_model) itself when scale_embeddings is set) and our positions."""
    embed_spec.weight = _array(embed.token.weight)
    spec.scale_embeddings = True
    spec.position_encodings.encodings = _array(embed.pe)  # (P, D), position 0 first


def model_spec(model: Transformer, tokenizer: Tokenizer) -> transformer_spec.TransformerSpec:
    """A TransformerSpec holding `model`'s weights and `tokenizer`'s vocabulary."""
    c = model.config
    spec = transformer_spec.TransformerSpec.from_config(
        (c.n_encoder_layers, c.n_decoder_layers), c.n_heads, pre_norm=c.norm_first, activation=ACTIVATIONS[c.activation]
    )
    enc, dec = spec.encoder, spec.decoder

    _embeddings(enc, enc.embeddings[0], model.src_embed)
    for layer_spec, layer in zip(enc.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, layer.sub_attn.norm)
        _ffn(layer_spec.ffn, layer, layer.sub_ffn.norm)

    _embeddings(dec, dec.embeddings, model.tgt_embed)
    for layer_spec, layer in zip(dec.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, layer.sub_self.norm)
        _attention(layer_spec.attention, layer.cross_attn, layer.sub_cross.norm)
        _ffn(layer_spec.ffn, layer, layer.sub_ffn.norm)

    if c.norm_first:  # post-LN has no final norm, and from_config(pre_norm=False) declares none
        _layer_norm(enc.layer_norm, model.encoder_norm)
        _layer_norm(dec.layer_norm, model.decoder_norm)
    if model.output_proj is None:  # tied to the target embedding, no bias
        dec.projection.weight = _array(model.tgt_embed.token.weight)
    else:
        _linear(dec.projection, model.output_proj)

    vocab = [tokenizer.id_to_token(i) for i in range(tokenizer.vocab_size)]
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = UNK, BOS, EOS
    spec.config.decoder_start_token = BOS
    spec.config.add_source_bos = spec.config.add_source_eos = False  # callers pass our `pieces </s>` as is
    spec.config.layer_norm_epsilon = model.decoder_layers[0].sub_ffn.norm.eps  # nn.LayerNorm: 1e-5; CT2: 1e-6
    return spec


class CheckpointConverter(ctranslate2.converters.Converter):
    """ctranslate2's converter interface over an in-memory model and tokenizer."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def _load(self):
        return model_spec(self.model, self.tokenizer)


def convert(model: Transformer, tokenizer: Tokenizer, output_dir: str | Path, quantization: str | None = None) -> str:
    """Write a CTranslate2 model directory; `quantization` is e.g. "int8" (default: the weights' float32)."""
    return CheckpointConverter(model, tokenizer).convert(str(output_dir), quantization=quantization, force=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--out", required=True, help="CTranslate2 model directory to write (replaced if it exists)")
    p.add_argument("--quantization", help='e.g. "int8"; default keeps float32')
    args = p.parse_args()
    model, tokenizer, _ = load_checkpoint(args.model_dir)
    print(convert(model, tokenizer, args.out, args.quantization))


if __name__ == "__main__":
    main()
