"""Small M2M100 and NLLB tokenizers built in the tests: one SentencePiece BPE model trained on a few thousand Multi30k
lines of en, de and fr, and transformers' M2M100Tokenizer and NllbTokenizer over it, saved as a Hub download is laid
out (sentencepiece.bpe.model beside what save_pretrained writes)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from tests.importers.marian_fixture import corpus

LINES = 1500  # per language
AWKWARD = [
    "", " ", "   ", "  leading and trailing  ", "in  the   middle", "\ttab\tand\nnewline\n", "emoji 😀 👍🏽 ☃☃ x",
    "😀", "中文 日本語", "é vs e\u0301, Straße, ÄÖÜ", "ﬁ ligature, ① ２ ｆｕｌｌ", "no\u00a0break", "zero\u200bwidth",
    "\u3000ideographic\u3000space", "Supercalifragilisticexpialidocious" * 4, "x", "a.b,c;d!e?f", "123 4567 89",
    "__de__ </s> eng_Latn <s> <unk> <pad> <mask> fra_Latn __en__", "deu_Latn", "__fr__",
]  # fmt: skip


def train_bpe(out: Path, vocab_size: int = 800, kind: str = "bpe", lines_per_language: int = LINES) -> Path:
    """A SentencePiece BPE (or `kind`) model with fairseq's piece layout (<unk>, <s>, </s> first), as M2M100's and
    NLLB's are (mBART-50's: unigram)."""
    import sentencepiece as spm

    lines = [line for lang in ("en", "de", "fr") for line in corpus(lang, lines_per_language)]
    prefix = out / f"spm-{kind}"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(prefix), vocab_size=vocab_size, model_type=kind,
        character_coverage=0.9995, normalization_rule_name="nmt_nfkc", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2, num_threads=1, hard_vocab_limit=False,
    )  # fmt: skip
    return prefix.with_suffix(".model")


def build_mbart50(out: Path, model: Path, src_lang: str = "de_DE", tgt_lang: str = "fr_XX"):
    """transformers' MBart50Tokenizer over the unigram `model` (as it converts a Hub download's SentencePiece model:
    the pieces with their scores), saved to `out` with the SentencePiece model; returns the tokenizer."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import MBart50Tokenizer

    proto = pb.ModelProto()
    proto.ParseFromString(model.read_bytes())
    tokenizer = MBart50Tokenizer(
        vocab=[(p.piece, p.score) for p in proto.pieces], src_lang=src_lang, tgt_lang=tgt_lang,
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
    )  # fmt: skip
    tokenizer.save_pretrained(str(out))
    shutil.copy(model, out / "sentencepiece.bpe.model")
    return tokenizer


def build_nllb(out: Path, model: Path, legacy: bool, src_lang: str = "deu_Latn", tgt_lang: str = "fra_Latn"):
    """transformers' NllbTokenizer over `model`, as its tokenizer.json on the Hub holds it (the fairseq vocabulary
    and the merges in SpmConverter's order), saved to `out` with the SentencePiece model; returns the tokenizer."""
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import NllbTokenizer
    from transformers.tokenization_utils_base import generate_merges

    proto = pb.ModelProto()
    proto.ParseFromString(model.read_bytes())
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for p in proto.pieces[3:]:
        vocab[p.piece] = len(vocab)
    scores = {p.piece: p.score for p in proto.pieces[3:]}
    tokenizer = NllbTokenizer(
        vocab=vocab, merges=generate_merges(vocab, scores), legacy_behaviour=legacy, src_lang=src_lang,
        tgt_lang=tgt_lang, _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
    )  # fmt: skip
    tokenizer.save_pretrained(str(out))
    shutil.copy(model, out / "sentencepiece.bpe.model")
    return tokenizer


