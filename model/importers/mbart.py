"""Load an mBART checkpoint (MBartForConditionalGeneration: mBART-50's many-to-many, one-to-many and many-to-one
models) in Hugging Face's layout into our Transformer, exactly or not at all.

mBART is M2M100's layout (model/importers/m2m100.py: the same layer names, pre-LN layers with a final LayerNorm after
the encoder and the decoder, one shared token table) with three differences, all data in TransformerConfig:
- learned position tables, one per side (positions="learned"): transformers' MBartLearnedPositionalEmbedding keeps
  two rows before position 0 (its offset of 2), which no token reads; the import drops them;
- a LayerNorm on the embeddings of each side (embed_norm: layernorm_embedding);
- final_logits_bias, added to the logits (logits_bias where it is not zero).
Positions count from the first token whatever the padding, as transformers counts them. The tokenizer is
MBart50Tokenizer's (model/multilingual_tokenizer.py): `code text </s>` on both sides, the decoder starting from </s>
and forced to the target's code, as generate(forced_bos_token_id=...) is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from model.importers import CannotImport, m2m100, marian
from model.importers.marian import FIXED, IGNORED, read_weights
from model.multilingual_tokenizer import spec_from
from model.transformer import Transformer, TransformerConfig

MODEL_TYPE = "mbart"  # config.json's model_type this loader reads
ARCHITECTURE = "MBartForConditionalGeneration"
OFFSET = 2  # MBartLearnedPositionalEmbedding: position p at row p + 2

# transformers' MBartConfig defaults: what an option left out of config.json means
DEFAULTS: dict[str, Any] = {
    **m2m100.DEFAULTS, "vocab_size": 50265, "activation_function": "gelu", "attention_dropout": 0.0,
    "decoder_start_token_id": None, "scale_embedding": False, "forced_eos_token_id": 2,
}  # fmt: skip
MAPPED = set(DEFAULTS)
# BART-era options that mBART's configs carry: transformers' MBart ignores them and always builds what they say here
# (pre-LN, final norms, an embedding norm, learned positions at offset 2); a config that says otherwise is refused
FIXED_MBART = {
    **m2m100.FIXED_M2M100,
    "normalize_before": (True, "pre-LN: LayerNorm before each sublayer"),
    "add_final_layer_norm": (True, "a LayerNorm after the last encoder and decoder layer"),
    "normalize_embedding": (True, "a LayerNorm on the embeddings (layernorm_embedding)"),
    "static_position_embeddings": (False, "learned positions"),
    "add_bias_logits": (False, "final_logits_bias, not a biased lm_head"),
    "extra_pos_embeddings": (OFFSET, "learned positions from row 2"),
    "do_blenderbot_90_layernorm": FIXED["do_blenderbot_90_layernorm"],
    "force_bos_token_to_be_generated": FIXED["force_bos_token_to_be_generated"],
}
IGNORED_MBART = IGNORED - {"extra_pos_embeddings"}
GENERATION = m2m100.GENERATION
# What mBART is, beyond config.json's numbers: learned positions and an embedding norm per side, pre-LN, final norms
LAYOUT = {"positions": "learned", "embed_norm": True, "norm_first": True}


def read_config(source: Path) -> dict[str, Any]:
    """config.json, with generation_config.json's decoding constraints (they win where both set one)."""
    return marian.read_config(source, MODEL_TYPE, ARCHITECTURE, GENERATION)


def model_config(config: dict[str, Any]) -> TransformerConfig:
    """The TransformerConfig of an mBART config.json; raises CannotImport naming any option it cannot map exactly."""
    c = {**DEFAULTS, **m2m100.checked(config, MAPPED, IGNORED_MBART, FIXED_MBART, ARCHITECTURE)}
    return m2m100.transformer_config(c, **LAYOUT)


def load_weights(model: Transformer, weights: dict[str, torch.Tensor]) -> None:
    """Copy every mBART tensor into the model (m2m100.load_weights, once the position tables lose the rows before
    position 0); refuse missing, unexpected, mis-shaped or untied ones by name."""
    weights = dict(weights)
    for side in m2m100.SIDES:
        name = f"model.{side}.embed_positions.weight"
        table = weights.get(name)
        if table is not None:
            rows = model.config.max_positions + OFFSET
            if table.shape != (rows, model.config.d_model):
                raise CannotImport(
                    f"{name}: the weights give shape {list(table.shape)}, the config needs {[rows, model.config.d_model]}"
                )
            weights[name] = table[OFFSET:]
    m2m100.load_weights(model, weights)


def load(source: Path) -> Transformer:
    """An mBART directory's config.json and weights as our Transformer (eval mode)."""
    weights = read_weights(source)
    model = Transformer(m2m100.with_bias(model_config(read_config(source)), weights))
    load_weights(model, weights)
    return model.eval()


def import_mbart(source: Path, out: Path, provenance: dict[str, Any]) -> Path:
    """Read an mBART-50 directory, check everything, write an nmt-serve checkpoint to `out`; returns `out`."""
    weights = read_weights(source)
    config = m2m100.with_bias(model_config(read_config(source)), weights)
    spec = spec_from(source, default_kind="mbart50")
    if spec["kind"] != "mbart50":
        raise CannotImport(f"an mBART model with {spec['kind']}'s tokenizer; only MBart50Tokenizer's is imported")
    return m2m100.save_import(source, out, provenance, MODEL_TYPE, config, weights, load_weights, spec)
