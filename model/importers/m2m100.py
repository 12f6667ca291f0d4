"""Load an M2M100 checkpoint (M2M100ForConditionalGeneration, the architecture of M2M100 and NLLB-200) in Hugging
Face's layout into our Transformer, exactly or not at all.

One loader for one architecture, as CTranslate2's converters are: every config option is mapped to a
TransformerConfig field, checked to have the only value nmt-serve implements, or known not to matter for inference;
every weight is mapped by name and shape. Anything else stops the load with the option's or tensor's name.

What M2M100 differs in from nmt-train's model is data in TransformerConfig: fairseq's sinusoid table
(positions="fairseq"), token i at the table's row i + pad_id + 1 with padding at a zero row (position_offset,
pad_position_zero), pre-LN layers with a final LayerNorm after the encoder and the decoder (norm_first), and the
decoder starting from </s> (bos_id = decoder_start_token_id). The target language is the first target token, forced
by the caller (DecodingOptions.prefix), as transformers' generate(forced_bos_token_id=...) forces it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import save_checkpoint, unique_state_dict, with_source_frame
from model.importers import CannotImport, marian
from model.importers.marian import ACTIVATIONS, FIXED, IGNORED, layer_map, model_card_license, need, read_weights, same
from model.layers import sinusoidal_table
from model.multilingual_tokenizer import MultilingualTokenizer, spec_from
from model.transformer import Transformer, TransformerConfig

MODEL_TYPE = "m2m_100"  # config.json's model_type this loader reads
ARCHITECTURE = "M2M100ForConditionalGeneration"

# ---- config.json --------------------------------------------------------------------------------------------

# transformers' M2M100Config defaults: what an option left out of config.json means
DEFAULTS: dict[str, Any] = {
    "vocab_size": 128112, "max_position_embeddings": 1024, "encoder_layers": 12, "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16, "decoder_layers": 12, "decoder_ffn_dim": 4096, "decoder_attention_heads": 16,
    "activation_function": "relu", "d_model": 1024, "dropout": 0.1, "attention_dropout": 0.1,
    "activation_dropout": 0.0, "decoder_start_token_id": 2, "scale_embedding": True, "pad_token_id": 1,
    "eos_token_id": 2, "tie_word_embeddings": True, "forced_eos_token_id": None,
}  # fmt: skip
MAPPED = set(DEFAULTS)
# options whose value nmt-serve implements only one way: (allowed value, what it means), as for Marian
FIXED_M2M100 = {
    k: FIXED[k] for k in ("is_encoder_decoder", "is_decoder", "tie_encoder_decoder", "add_cross_attention",
                          "chunk_size_feed_forward")
}  # fmt: skip
# Marian's list of options that change nothing at inference, less its BART-era learned-position offsets; the target
# language (forced_bos_token_id) is the caller's first target token
IGNORED_M2M100 = IGNORED - {"extra_pos_embeddings"}
GENERATION = {"decoder_start_token_id", "eos_token_id", "pad_token_id", "forced_eos_token_id"}


def read_config(source: Path) -> dict[str, Any]:
    """config.json, with generation_config.json's decoding constraints (they win where both set one)."""
    return marian.read_config(source, MODEL_TYPE, ARCHITECTURE, GENERATION)


# What M2M100 is, beyond config.json's numbers: fairseq's sinusoids from the padding on, pre-LN with final norms
LAYOUT = {"positions": "fairseq", "pad_position_zero": True, "norm_first": True}


def model_config(config: dict[str, Any]) -> TransformerConfig:
    """The TransformerConfig of an M2M100 config.json; raises CannotImport naming any option it cannot map exactly."""
    c = {**DEFAULTS, **checked(config, MAPPED, IGNORED_M2M100, FIXED_M2M100, ARCHITECTURE)}
    # create_position_ids_from_input_ids: token i at the table's row i + padding_idx + 1
    return transformer_config(c, **LAYOUT, position_offset=c["pad_token_id"] + 1)


