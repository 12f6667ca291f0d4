"""What reading a Hub directory's tokenizer needs without the importers' weights: its JSON files, and a
SentencePiece model converted to `tokenizers` (the server needs no sentencepiece)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.importers import CannotImport
from model.spm_tokenizer import UNKNOWN


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise CannotImport(f"{path} is missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CannotImport(f"{path} is not valid JSON ({e})") from e


def refuse_added(added: dict[str, int], where: str) -> None:
    """CannotImport where a tokenizer has tokens added to its SentencePiece vocabulary (tokenizer.add_tokens, then
    a fine-tuning): transformers matches each whole before SentencePiece cuts the text, and nmt-serve's tokenizer,
    which reads the SentencePiece vocabulary, would cut them into pieces (and decode their ids to nothing)."""
    if added:
        shown = ", ".join(f"{token!r} at {i}" for token, i in list(added.items())[:5]) + (", ..." * (len(added) > 5))
        raise CannotImport(
            f"{where} adds {len(added)} token(s) to the SentencePiece vocabulary ({shown}): nmt-serve's tokenizer "
            "would cut them into pieces where transformers keeps each whole; importing a model with added tokens "
            "is not supported"
        )


def added_tokens(source: Path, settings: dict) -> dict[str, int]:
    """Every token a tokenizer directory adds, with its id: added_tokens.json's and tokenizer_config.json's
    added_tokens_decoder (where transformers saves them), special or not."""
    added = {}
    if (source / "added_tokens.json").is_file():
        added.update({str(t): int(i) for t, i in read_json(source / "added_tokens.json").items()})
    for i, token in (settings.get("added_tokens_decoder") or {}).items():
        added[str(token.get("content"))] = int(i)
    return added


def convert_spm(path: Path) -> tuple[dict, list[str], list[str]]:
    """A SentencePiece unigram model as `tokenizers` JSON, the piece of each of its ids, and its control pieces."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb
    except ImportError as e:
        raise CannotImport(
            f"reading {path.name} needs sentencepiece and protobuf: pip install -e '.[import]' ({e})"
        ) from e
    from tokenizers import Regex, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import Unigram

    proto = pb.ModelProto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception as e:  # noqa: BLE001 - not a SentencePiece model
        raise CannotImport(f"{path} is not a SentencePiece model ({e})") from e
    trainer, norm, piece_type = proto.trainer_spec, proto.normalizer_spec, pb.ModelProto.SentencePiece
    checks = {
        "model_type": (trainer.model_type, pb.TrainerSpec.UNIGRAM),
        "byte_fallback": (trainer.byte_fallback, False),
        "treat_whitespace_as_suffix": (trainer.treat_whitespace_as_suffix, False),
        "split_by_whitespace": (trainer.split_by_whitespace, True),
        "escape_whitespaces": (norm.escape_whitespaces, True),
        "denormalizer rules": (bool(proto.denormalizer_spec.precompiled_charsmap), False),
    }
    for what, (value, allowed) in checks.items():
        if value != allowed:
            raise CannotImport(f"{path.name}: {what}={value!r} is not supported (needs {allowed!r})")
    vocab, pieces, control = [], [], []
    unk = None
    for p in proto.pieces:
        if p.type == piece_type.UNKNOWN:
            unk = len(vocab)
            vocab.append((UNKNOWN, p.score))
            pieces.append(p.piece)
        elif p.type == piece_type.NORMAL:
            vocab.append((p.piece, p.score))
            pieces.append(p.piece)
        elif p.type in (piece_type.CONTROL, piece_type.UNUSED):
            control.append(p.piece)
        else:
            raise CannotImport(
                f"{path.name}: piece {p.piece!r} has type {p.type} (user-defined or byte); not supported"
            )
    if unk is None:
        raise CannotImport(f"{path.name} has no unknown piece")
    hf = HFTokenizer(Unigram(vocab, unk_id=unk, byte_fallback=False))
    steps = [normalizers.Precompiled(norm.precompiled_charsmap)] if norm.precompiled_charsmap else []
    if norm.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    hf.normalizer = normalizers.Sequence(steps)
    hf.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="always" if norm.add_dummy_prefix else "never", split=True
    )
    return json.loads(hf.to_str()), pieces, control
