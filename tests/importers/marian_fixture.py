"""Small Marian (OPUS-MT layout) models built in the tests: SentencePiece models trained on a few thousand lines,
transformers' MarianConfig/MarianMTModel with seeded random weights, and MarianTokenizer's files beside them."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from tests.synthetic import synthetic_pairs

DATA = Path(os.environ.get("NMT_TEST_DATA", Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"))
LINES = 3000


def corpus(lang: str, n: int = LINES) -> list[str]:
    """Multi30k's first n training lines where the data is at hand, else synthetic sentences."""
    path = DATA / f"train.{lang}.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [next(f).rstrip("\n") for _ in range(n)]
    return [pair[0 if lang == "en" else 1] for pair in synthetic_pairs(n, seed=1)]


def held_out_sentences(lang: str) -> list[str]:
    """test2016 where the data is at hand, else held-out synthetic sentences."""
    path = DATA / f"test_2016_flickr.{lang}.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f]
    return [pair[0 if lang == "en" else 1] for pair in synthetic_pairs(300, seed=7)]


def train_spm(lines: list[str], prefix: Path, vocab_size: int) -> Path:
    import sentencepiece as spm

    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(prefix), vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, normalization_rule_name="nmt_nfkc", eos_id=0, unk_id=1, bos_id=-1, pad_id=-1,
        minloglevel=2, num_threads=1, hard_vocab_limit=False,  # synthetic sentences (no data at hand) hold fewer pieces
    )  # fmt: skip
    return prefix.with_suffix(".model")


def normal_pieces(model: Path) -> list[str]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]


def build_marian(
    out: Path, *, shared: bool = True, seed: int = 0, d_model: int = 64, layers: int = 2, heads: int = 4,
    ffn: int = 128, spm_vocab: int = 800, init_std: float = 0.2, max_positions: int = 512, vocab_size: int = 0,
    lines: int = LINES, eos_bias: float = 0.0,
) -> Path:  # fmt: skip
    """A Marian directory like an OPUS-MT download: config.json, model.safetensors, source.spm, target.spm,
    vocab.json (and target_vocab.json when not shared), tokenizer_config.json. vocab_size > 0 pads the (shared)
    vocabulary with pieces no text produces, up to an OPUS-MT model's size (58,101); eos_bias is added to </s>'s
    logit (a model that ends its sentences sooner)."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    out.mkdir(parents=True, exist_ok=True)
    work = out.parent / f"{out.name}-spm"
    work.mkdir(exist_ok=True)
    src_spm = train_spm(corpus("en", lines), work / "en", spm_vocab)
    tgt_spm = train_spm(corpus("de", lines), work / "de", spm_vocab)
    (out / "source.spm").write_bytes(src_spm.read_bytes())
    (out / "target.spm").write_bytes(tgt_spm.read_bytes())

    def vocab_of(*models: Path, size: int = vocab_size) -> dict[str, int]:
        vocab = {"</s>": 0, "<unk>": 1}
        for m in models:
            for piece in normal_pieces(m):
                vocab.setdefault(piece, len(vocab))
        while len(vocab) < size - 1:
            vocab[f"▁unused{len(vocab)}"] = len(vocab)
        vocab["<pad>"] = len(vocab)
        return vocab

    if shared:
        vocab = tgt_vocab = vocab_of(src_spm, tgt_spm)
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    else:
        tgt_vocab = vocab_of(tgt_spm)
        # <pad> (the decoder's start) is one id in both embeddings, so the source vocabulary is at least as long
        vocab = vocab_of(src_spm, size=max(vocab_size, len(tgt_vocab)))
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de", "separate_vocabs": not shared}), encoding="utf-8"
    )
    pad = tgt_vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(tgt_vocab), d_model=d_model, encoder_layers=layers,
        decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn, activation_function="swish", max_position_embeddings=max_positions,
        scale_embedding=True, pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0,
        share_encoder_decoder_embeddings=shared, init_std=init_std, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a learned bias on the logits, as trained models have; Marian's <pad> embedding is zero
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, 0] += eos_bias
        for embedding in {model.model.encoder.embed_tokens, model.model.decoder.embed_tokens}:
            embedding.weight[-1].zero_()
    model.generation_config.bad_words_ids = [[pad]]  # as OPUS-MT's configs have it: never generate <pad>
    model.save_pretrained(out, safe_serialization=True)
    return out