def checked(
    config: dict[str, Any], mapped: set[str], ignored: set[str], fixed: dict[str, tuple[Any, str]], architecture: str
) -> dict[str, Any]:
    """`config`, once every option is known (mapped, ignored, or holding the one value `fixed` allows)."""
    unknown = sorted(set(config) - mapped - ignored - set(fixed))
    if unknown:
        raise CannotImport(f"config.json has options this importer does not know: {unknown}; refusing to guess")
    architectures = config.get("architectures") or [architecture]
    if architectures != [architecture]:
        raise CannotImport(f"config.json: architectures {architectures}; only {architecture} is imported")
    for key in sorted(fixed.keys() & config.keys()):
        allowed, meaning = fixed[key]
        if config[key] != allowed:
            raise CannotImport(f"config.json: {key}={config[key]!r} is not supported; only {allowed!r} is ({meaning})")
    return config


def transformer_config(c: dict[str, Any], **layout: Any) -> TransformerConfig:
    """The TransformerConfig of a BART-family config `c` (defaults filled in) with the architecture's `layout`."""
    need(c, "encoder_attention_heads", c["decoder_attention_heads"], "the decoder's head count")
    need(c, "encoder_ffn_dim", c["decoder_ffn_dim"], "the decoder's feed-forward width")
    if c["activation_function"] not in ACTIVATIONS:
        raise CannotImport(
            f"config.json: activation_function={c['activation_function']!r} is not supported; "
            f"allowed: {sorted(ACTIVATIONS)}"
        )
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if not isinstance(c[key], int) or isinstance(c[key], bool):
            raise CannotImport(f"config.json: {key}={c[key]!r}; a single token id is supported")
    if c["forced_eos_token_id"] not in (None, c["eos_token_id"]):
        raise CannotImport(
            f"config.json: forced_eos_token_id={c['forced_eos_token_id']!r} differs from "
            f"eos_token_id={c['eos_token_id']}; not supported"
        )
    try:
        return TransformerConfig(
            src_vocab_size=c["vocab_size"],
            tgt_vocab_size=c["vocab_size"],
            d_model=c["d_model"],
            n_heads=c["decoder_attention_heads"],
            n_encoder_layers=c["encoder_layers"],
            n_decoder_layers=c["decoder_layers"],
            d_ff=c["decoder_ffn_dim"],
            dropout=c["dropout"],
            attention_dropout=c["attention_dropout"],
            activation_dropout=c["activation_dropout"],
            max_positions=c["max_position_embeddings"],
            activation=ACTIVATIONS[c["activation_function"]],
            # tied: M2M100Model.shared is the encoder's, the decoder's and the output table; untied, transformers 5
            # gives the encoder, the decoder and lm_head a table each
            share_embeddings=bool(c["tie_word_embeddings"]),
            tie_output=bool(c["tie_word_embeddings"]),
            pad_id=c["pad_token_id"],
            bos_id=c["decoder_start_token_id"],
            eos_id=c["eos_token_id"],
            scale_embedding=bool(c["scale_embedding"]),
            force_eos=c["forced_eos_token_id"] is not None,
            **layout,
        )
    except ValueError as e:  # d_model not divisible by the heads, and the like
        raise CannotImport(f"config.json: {e}") from e


# ---- weights ------------------------------------------------------------------------------------------------

SIDES = ("encoder", "decoder")
TABLES = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")  # copies of shared when tied
POSITION_TABLES = ("model.encoder.embed_positions.weights", "model.decoder.embed_positions.weights")
PLACEHOLDERS = ("model.encoder.embed_positions._float_tensor", "model.decoder.embed_positions._float_tensor")