def build_m2m100(out: Path, model: Path, src_lang: str = "de", tgt_lang: str = "fr", seed: int = 0):
    """transformers' M2M100Tokenizer over `model` with a fairseq dictionary as vocab.json: the pieces in another
    order than the SentencePiece model's, a few missing (<unk>), and a character the model does not know; saved to
    `out`; returns the tokenizer."""
    import sentencepiece as spm
    from transformers import M2M100Tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    random.Random(seed).shuffle(pieces)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for p in [*pieces[:-25], "☃", "😀"]:  # fairseq's dictionary counts what the model emits, unknown runs included
        vocab[p] = len(vocab)
    source = out / "source"
    source.mkdir(parents=True, exist_ok=True)
    (source / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = M2M100Tokenizer(str(source / "vocab.json"), str(model), src_lang=src_lang, tgt_lang=tgt_lang)
    tokenizer.save_pretrained(str(out))
    return tokenizer


# ---- tiny models with those tokenizers, as a Hub repository holds them, and their imports ------------------------

LAYOUTS = {  # name: (source language, target language) their tokenizers are saved with
    "nllb": ("deu_Latn", "fra_Latn"),
    "m2m100": ("de", "fr"),
    "mbart50": ("de_DE", "fr_XX"),
}
ARCHITECTURES = {"nllb": "m2m_100", "m2m100": "m2m_100", "mbart50": "mbart"}  # config.json's model_type
CARD = "---\nlicense: cc-by-nc-4.0\n---\n# a tiny test model\n"
SHORT = {"deu": "de", "eng": "en", "fra": "fr"}  # NLLB's codes of Multi30k's languages


def code_token(layout: str, code: str) -> str:
    """The token of a language code, as the layout's tokenizer spells it (`__de__`, `deu_Latn`, `de_DE`)."""
    return f"__{code}__" if layout == "m2m100" else code


def short(code: str) -> str:
    """A Multi30k language of a model's code: `de` of `de`, `deu_Latn`, `de_DE`."""
    return SHORT.get(code[:3], code[:2])


def build_model(out: Path, vocab_size: int, architecture: str = "m2m_100") -> None:
    """config.json, generation_config.json and model.safetensors of a tiny M2M100ForConditionalGeneration, or
    MBartForConditionalGeneration as mBART-50's is configured (its outputs run to the budget: test_m2m100_and_mbart.py
    compares where they end)."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, MBartConfig, MBartForConditionalGeneration

    torch.manual_seed(0)
    settings = {
        "vocab_size": vocab_size, "d_model": 32, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64,
        "max_position_embeddings": 128, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 2, "init_std": 0.2,
    }  # fmt: skip
    if architecture == "mbart":
        config = MBartConfig(**settings, scale_embedding=True, activation_function="relu", forced_eos_token_id=2)
        MBartForConditionalGeneration(config).save_pretrained(out)
    else:
        M2M100ForConditionalGeneration(M2M100Config(**settings)).save_pretrained(out)


def model_directories(root: Path, layouts: tuple[str, ...] = tuple(LAYOUTS)) -> dict[str, Path]:
    """Each layout's directory under `root`: the tokenizer files, a model whose vocabulary and special ids are the
    tokenizer's, and a model card."""
    from model.multilingual_tokenizer import MultilingualTokenizer, spec_from

    out, spm = {}, {}

    def trained(kind: str) -> Path:
        if kind not in spm:
            spm[kind] = train_bpe(root, kind=kind)
        return spm[kind]

    for name in layouts:
        src, tgt = LAYOUTS[name]
        path = root / name
        path.mkdir()
        if name == "nllb":
            build_nllb(path, trained("bpe"), legacy=False, src_lang=src, tgt_lang=tgt)
        elif name == "mbart50":
            build_mbart50(path, trained("unigram"), src_lang=src, tgt_lang=tgt)
        else:
            build_m2m100(path, trained("bpe"), src_lang=src, tgt_lang=tgt)
        # NLLB-200's checkpoints have two embedding rows more than NllbTokenizer has ids
        spare = 2 if name == "nllb" else 0
        build_model(path, MultilingualTokenizer(spec_from(path)).vocab_size + spare, ARCHITECTURES[name])
        (path / "README.md").write_text(CARD)
        out[name] = path
    return out


def import_all(sources: dict[str, Path], root: Path) -> dict[str, Path]:
    """Each directory imported through the command line, without naming the kind."""
    from model.importers import main

    for name, path in sources.items():
        main([str(path), "--out", str(root / name)])
    return {name: root / name for name in sources}
