"""nmt-import: other toolkits' translation checkpoints as nmt-serve checkpoints (one loader per architecture).

    nmt-import marian Helsinki-NLP/opus-mt-en-de --out checkpoints/opus-mt-en-de   # from the Hugging Face Hub
    nmt-import marian /path/to/opus-mt-en-de --out checkpoints/opus-mt-en-de       # a directory in its layout
    nmt-import /path/to/nllb-200-distilled-600M --out checkpoints/nllb-200         # the kind from config.json
    nmt-import facebook/mbart-large-50-many-to-many-mmt --out checkpoints/mbart-50

KIND is config.json's model_type (marian, m2m_100, mbart); left out, it is read from SOURCE's config.json.

The import needs the `import` extra (sentencepiece, protobuf, huggingface-hub): bash scripts/install.sh import.
The checkpoint it writes needs only what the server needs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from model.metadata import read_metadata, write_metadata


class CannotImport(ValueError):
    """The source cannot be imported exactly; the message names the option, file or tensor."""


HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
MARIAN_FILES = [
    "config.json", "generation_config.json", "source.spm", "target.spm", "vocab.json", "target_vocab.json",
    "tokenizer_config.json", "added_tokens.json", "README.md",
]  # fmt: skip
M2M100_FILES = [
    "config.json", "generation_config.json", "sentencepiece.bpe.model", "vocab.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "README.md",
]  # fmt: skip
MBART_FILES = [
    "config.json", "generation_config.json", "sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "README.md",
]  # fmt: skip
# config.json's model_type -> the loader ("module:function", imported when used) and the files it reads
IMPORTERS = {
    "marian": ("model.importers.marian:import_marian", MARIAN_FILES),
    "m2m_100": ("model.importers.m2m100:import_m2m100", M2M100_FILES),
    "mbart": ("model.importers.mbart:import_mbart", MBART_FILES),
}


def model_type(config: Path) -> str:
    """config.json's model_type, refused by name unless an importer reads it."""
    try:
        kind = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise CannotImport(f"cannot read model_type from {config} ({e})") from e
    if kind not in IMPORTERS:
        raise CannotImport(f"{config}: model_type {kind!r} has no importer; known: {sorted(IMPORTERS)}")
    return kind


def download(name: str, revision: str | None, kind: str | None = None) -> tuple[Path, str | None]:
    """A model repository from the Hugging Face Hub (the files the importer of `kind`, else of its config.json's
    model_type, reads): its local snapshot and the commit it is at."""
    try:
        from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    except ImportError as e:
        raise CannotImport(f"downloading {name} needs huggingface-hub: bash scripts/install.sh import ({e})") from e
    try:
        files = set(HfApi().list_repo_files(name, revision=revision))
        weights = "model.safetensors" if "model.safetensors" in files else "pytorch_model.bin"
        kind = kind or model_type(Path(hf_hub_download(name, "config.json", revision=revision)))
        path = Path(snapshot_download(name, revision=revision, allow_patterns=[*IMPORTERS[kind][1], weights]))
    except CannotImport:
        raise
    except Exception as e:  # noqa: BLE001 - no network, no such repository, a gated one: one line that says what to do
        raise CannotImport(
            f"could not download {name} from the Hugging Face Hub ({type(e).__name__}: {str(e).splitlines()[0]}). "
            f"Where there is internet, download the directory (huggingface-cli download {name} --local-dir DIR) "
            "and pass DIR instead"
        ) from None
    return path, path.name if re.fullmatch(r"[0-9a-f]{40}", path.name) else None


def resolve(source: str, revision: str | None, kind: str | None = None) -> tuple[Path, dict[str, Any]]:
    """SOURCE as a local directory and the provenance to record."""
    path = Path(source)
    if path.is_dir():
        return path, {"name": path.resolve().name, "path": str(path.resolve())}
    if HUB_NAME.match(source) and not path.exists():
        local, commit = download(source, revision, kind)
        return local, {"name": source.split("/")[-1], "hub": source, "revision": commit or revision}
    raise CannotImport(
        f"{source} is neither a directory nor a Hugging Face Hub model name (like Helsinki-NLP/opus-mt-en-de)"
    )


