"""A checkpoint is a directory: config.json, model.safetensors, tokenizer.json, metadata.json. No pickle.

An imported model (model/importers/) has spm_tokenizer.json (model/spm_tokenizer.py) or, if multilingual,
multilingual_tokenizer.json (model/multilingual_tokenizer.py) instead of tokenizer.json.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from model.confidence import CALIBRATION
from model.metadata import read_metadata, write_metadata
from model.multilingual_tokenizer import FILE as MULTILINGUAL_TOKENIZER
from model.spm_tokenizer import FILE as SPM_TOKENIZER
from model.token import TextTokenizer
from model.tokenizer import load_tokenizer
from model.transformer import Transformer, TransformerConfig

CONFIG, WEIGHTS, TOKENIZER = "config.json", "model.safetensors", "tokenizer.json"


class CheckpointError(ValueError):
    """A checkpoint directory is missing files or does not match its config."""


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """state_dict without aliases (shared embeddings appear once, under their first name)."""
    seen, out = set(), {}
    for name, t in model.state_dict().items():
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        out[name] = t
    return out


def save_checkpoint(
    path: str | Path, model: Transformer, tokenizer: TextTokenizer,
    metadata: dict[str, Any] | None = None,
):  # fmt: skip
    """Write the checkpoint into `path`; a calibration there (confidence.json, made for other weights) and a
    tokenizer file of another kind are removed, so that nothing of an earlier model is read with this one."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # what was made for other weights or is another kind of tokenizer would be read with these: gone first
    for stale in {TOKENIZER, SPM_TOKENIZER, MULTILINGUAL_TOKENIZER, CALIBRATION} - {tokenizer.file_name}:
        (path / stale).unlink(missing_ok=True)
    (path / CONFIG).write_text(json.dumps(model.config.to_dict(), indent=2) + "\n")
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in unique_state_dict(model).items()}
    save_file(tensors, str(path / WEIGHTS), metadata={"format": "pt"})
    (path / WEIGHTS).chmod(0o644)  # readable by a service running as another user (the image's UID 10001)
    tokenizer.save(path / tokenizer.file_name)
    write_metadata(path, metadata or {})


def with_source_frame(config: TransformerConfig, tokenizer: Any) -> TransformerConfig:
    """`config` with the special tokens the tokenizer puts around a source's text (source_lead, source_tail): </s>
    after it, and a many-to-many model's language code before it or after </s>."""
    lead, tail = getattr(tokenizer, "leading_specials", 0), getattr(tokenizer, "trailing_specials", 1)
    return dataclasses.replace(config, source_lead=lead, source_tail=tail)


def load_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[Transformer, TextTokenizer, dict[str, Any]]:
    """Build the model from config.json, check every tensor's name and shape, load, move, eval()."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {str(path)!r} does not exist")
    missing_files = [f for f in (CONFIG, WEIGHTS) if not (path / f).is_file()]
    if not any((path / f).is_file() for f in (TOKENIZER, SPM_TOKENIZER, MULTILINGUAL_TOKENIZER)):
        missing_files.append(f"{TOKENIZER} (or {SPM_TOKENIZER}, {MULTILINGUAL_TOKENIZER})")
    if missing_files:
        raise CheckpointError(f"checkpoint {str(path)!r} is missing {', '.join(missing_files)}")
    try:
        config = TransformerConfig.from_dict(json.loads((path / CONFIG).read_text()))
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"{path / CONFIG}: {e}") from e
    tokenizer = load_tokenizer(path)
    config = with_source_frame(config, tokenizer)
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != (config.src_vocab_size, config.tgt_vocab_size):
        raise CheckpointError(
            f"tokenizer has {tokenizer.src_vocab_size} source and {tokenizer.tgt_vocab_size} target tokens but config "
            f"says src_vocab_size={config.src_vocab_size}, tgt_vocab_size={config.tgt_vocab_size}"
        )
    model = Transformer(config)
    expected = unique_state_dict(model)
    with safe_open(str(path / WEIGHTS), framework="pt") as f:
        found = {k: f.get_slice(k).get_shape() for k in f.keys()}
        problems = []
        missing = sorted(set(expected) - set(found))
        unexpected = sorted(set(found) - set(expected))
        if missing:
            problems.append(f"missing tensors {missing}")
        if unexpected:
            problems.append(f"unexpected tensors {unexpected}")
        for k in sorted(set(expected) & set(found)):
            if list(found[k]) != list(expected[k].shape):
                problems.append(f"{k} has shape {list(found[k])}, config expects {list(expected[k].shape)}")
        if problems:
            raise CheckpointError(f"{path / WEIGHTS} does not match {CONFIG}: " + "; ".join(problems))
        with torch.no_grad():
            for k, t in expected.items():
                t.copy_(f.get_tensor(k))
    model.to(device=device, dtype=dtype).eval()
    return model, tokenizer, read_metadata(path)
