"""`nmt-import DIR --out OUT` on an M2M100 or NLLB directory (a tiny M2M100ForConditionalGeneration beside the
tokenizer files of tests/importers/multilingual_fixture.py, as a Hub repository holds them): load_checkpoint(OUT) gives
transformers' generate tokens and text with the target language forced."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model.batch import decode
from model.checkpoint import load_checkpoint
from model.importers import main
from model.multilingual_tokenizer import MultilingualTokenizer, spec_from
from model.search import DecodingOptions
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import build_m2m100, build_nllb, train_bpe

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
LAYOUTS = {  # name: (source language, target language)
    "nllb": ("deu_Latn", "fra_Latn"),
    "m2m100": ("de", "fr"),
}
BUDGET = 16
CARD = "---\nlicense: cc-by-nc-4.0\n---\n# a tiny test model\n"


def build_model(out: Path, vocab_size: int) -> None:
    """config.json, generation_config.json and model.safetensors of a tiny M2M100ForConditionalGeneration (its
    outputs run to the budget: test_m2m100.py compares where they end)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(0)
    config = M2M100Config(
        vocab_size=vocab_size, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, init_std=0.2,
    )  # fmt: skip
    M2M100ForConditionalGeneration(config).save_pretrained(out)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """Each layout's directory: the tokenizer files, a model whose vocabulary and special ids are the tokenizer's,
    and a model card."""
    root = tmp_path_factory.mktemp("m2m100-import")
    spm = train_bpe(root)
    out = {}
    for name, (src, tgt) in LAYOUTS.items():
        path = root / name
        path.mkdir()
        if name == "nllb":
            build_nllb(path, spm, legacy=False, src_lang=src, tgt_lang=tgt)
        else:
            build_m2m100(path, spm, src_lang=src, tgt_lang=tgt)
        build_model(path, MultilingualTokenizer(spec_from(path)).vocab_size)
        (path / "README.md").write_text(CARD)
        out[name] = path
    return out


@pytest.fixture(scope="module")
def imported(sources, tmp_path_factory) -> dict[str, Path]:
    """Each layout imported through the command line, without naming the kind."""
    root = tmp_path_factory.mktemp("imported")
    for name, path in sources.items():
        main([str(path), "--out", str(root / name)])
    return {name: root / name for name in sources}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@torch.inference_mode()
def test_the_imported_checkpoint_gives_generates_tokens_and_text(sources, imported, layout):
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    src, tgt = LAYOUTS[layout]
    model, tokenizer, _ = load_checkpoint(imported[layout])
    assert type(tokenizer) is MultilingualTokenizer
    hf = M2M100ForConditionalGeneration.from_pretrained(sources[layout]).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(str(sources[layout]), src_lang=src, tgt_lang=tgt)
    sentences = held_out_sentences("de")[:20]
    ids = [tokenizer.encode(t, language=src) for t in sentences]
    codes = set(tokenizer.languages.values())
    language = tokenizer.language_id(tgt)
    assert language == hf_tokenizer.convert_tokens_to_ids(f"__{tgt}__" if layout == "m2m100" else tgt)
    got = decode(model, ids, [BUDGET] * len(ids), DecodingOptions(prefix=(language,)))
    texts = []
    for text, source, hyps in zip(sentences, ids, got):
        inputs = hf_tokenizer(text, return_tensors="pt")
        assert inputs.input_ids[0].tolist() == source, text
        out = hf.generate(
            **inputs, forced_bos_token_id=language, max_new_tokens=BUDGET, num_beams=1, do_sample=False
        )[0].tolist()  # fmt: skip
        finished = out[-1] == tokenizer.eos_id and len(out) > 2
        assert hyps[0].tokens == out[1 : len(out) - finished], text
        # M2M100Tokenizer writes language codes out as text, and transformers 5 leaves the spaces of dropped tokens
        # (<unk>) at the start (model/multilingual_tokenizer.py)
        kept = [t for t in out if t not in codes]
        texts.append(tokenizer.decode(hyps[0].tokens))
        assert texts[-1] == hf_tokenizer.batch_decode([kept], skip_special_tokens=True)[0].strip(), text
    assert sum(len(t) > 8 for t in texts) > len(sentences) // 2  # the text compared is more than a code or two


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_metadata_names_the_architecture_languages_and_licence(sources, imported, layout):
    src, tgt = LAYOUTS[layout]
    meta = json.loads((imported[layout] / "metadata.json").read_text())
    assert meta["architecture"] == "m2m_100"
    assert {src, tgt, "eng_Latn" if layout == "nllb" else "en"} <= set(meta["languages"])
    assert meta["default_languages"] == {"source": src, "target": tgt}
    assert meta["license"] == "cc-by-nc-4.0"
    assert meta["imported_from"]["command"] == f"nmt-import {sources[layout]} --out {imported[layout]}"
    assert meta["parameters"] > 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "t5"}, r"model_type 't5' has no importer; known: \['m2m_100', 'marian'\]"),
        ({"vocab_size": 2000}, "the tokenizer has .* tokens but config.json says vocab_size=2000"),
        ({"pad_token_id": 0}, "the tokenizer's <pad> is id 1 but config.json's pad_token_id is 0"),
        ({"eos_token_id": 3}, "the tokenizer's </s> is id 2 but config.json's eos_token_id is 3"),
        ({"decoder_start_token_id": 0}, "the decoder's start is id 2 but config.json's decoder_start_token_id is 0"),
    ],
)
def test_an_unknown_model_type_and_a_tokenizer_that_is_not_the_models_are_refused(sources, tmp_path, change, message):
    source = tmp_path / "source"
    shutil.copytree(sources["nllb"], source)
    (source / "generation_config.json").unlink()  # its ids would win over config.json's
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(SystemExit, match=message):
        main([str(source), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_an_unknown_kind_is_refused(sources, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["t5", str(sources["nllb"]), "--out", str(tmp_path / "out")])
    assert "unknown kind 't5'; known: ['m2m_100', 'marian']" in capsys.readouterr().err


def test_the_server_refuses_to_load_it_until_it_serves_a_language_per_request(imported):
    from app.engine import Engine
    from app.settings import Settings

    with pytest.raises(ValueError, match="many-to-many model .m2m_100, .* languages.: nmt-import reads it"):
        Engine.from_settings(Settings(model_dir=imported["nllb"], compile=False))
