"""`nmt-import DIR --out OUT` on an M2M100, NLLB or mBART-50 directory (a tiny M2M100ForConditionalGeneration or
MBartForConditionalGeneration beside the tokenizer files of tests/importers/multilingual_fixture.py, as a Hub repository holds them): load_checkpoint(OUT) gives
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
from model.multilingual_tokenizer import MultilingualTokenizer
from model.search import DecodingOptions
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import ARCHITECTURES, LAYOUTS, code_token, import_all, model_directories

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
BUDGET = 16


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    return model_directories(tmp_path_factory.mktemp("m2m100-import"))


@pytest.fixture(scope="module")
def imported(sources, tmp_path_factory) -> dict[str, Path]:
    return import_all(sources, tmp_path_factory.mktemp("imported"))


@pytest.mark.parametrize("layout", list(LAYOUTS))
@torch.inference_mode()
def test_the_imported_checkpoint_gives_generates_tokens_and_text(sources, imported, layout):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    src, tgt = LAYOUTS[layout]
    model, tokenizer, _ = load_checkpoint(imported[layout])
    assert type(tokenizer) is MultilingualTokenizer
    hf = AutoModelForSeq2SeqLM.from_pretrained(sources[layout]).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(str(sources[layout]), src_lang=src, tgt_lang=tgt)
    sentences = held_out_sentences("de")[:20]
    ids = [tokenizer.encode(t, language=src) for t in sentences]
    codes = set(tokenizer.languages.values())
    language = tokenizer.language_id(tgt)
    assert language == hf_tokenizer.convert_tokens_to_ids(code_token(layout, tgt))
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
    assert meta["architecture"] == ARCHITECTURES[layout]
    assert {src, tgt, {"nllb": "eng_Latn", "m2m100": "en", "mbart50": "en_XX"}[layout]} <= set(meta["languages"])
    assert meta["default_languages"] == {"source": src, "target": tgt}
    assert meta["license"] == "cc-by-nc-4.0"
    assert meta["imported_from"]["command"] == f"nmt-import {sources[layout]} --out {imported[layout]}"
    assert meta["parameters"] > 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "t5"}, r"model_type 't5' has no importer; known: \['m2m_100', 'marian', 'mbart'\]"),
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


@pytest.mark.parametrize("layout", ["nllb", "mbart50"])
def test_tokens_added_by_a_fine_tuning_are_refused_by_name(sources, tmp_path, layout):
    """tokenizer.add_tokens then resize_token_embeddings, as a fine-tuning with new words does: transformers matches
    the added token whole; nmt-serve's tokenizer cut it into pieces and decoded its id to nothing, silently."""
    source = shutil.copytree(sources[layout], tmp_path / "source")  # its SentencePiece model stays beside
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(sources[layout]))
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(sources[layout])
    tokenizer.add_tokens(["XYZcorp"])
    model.resize_token_embeddings(len(tokenizer))
    tokenizer.save_pretrained(source)
    model.save_pretrained(source)
    said = f"adds 1 token\\(s\\) to the SentencePiece vocabulary \\('XYZcorp' at {len(tokenizer) - 1}\\)"
    with pytest.raises(SystemExit, match=said):
        main([str(source), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_an_unknown_kind_is_refused(sources, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["t5", str(sources["nllb"]), "--out", str(tmp_path / "out")])
    assert "unknown kind 't5'; known: ['m2m_100', 'marian', 'mbart']" in capsys.readouterr().err


def test_the_licence_is_printed_at_import(sources, tmp_path, capsys):
    main([str(sources["nllb"]), "--out", str(tmp_path / "out")])
    assert "its licence, by its model card: cc-by-nc-4.0" in capsys.readouterr().out


def test_nllbs_spare_embedding_rows_are_imported_and_fewer_rows_than_ids_are_refused(sources, imported, tmp_path):
    """NLLB-200's checkpoints have two rows more than NllbTokenizer has ids: they decode to nothing. A model with
    fewer rows than its tokenizer has ids cannot be the tokenizer's."""
    from model.multilingual_tokenizer import spec_from

    model, tokenizer, _ = load_checkpoint(imported["nllb"])
    ids = MultilingualTokenizer(spec_from(sources["nllb"])).vocab_size
    assert model.config.tgt_vocab_size == tokenizer.vocab_size == ids + 2
    assert tokenizer.decode([ids, ids + 1]) == "" and tokenizer.decode([ids - 1]) == ""  # <mask> is special too
    source = shutil.copytree(sources["nllb"], tmp_path / "source")
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "vocab_size": ids - 1}))
    with pytest.raises(SystemExit, match=f"the tokenizer has {ids} tokens but config.json says vocab_size={ids - 1}"):
        main([str(source), "--out", str(tmp_path / "out")])


def test_every_kind_of_tokenizer_offers_what_the_engine_calls(imported, marian_models, tokenizer):
    """model/token.py's TextTokenizer, the one type the engine, checkpoints and results take: the project's BPE, an
    imported Marian model's SentencePiece and each many-to-many layout's tokenizer have every member of it."""
    from model.spm_tokenizer import SentencePieceTokenizer
    from model.token import TextTokenizer
    from model.tokenizer import Tokenizer

    marian = load_checkpoint(marian_models["shared"][1])[1]
    many = [load_checkpoint(imported[layout])[1] for layout in LAYOUTS]
    assert (type(tokenizer), type(marian), {type(t) for t in many}) == (
        Tokenizer, SentencePieceTokenizer, {MultilingualTokenizer}
    )  # fmt: skip
    for t in (tokenizer, marian, *many):
        assert isinstance(t, TextTokenizer), type(t)
        assert t.decode(t.encode("A dog runs.", "target", False)) == "A dog runs."
