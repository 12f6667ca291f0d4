"""Import a Marian (OPUS-MT) checkpoint in Hugging Face's layout as an nmt-serve checkpoint, exactly or not at all.

One loader for one architecture, as CTranslate2's converters are: every config option is either mapped to a
TransformerConfig field, checked to have the only value nmt-serve implements, or known not to matter for inference;
every weight is mapped by name and shape. Anything else stops the import with the option's or tensor's name.

The source directory holds config.json (and maybe generation_config.json), model.safetensors or pytorch_model.bin,
source.spm and target.spm (SentencePiece models), vocab.json (and target_vocab.json for separate vocabularies) and
tokenizer_config.json. sentencepiece (with protobuf) reads the .spm files at import time only: they are converted to
`tokenizers` models (model/spm_tokenizer.py), which is all the server needs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from model.checkpoint import save_checkpoint, unique_state_dict
from model.importers import CannotImport
from model.importers.spm import added_tokens, convert_spm, read_json, refuse_added
from model.layers import sinusoidal_table
from model.spm_tokenizer import SentencePieceTokenizer
from model.transformer import Transformer, TransformerConfig

# ---- config.json --------------------------------------------------------------------------------------------

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# Options whose value nmt-serve implements only one way: (allowed value, what it means). BART-era Marian configs
# carry them; transformers' Marian ignores several of them, and so may we only when they hold the value below.
FIXED = {
    "normalize_before": (False, "post-LN: LayerNorm after each residual"),
    "add_final_layer_norm": (False, "no LayerNorm after the last layer"),
    "normalize_embedding": (False, "no LayerNorm on the embeddings"),
    "static_position_embeddings": (True, "sinusoidal positions"),
    "add_bias_logits": (False, "final_logits_bias, not a biased lm_head"),
    "is_encoder_decoder": (True, "an encoder-decoder"),
    "is_decoder": (False, "the whole model, not a decoder alone"),
    "tie_encoder_decoder": (False, "separate encoder and decoder layers"),
    "add_cross_attention": (False, "the cross-attention of every encoder-decoder"),
    "chunk_size_feed_forward": (0, "one feed-forward pass per position"),
    "do_blenderbot_90_layernorm": (False, "BART's layer norm order"),
    "force_bos_token_to_be_generated": (False, "no forced first token"),
}
# Options that change nothing at inference: training, generation defaults nmt-serve does not use (it decodes
# greedily with its own budget), labels and bookkeeping.
IGNORED = {
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "id2label",
    "label2id", "_num_labels", "num_labels", "classif_dropout", "classifier_dropout", "init_std", "gradient_checkpointing",
    "encoder_layerdrop", "decoder_layerdrop", "use_cache", "num_hidden_layers", "max_length", "min_length", "num_beams",
    "num_beam_groups", "length_penalty", "early_stopping", "no_repeat_ngram_size", "do_sample", "temperature", "top_k",
    "top_p", "repetition_penalty", "diversity_penalty", "num_return_sequences", "output_attentions",
    "output_hidden_states", "output_scores", "return_dict", "return_dict_in_generate", "pruned_heads", "task_specific_params",
    "finetuning_task", "problem_type", "tokenizer_class", "prefix", "bos_token_id", "sep_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "typical_p", "encoder_no_repeat_ngram_size", "forced_bos_token_id", "tf_legacy_loss", "use_bfloat16",
    "torchscript", "cross_attention_hidden_size", "_attn_implementation_autoset", "renormalize_logits",
    "output_past", "xla_device",
    # learned-position offsets of BART-era configs: unused with static (sinusoidal) positions, which FIXED requires
    "extra_pos_embeddings",
}  # fmt: skip
MAPPED = {
    "vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
    "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "max_position_embeddings",
    "scale_embedding", "pad_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id", "bad_words_ids",
    "share_encoder_decoder_embeddings", "tie_word_embeddings", "dropout", "attention_dropout", "activation_dropout",
}  # fmt: skip
GENERATION = {"bad_words_ids", "forced_eos_token_id", "decoder_start_token_id", "eos_token_id", "pad_token_id"}


def read_config(
    source: Path, model_type: str = "marian", architecture: str = "MarianMTModel", generation: set[str] = GENERATION
) -> dict[str, Any]:
    """config.json of a `model_type` (`architecture`) checkpoint, with generation_config.json's decoding constraints
    among `generation` (they win where both set one)."""
    config = read_json(source / "config.json")
    if config.get("model_type") != model_type:
        raise CannotImport(
            f"{source / 'config.json'}: model_type is {config.get('model_type')!r}; this importer reads only "
            f"{model_type!r} ({architecture}) checkpoints"
        )
    architectures = config.get("architectures") or [architecture]
    if architectures != [architecture]:
        raise CannotImport(f"{source / 'config.json'}: architectures {architectures}; only {architecture} is imported")
    if (source / "generation_config.json").is_file():
        settings = read_json(source / "generation_config.json")
        config.update({k: v for k, v in settings.items() if k in generation and v is not None})
    return config


def model_config(config: dict[str, Any]) -> TransformerConfig:
    """The TransformerConfig of a Marian config.json; raises on any option it cannot map exactly."""
    unknown = sorted(set(config) - MAPPED - IGNORED - set(FIXED))
    if unknown:
        raise CannotImport(f"config.json has options this importer does not know: {unknown}; refusing to guess")
    for key, (allowed, meaning) in FIXED.items():
        if key in config and config[key] != allowed:
            raise CannotImport(
                f"config.json: {key}={config[key]!r} is not supported; nmt-serve implements {allowed!r} ({meaning})"
            )
    need(config, "encoder_attention_heads", config["decoder_attention_heads"], "the decoder's head count")
    need(config, "encoder_ffn_dim", config["decoder_ffn_dim"], "the decoder's feed-forward width")
    activation = config.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise CannotImport(
            f"config.json: activation_function={activation!r} is not supported; allowed: {sorted(ACTIVATIONS)}"
        )
    eos = config.get("eos_token_id", 0)
    if not isinstance(eos, int):
        raise CannotImport(f"config.json: eos_token_id={eos!r}; only a single end-of-sequence token is supported")
    forced = config.get("forced_eos_token_id")
    if forced not in (None, eos):
        raise CannotImport(
            f"config.json: forced_eos_token_id={forced!r} differs from eos_token_id={eos}; not supported"
        )
    suppress = []
    for words in config.get("bad_words_ids") or []:
        if len(words) != 1:
            raise CannotImport(
                f"config.json: bad_words_ids entry {words} has several tokens; only single tokens are supported"
            )
        suppress.append(words[0])
    shared = config.get("share_encoder_decoder_embeddings", True)
    vocab = config.get("vocab_size", 58101)
    pad = config.get("pad_token_id", 58100)
    return TransformerConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab if shared else (config.get("decoder_vocab_size") or vocab),
        d_model=config["d_model"],
        n_heads=config["decoder_attention_heads"],
        n_encoder_layers=config["encoder_layers"],
        n_decoder_layers=config["decoder_layers"],
        d_ff=config["decoder_ffn_dim"],
        dropout=config.get("dropout", 0.1),
        attention_dropout=config.get("attention_dropout", 0.0),
        activation_dropout=config.get("activation_dropout", 0.0),
        max_positions=config.get("max_position_embeddings", 1024),
        norm_first=False,
        activation=ACTIVATIONS[activation],
        share_embeddings=shared,
        tie_output=config.get("tie_word_embeddings", True),
        pad_id=pad,
        bos_id=config.get("decoder_start_token_id", pad),
        eos_id=eos,
        positions="halves",
        scale_embedding=config.get("scale_embedding", False),
        suppress_ids=sorted(set(suppress)),
        force_eos=forced is not None,
    )


def need(config: dict, key: str, value: Any, what: str) -> None:
    if config.get(key, value) != value:
        raise CannotImport(f"config.json: {key}={config[key]!r} differs from {what} ({value!r}); not supported")


# ---- weights ------------------------------------------------------------------------------------------------


def read_weights(source: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, else pytorch_model.bin (loaded with weights_only: no code runs)."""
    safetensors, pickle = source / "model.safetensors", source / "pytorch_model.bin"
    try:
        if safetensors.is_file():
            from safetensors.torch import load_file

            return load_file(str(safetensors))
        if pickle.is_file():
            return torch.load(str(pickle), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a truncated or corrupt file: say which, and why
        path = safetensors if safetensors.is_file() else pickle
        raise CannotImport(f"{path} could not be read ({type(e).__name__}: {e}); download it again") from e
    raise CannotImport(f"{source} has neither model.safetensors nor pytorch_model.bin")


def layer_map(c: TransformerConfig) -> dict[str, list[str]]:
    """Our parameter name -> the Marian tensors it is made of (concatenated along dim 0, in order)."""
    out: dict[str, list[str]] = {}

    def self_attention_and_ffn(ours: str, theirs: str, self_norm: str) -> None:
        """What encoder and decoder layers share: self-attention (Q, K, V fused in ours), the FFN, their norms."""
        for kind in ("weight", "bias"):
            out[f"{ours}.self_attn.qkv_proj.{kind}"] = [f"{theirs}.self_attn.{p}_proj.{kind}" for p in "qkv"]
            out[f"{ours}.self_attn.out_proj.{kind}"] = [f"{theirs}.self_attn.out_proj.{kind}"]
            out[f"{ours}.{self_norm}.norm.{kind}"] = [f"{theirs}.self_attn_layer_norm.{kind}"]
            out[f"{ours}.ffn.w1.{kind}"] = [f"{theirs}.fc1.{kind}"]
            out[f"{ours}.ffn.w2.{kind}"] = [f"{theirs}.fc2.{kind}"]
            out[f"{ours}.sub_ffn.norm.{kind}"] = [f"{theirs}.final_layer_norm.{kind}"]

    for i in range(c.n_encoder_layers):
        self_attention_and_ffn(f"encoder_layers.{i}", f"model.encoder.layers.{i}", "sub_attn")
    for i in range(c.n_decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        self_attention_and_ffn(ours, theirs, "sub_self")
        for kind in ("weight", "bias"):  # cross-attention: Q from the decoder, K and V (fused in ours) from memory
            out[f"{ours}.cross_attn.q_proj.{kind}"] = [f"{theirs}.encoder_attn.q_proj.{kind}"]
            out[f"{ours}.cross_attn.kv_proj.{kind}"] = [f"{theirs}.encoder_attn.{p}_proj.{kind}" for p in "kv"]
            out[f"{ours}.cross_attn.out_proj.{kind}"] = [f"{theirs}.encoder_attn.out_proj.{kind}"]
            out[f"{ours}.sub_cross.norm.{kind}"] = [f"{theirs}.encoder_attn_layer_norm.{kind}"]
    return out


def load_weights(model: Transformer, weights: dict[str, torch.Tensor]) -> None:
    """Copy every Marian tensor into the model; refuse missing, unexpected, mis-shaped or untied ones."""
    c = model.config
    weights = {
        k if k.startswith(("model.", "lm_head", "final_logits_bias")) else f"model.{k}": v for k, v in weights.items()
    }
    used: set[str] = set()

    def take(name: str) -> torch.Tensor:
        if name not in weights:
            raise CannotImport(f"the weights have no tensor {name!r}")
        used.add(name)
        return weights[name].float()

    def first(*names: str) -> torch.Tensor:
        for name in names:
            if name in weights:
                return take(name)
        raise CannotImport(f"the weights have none of {list(names)}")

    ours = unique_state_dict(model)  # shared embeddings once, under src_embed
    values: dict[str, torch.Tensor] = {}
    for name, parts in layer_map(c).items():
        values[name] = torch.cat([take(p) for p in parts]) if len(parts) > 1 else take(parts[0])
    source = first("model.shared.weight", "model.encoder.embed_tokens.weight")
    values["src_embed.token.weight"] = source
    if c.share_embeddings:
        target = source
    else:
        target = take("model.decoder.embed_tokens.weight")
        values["tgt_embed.token.weight"] = target
    for tied in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
        if tied in weights and tied not in used:  # a tied copy saved as well: it must be the same table
            why = "" if c.tie_output else (  # transformers 5 unties all four tables where transformers 4 untied one
                ": config.json's tie_word_embeddings is false, and transformers 5 then gives the encoder, the decoder "
                "and the output layer tables of their own, which nmt-serve does not import with a shared vocabulary"
            )  # fmt: skip
            same(take(tied), source if "encoder" in tied or c.share_embeddings else target, tied, why)
    if "lm_head.weight" in weights:
        head = take("lm_head.weight")
        if c.tie_output:
            same(head, target, "lm_head.weight (tied to the target embeddings by tie_word_embeddings)")
        else:
            values["output_proj.weight"] = head
    elif not c.tie_output:
        raise CannotImport("tie_word_embeddings is false but the weights have no lm_head.weight")
    if "final_logits_bias" in weights:
        bias = take("final_logits_bias").reshape(-1)
        if c.logits_bias:
            values["logits_bias"] = bias
        elif bias.any():
            raise CannotImport("final_logits_bias is not zero but the model was configured without it")
    for side in ("encoder", "decoder"):  # older checkpoints saved the sinusoidal tables: they must be Marian's
        name = f"model.{side}.embed_positions.weight"
        if name in weights:
            table = take(name)
            expected = sinusoidal_table(table.size(0), table.size(1), "halves")
            if table.shape != expected.shape or not torch.allclose(table, expected, atol=1e-5):
                raise CannotImport(f"{name} is not the sinusoidal table Marian computes; not supported")
    unexpected = sorted(set(weights) - used)
    if unexpected:
        raise CannotImport(f"the weights have tensors this importer does not know: {unexpected[:8]}")
    missing = sorted(set(ours) - set(values))
    if missing:
        raise CannotImport(f"no Marian tensor for {missing[:8]}")
    for name, value in values.items():
        if tuple(value.shape) != tuple(ours[name].shape):
            raise CannotImport(
                f"{name}: the weights give shape {list(value.shape)}, the config needs {list(ours[name].shape)}"
            )
    with torch.no_grad():
        for name, value in values.items():
            ours[name].copy_(value)


def same(a: torch.Tensor, b: torch.Tensor, what: str, why: str = "") -> None:
    if a.shape != b.shape or not torch.equal(a, b):
        raise CannotImport(f"{what} differs from the table it should be tied to{why or '; not supported'}")


# ---- tokenizer ----------------------------------------------------------------------------------------------


def tokenizer_spec(source: Path, config: TransformerConfig, settings: dict) -> dict:
    """The SentencePieceTokenizer spec of a Marian directory (settings: its tokenizer_config.json); the special ids
    must be the config's."""
    separate = bool(settings.get("separate_vocabs", False))
    vocabs = {"source": read_json(source / "vocab.json")}
    if separate:
        vocabs["target"] = read_json(source / "target_vocab.json")
    spec: dict[str, Any] = {"kind": "marian", "vocab": vocabs, "language_codes": not separate}
    spec["sizes"] = {"source": config.src_vocab_size, "target": config.tgt_vocab_size}
    controls = {}
    for side in ("source", "target"):
        tk, pieces, controls[side] = convert_spm(need_file(source, f"{side}.spm"))
        spec[side] = {
            "tokenizer": tk,
            "pieces": pieces,
            "control": controls[side],
            "vocab": side if separate else "source",
        }
    # transformers decodes a shared vocabulary's target ids with the source model (MarianTokenizer._decode's default)
    spec["decode"] = {"target": "target" if separate else "source", "source": "source"}
    target_vocab, source_vocab = vocabs["target" if separate else "source"], vocabs["source"]
    for token in ("</s>", "<unk>", "<pad>"):
        if token not in target_vocab or token not in source_vocab:
            raise CannotImport(f"the vocabulary has no {token}")
    spec["special"] = {
        "eos": target_vocab["</s>"], "unk": target_vocab["<unk>"], "pad": target_vocab["<pad>"],
        "decoder_start": config.bos_id,
    }  # fmt: skip
    for what, ours, theirs in (
        ("eos_token_id", config.eos_id, target_vocab["</s>"]),
        ("pad_token_id", config.pad_id, target_vocab["<pad>"]),
    ):
        if ours != theirs:
            raise CannotImport(f"config.json: {what}={ours} but the vocabulary puts it at {theirs}")
    # tokens a fine-tuning added (tokenizer.add_tokens): refused; the specials it lists where the vocabulary has them
    refuse_added({t: i for t, i in added_tokens(source, settings).items()
                  if i not in (source_vocab.get(t), target_vocab.get(t))}, "the tokenizer")  # fmt: skip
    for side, size in (("source", config.src_vocab_size), ("target", config.tgt_vocab_size)):
        largest = max(vocabs[side if separate else "source"].values())
        if largest >= size:
            raise CannotImport(f"the {side} vocabulary has id {largest}, but the model has {size} embeddings")
    return spec


# ---- the import ---------------------------------------------------------------------------------------------


def import_marian(source: Path, out: Path, provenance: dict[str, Any]) -> Path:
    """Read a Marian directory, check everything, write an nmt-serve checkpoint to `out`; returns `out`."""
    config_json = read_config(source)
    config = model_config(config_json)
    weights = read_weights(source)
    bias = weights.get("final_logits_bias", weights.get("model.final_logits_bias"))
    if bias is not None and bias.any():
        config.logits_bias = True
    settings = read_json(source / "tokenizer_config.json") if (source / "tokenizer_config.json").is_file() else {}
    spec = tokenizer_spec(source, config, settings)
    config.unk_id = spec["special"]["unk"]
    if spec["vocab"].get("target") is not None:
        pad = spec["vocab"]["source"]["<pad>"]
        config.src_pad_id = pad if pad != config.pad_id else None
    model = Transformer(config)
    load_weights(model, weights)
    tokenizer = SentencePieceTokenizer(spec)
    languages = languages_of(settings, provenance.get("name", source.name))
    metadata = {
        "name": provenance.get("name", source.name),
        "architecture": "marian",
        **languages,
        "imported_from": provenance,
        "license": model_card_license(source),
        "parameters": model.num_parameters(),
    }
    save_checkpoint(out, model.eval(), tokenizer, metadata)
    return out


def languages_of(settings: dict, name: str) -> dict[str, str]:
    """source_language/target_language from tokenizer_config.json, else from an opus-mt-SRC-TGT name."""
    out = {k: settings[k] for k in ("source_lang", "target_lang") if settings.get(k)}
    if len(out) < 2 and (m := re.search(r"opus-mt-(?:tc-[a-z]+-)?([\w+]+)-([\w+]+)$", name)):
        out = {"source_lang": m.group(1), "target_lang": m.group(2)}
    return {"source_language": out.get("source_lang", "unknown"), "target_language": out.get("target_lang", "unknown")}


def model_card_license(source: Path) -> str | None:
    """The `license:` of the model card's front matter (README.md), if it has one."""
    card = source / "README.md"
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    front = re.match(r"---\n(.*?)\n---", text, re.DOTALL)
    m = re.search(r"^license:\s*(\S+)", front.group(1), re.MULTILINE) if front else None
    return m.group(1).strip("'\"") if m else None


def need_file(source: Path, name: str) -> Path:
    if not (source / name).is_file():
        raise CannotImport(f"{source / name} is missing")
    return source / name