def weight_map(c: TransformerConfig) -> dict[str, list[str]]:
    """Our parameter name -> the M2M100 tensors it is made of (concatenated along dim 0, in order)."""
    out = layer_map(c)  # the layers are named as Marian's
    for kind in ("weight", "bias"):
        out[f"encoder_norm.{kind}"] = [f"model.encoder.layer_norm.{kind}"]
        out[f"decoder_norm.{kind}"] = [f"model.decoder.layer_norm.{kind}"]
        if c.embed_norm:  # mBART's layernorm_embedding
            out[f"src_embed.norm.{kind}"] = [f"model.encoder.layernorm_embedding.{kind}"]
            out[f"tgt_embed.norm.{kind}"] = [f"model.decoder.layernorm_embedding.{kind}"]
    if c.positions == "learned":  # mBART's tables, less their first rows (the caller drops them)
        out["src_embed.pe"], out["tgt_embed.pe"] = [[f"model.{side}.embed_positions.weight"] for side in SIDES]
    if c.share_embeddings:
        out["src_embed.token.weight"] = ["model.shared.weight"]
    else:
        out["src_embed.token.weight"], out["tgt_embed.token.weight"] = [[name] for name in TABLES]
    if not c.tie_output:
        out["output_proj.weight"] = ["lm_head.weight"]
    return out


def load_weights(model: Transformer, weights: dict[str, torch.Tensor]) -> None:
    """Copy every M2M100 tensor into the model; refuse missing, unexpected, mis-shaped or untied ones by name."""
    c = model.config
    weights = dict(weights)
    if c.share_embeddings and "model.shared.weight" not in weights and TABLES[0] in weights:
        weights["model.shared.weight"] = weights.pop(TABLES[0])
    # tied copies of the shared table (checked equal below), and what carries no weights of the model
    known = [*PLACEHOLDERS, *(TABLES if c.share_embeddings else ["model.shared.weight"])]
    if c.positions != "learned":
        known += POSITION_TABLES
    extra = {name: weights.pop(name) for name in known if name in weights}
    if c.tie_output and "lm_head.weight" in weights:
        extra["lm_head.weight"] = weights.pop("lm_head.weight")
    bias = weights.pop("final_logits_bias", None)  # mBART's (a buffer of zeros unless trained)
    if bias is not None and not c.logits_bias and bias.any():
        raise CannotImport("final_logits_bias is not zero but the model was configured without it")
    mapping = weight_map(c)
    missing = sorted({p for parts in mapping.values() for p in parts} - set(weights))
    if missing:
        raise CannotImport(f"the weights have no tensor {missing[0]!r} ({len(missing)} missing: {missing[:8]})")
    unexpected = sorted(set(weights) - {p for parts in mapping.values() for p in parts})
    if unexpected:
        raise CannotImport(f"the weights have tensors this importer does not know: {unexpected[:8]}")
    ours = unique_state_dict(model)  # the shared table once, under src_embed
    unmapped = sorted(set(ours) - set(mapping) - {"logits_bias"})  # the bias: final_logits_bias, below
    if unmapped:
        raise CannotImport(f"no tensor of the weights for {unmapped[:8]}")
    values = {name: torch.cat([weights[p].float() for p in parts]) for name, parts in mapping.items()}
    if c.logits_bias:
        if bias is None:
            raise CannotImport("the weights have no tensor 'final_logits_bias'")
        values["logits_bias"] = bias.float().reshape(-1)
    for name, value in values.items():
        if value.shape != ours[name].shape:
            theirs = " + ".join(mapping[name])
            raise CannotImport(
                f"{theirs}: the weights give shape {list(value.shape)}, the config needs {list(ours[name].shape)}"
            )
    shared = values["src_embed.token.weight"]
    for name, tensor in extra.items():
        if name in POSITION_TABLES:
            rows = tensor.size(0) if tensor.dim() == 2 and tensor.size(0) > c.pad_id else 0
            expected = sinusoidal_table(rows, c.d_model, "fairseq")
            expected[c.pad_id : c.pad_id + 1] = 0  # transformers zeroes the padding row (none in an empty table)
            if tensor.shape != expected.shape or not torch.allclose(tensor.float(), expected, atol=1e-5):
                raise CannotImport(f"{name} is not the sinusoidal table M2M100 computes; not supported")
        elif name in PLACEHOLDERS:
            if tensor.numel() > 1:
                raise CannotImport(f"{name} holds {tensor.numel()} values; fairseq's placeholder holds at most one")
        elif name == "model.shared.weight":  # untied: transformers' forward never reads it
            pass
        else:
            same(tensor.float(), shared, f"{name} (tied to model.shared.weight)")
    with torch.no_grad():
        for name, value in values.items():
            ours[name].copy_(value)