# transformers' generate() defaults for the decoding settings a checkpoint may change (GenerationConfig's)
GENERATE_DEFAULTS = {
    "num_beams": 1, "length_penalty": 1.0, "num_return_sequences": 1, "max_length": 20, "max_new_tokens": None,
    "do_sample": False, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "typical_p": 1.0, "early_stopping": False,
    "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0, "repetition_penalty": 1.0, "min_length": 0,
    "min_new_tokens": None, "num_beam_groups": 1, "diversity_penalty": 0.0, "suppress_tokens": None,
    "begin_suppress_tokens": None, "exponential_decay_length_penalty": None, "renormalize_logits": False,
}  # fmt: skip
# those a request asks for by another name (the others nmt-serve does not apply)
PER_REQUEST = {
    "num_beams": "beam_size", "length_penalty": "length_penalty", "num_return_sequences": "num_hypotheses",
    "max_length": "max_new_tokens", "max_new_tokens": "max_new_tokens", "do_sample": "sampling_topk",
    "temperature": "sampling_temperature", "top_k": "sampling_topk", "early_stopping": "beam_size",
}  # fmt: skip


def generation_settings(source: Path) -> dict[str, Any]:
    """The decoding settings a checkpoint gives transformers' generate() other than its defaults:
    generation_config.json's, else config.json's (what generate() reads)."""
    path = source / "generation_config.json"
    path = path if path.is_file() else source / "config.json"
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in settings.items() if k in GENERATE_DEFAULTS and v != GENERATE_DEFAULTS[k]}


def generation_note(settings: dict[str, Any]) -> str | None:
    """What nmt-import says of a checkpoint's decoding settings: nmt-serve decodes as each request asks."""
    if not settings:
        return None
    asked = ", ".join(f"{k}={v!r}" for k, v in settings.items() if k in PER_REQUEST)
    ignored = ", ".join(f"{k}={v!r}" for k, v in settings.items() if k not in PER_REQUEST)
    return (
        "its generation_config sets decoding for transformers' generate(); nmt-serve decodes as each request asks "
        "(greedy by default)"
        + (f". Per request: {asked} (as beam_size, length_penalty, max_new_tokens, num_hypotheses, sampling_*)"
           if asked else "")
        + (f". Not applied by nmt-serve: {ignored} (its translations may differ from generate()'s there)"
           if ignored else "")
        + "; kept in metadata.json as generation_config"
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="nmt-import", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", nargs="?", metavar="KIND", help=f"one of {sorted(IMPORTERS)} (default: config.json's)")
    parser.add_argument("source", help="a local directory, or a Hub name such as Helsinki-NLP/opus-mt-en-de")
    parser.add_argument("--out", required=True, type=Path, help="the checkpoint directory to write")
    parser.add_argument("--revision", help="a Hub branch, tag or commit (default: main)")
    parser.add_argument("--force", action="store_true", help="overwrite --out if it holds files")
    args = parser.parse_args(argv)
    if args.kind is not None and args.kind not in IMPORTERS:
        parser.error(f"unknown kind {args.kind!r}; known: {sorted(IMPORTERS)}")
    if args.out.exists() and not args.out.is_dir():
        sys.exit(f"nmt-import: --out {args.out} is a file; name a directory to write the checkpoint into")
    if Path(args.source).exists() and args.out.resolve() == Path(args.source).resolve():
        sys.exit(f"nmt-import: --out {args.out} is the source; write the checkpoint into another directory")
    if args.out.exists() and any(args.out.iterdir()) and not args.force:
        sys.exit(f"nmt-import: {args.out} is not empty; pass --force to overwrite it")
    try:
        source, provenance = resolve(args.source, args.revision, args.kind)
        provenance["command"] = shlex.join(["nmt-import", *(sys.argv[1:] if argv is None else argv)])
        module, function = IMPORTERS[args.kind or model_type(source / "config.json")][0].split(":")
        out = getattr(importlib.import_module(module), function)(source, args.out, provenance)
    except CannotImport as e:
        sys.exit(f"nmt-import: {e}")
    print(f"imported {args.source} into {out}; serve it with: NMT_MODEL_DIR={out} nmt-serve")
    metadata = read_metadata(Path(out))
    licence = metadata.get("license")
    print(f"its licence, by its model card: {licence or 'not stated (check the source before you serve it)'}")
    if note := generation_note(settings := generation_settings(source)):
        print(note)
        write_metadata(Path(out), {**metadata, "generation_config": settings})


if __name__ == "__main__":
    main()