def load(source: Path) -> Transformer:
    """An M2M100 directory's config.json and weights as our Transformer (eval mode)."""
    model = Transformer(model_config(read_config(source)))
    load_weights(model, read_weights(source))
    return model.eval()


def with_bias(config: TransformerConfig, weights: dict[str, torch.Tensor]) -> TransformerConfig:
    """`config` with the logits bias where the weights have a final_logits_bias that is not zero."""
    bias = weights.get("final_logits_bias")
    config.logits_bias = bias is not None and bool(bias.any())
    return config


# ---- the import ---------------------------------------------------------------------------------------------


# Embedding rows a model may have past its tokenizer's last id: NLLB-200's checkpoints have 256,206 where
# NllbTokenizer has 256,204 ids (fairseq padded its dictionary); more than this is another tokenizer's model
SPARE_ROWS = 64


def check_tokenizer(spec: dict, c: TransformerConfig) -> None:
    """Refuse, by name, a tokenizer spec whose vocabulary or special ids are not the model's (the model may have up
    to SPARE_ROWS rows more, ids no text becomes)."""
    size, special = spec["size"], spec["special"]
    if not 0 <= c.tgt_vocab_size - size <= SPARE_ROWS:
        raise CannotImport(
            f"the tokenizer has {size} tokens but config.json says vocab_size={c.tgt_vocab_size} "
            f"(a model may have up to {SPARE_ROWS} rows more than its tokenizer, never fewer)"
        )
    ids = {  # the tokenizer's id, config.json's key and id
        "<pad>": (special["pad"], "pad_token_id", c.pad_id),
        "</s>": (special["eos"], "eos_token_id", c.eos_id),
        "the decoder's start": (special["decoder_start"], "decoder_start_token_id", c.bos_id),
        "<unk>": (special["unk"], "unk_token_id (fairseq's 3)", c.unk_id),
    }
    for token, (ours, key, theirs) in ids.items():
        if ours != theirs:
            raise CannotImport(f"the tokenizer's {token} is id {ours} but config.json's {key} is {theirs}")


def import_m2m100(source: Path, out: Path, provenance: dict[str, Any]) -> Path:
    """Read an M2M100 or NLLB directory, check everything, write an nmt-serve checkpoint to `out`; returns `out`."""
    weights = read_weights(source)
    config = with_bias(model_config(read_config(source)), weights)
    return save_import(source, out, provenance, MODEL_TYPE, config, weights, load_weights, spec_from(source))


def save_import(
    source: Path, out: Path, provenance: dict[str, Any], kind: str, config: TransformerConfig,
    weights: dict[str, torch.Tensor], loader: Callable[[Transformer, dict[str, torch.Tensor]], None], spec: dict,
) -> Path:  # fmt: skip
    """Check the tokenizer of `spec` against `config`, load the weights with `loader`, write the checkpoint. The
    tokenizer spans the model's rows: those past its last id decode to nothing, as M2M100's made-up words do."""
    check_tokenizer(spec, config)
    tokenizer = MultilingualTokenizer({**spec, "size": config.tgt_vocab_size})  # built once: 256k pieces for NLLB
    model = Transformer(with_source_frame(config, tokenizer))
    loader(model, weights)
    model.eval()
    metadata = {
        "name": provenance.get("name", source.name),
        "architecture": kind,
        "languages": sorted(tokenizer.languages),
        "default_languages": tokenizer.default_languages,  # the saved src_lang and tgt_lang (or the family's)
        "imported_from": provenance,
        "license": model_card_license(source),
        "parameters": model.num_parameters(),
    }
    save_checkpoint(out, model, tokenizer, metadata)
    return out
