"""MultilingualTokenizer: the ids, language codes and text of transformers' M2M100Tokenizer, NllbTokenizer and
MBart50Tokenizer.

The references are transformers' own classes over one small SentencePiece BPE model (tests/importers/
multilingual_fixture.py), as NLLB (prefix and legacy suffix codes) and as M2M100 (a vocab.json of its own order), and
over a unigram model as mBART-50; the sentences are Multi30k's test2016 in en, de and fr where the data is at hand, and awkward texts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.importers import CannotImport
from model.multilingual_tokenizer import MultilingualTokenizer, spec_from
from tests.importers.marian_fixture import held_out_sentences
from tests.importers.multilingual_fixture import AWKWARD, build_m2m100, build_mbart50, build_nllb, train_bpe

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")
KINDS = {  # name: (source languages, target language)
    "nllb": (("deu_Latn", "eng_Latn"), "fra_Latn"),
    "nllb-legacy": (("deu_Latn", "eng_Latn"), "fra_Latn"),
    "m2m100": (("de", "en"), "fr"),
    "mbart50": (("de_DE", "en_XX"), "fr_XX"),
}
CLASSES = {"m2m100": "M2M100Tokenizer", "mbart50": "MBart50Tokenizer"}  # else NllbTokenizer
TYPED = [t for t in AWKWARD if "_" in t or "<" in t]  # codes and control tokens typed in a text
PLAIN = [t for t in AWKWARD if t not in TYPED]


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multilingual")
    model = train_bpe(root)
    builders = {
        "nllb": lambda out: build_nllb(out, model, legacy=False),
        "nllb-legacy": lambda out: build_nllb(out, model, legacy=True),
        "m2m100": lambda out: build_m2m100(out, model),
        "mbart50": lambda out: build_mbart50(out, train_bpe(root, kind="unigram")),
    }
    for name, build in builders.items():
        (root / name).mkdir()
        build(root / name)
    return {name: root / name for name in builders}


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return [s for lang in ("en", "de", "fr") for s in held_out_sentences(lang)]


@pytest.fixture(scope="module", params=list(KINDS))
def pair(request, directories):
    """(name, transformers' tokenizer as AutoTokenizer loads the directory, ours from spec_from)"""
    path = directories[request.param]
    return request.param, transformers.AutoTokenizer.from_pretrained(str(path)), MultilingualTokenizer(spec_from(path))


def test_the_references_are_the_classes_users_get(pair):
    name, ref, _ = pair
    assert type(ref).__name__ == CLASSES.get(name, "NllbTokenizer")
    assert getattr(ref, "legacy_behaviour", False) == (name == "nllb-legacy")


def test_source_and_target_ids_equal_transformers(pair, sentences):
    name, ref, ours = pair
    sources, target = KINDS[name]
    texts = sentences + PLAIN
    for source in sources:
        ref.src_lang, ref.tgt_lang = source, target
        assert ours.encode_batch(texts, language=source) == ref(texts).input_ids, source
        assert ours.encode_batch(texts, "target", language=target) == ref(text_target=texts).input_ids, target
        no_specials = ref(texts, add_special_tokens=False).input_ids
        assert ours.encode_batch(texts, add_special_tokens=False, language=source) == no_specials


def test_nllb_pieces_are_sentencepieces(directories, sentences):
    """The converted BPE model cuts text as SentencePiece does (NLLB's ids are its ids + 1), but for the trailing
    space that transformers 5's NllbTokenizer keeps as one more "▁"."""
    import sentencepiece as spm

    ours = MultilingualTokenizer(spec_from(directories["nllb"]))
    sp = spm.SentencePieceProcessor(model_file=str(directories["nllb"] / "sentencepiece.bpe.model"))
    for text in sentences + PLAIN:
        ids = ours.encode(text.rstrip(), add_special_tokens=False)
        assert [ours.id_to_token(i) for i in ids if i != ours.unk_id] == [
            p for p, i in zip(sp.encode(text, out_type=str), sp.encode(text)) if not sp.is_unknown(i)
        ], text


def test_every_language_code_has_transformers_id(pair):
    name, ref, ours = pair
    token = (lambda code: f"__{code}__") if name == "m2m100" else (lambda code: code)
    assert len(ours.languages) == {"m2m100": 100, "mbart50": 52}.get(name, 202)
    for code in ours.languages:
        assert ours.language_id(code) == ref.convert_tokens_to_ids(token(code)), code
    with pytest.raises(ValueError, match="unknown language 'xx_Latn'"):
        ours.encode("a", language="xx_Latn")


def test_the_code_and_end_of_sentence_sit_where_the_model_expects_them(pair):
    name, _, ours = pair
    _, target = KINDS[name]
    code, text = ours.language_id(target), ours.encode("A dog runs.", add_special_tokens=False, language=target)
    for side in ("source", "target"):
        ids = ours.encode("A dog runs.", side, language=target)
        assert ids == ([*text, ours.eos_id, code] if name == "nllb-legacy" else [code, *text, ours.eos_id])
    assert (ours.bos_id, ours.eos_id, ours.pad_id, ours.unk_id) == (2, 2, 1, 3)  # the decoder starts from </s>
    assert ours.default_languages == {"source": KINDS[name][0][0], "target": target}  # the saved src/tgt_lang
    assert ours.encode("A dog.", "target") == ours.encode("A dog.", "target", language=target)


def test_typed_codes_and_control_tokens_are_ordinary_text(pair):
    name, _, ours = pair
    sources, _ = KINDS[name]
    specials = ours.special_ids - {ours.unk_id}
    for text in TYPED:
        ids = ours.encode(text, add_special_tokens=False, language=sources[0])
        assert ids and not specials & set(ids), (text, ids)
        assert sorted(ours.encode(text, language=sources[0])) == sorted(
            [*ids, ours.language_id(sources[0]), ours.eos_id]
        )


def test_decoding_gives_transformers_text(pair, sentences):
    """transformers 5 leaves the spaces of dropped tokens (<unk>) at the start, and M2M100Tokenizer writes the language
    code out as text; ours strips the one and drops the other."""
    name, ref, ours = pair
    sources, _ = KINDS[name]
    ref.src_lang = sources[0]
    batch = ref(sentences + AWKWARD).input_ids
    texts = ours.decode_batch(batch)
    if name == "m2m100":
        assert texts == ours.decode_batch([ids[1:] for ids in batch])
        batch = [ids[1:] for ids in batch]
    assert texts == [ref.decode(ids, skip_special_tokens=True).strip() for ids in batch]


def test_tokens_point_at_their_text(pair, sentences):
    name, _, ours = pair
    sources, _ = KINDS[name]
    for text in sentences[:200] + PLAIN:
        tokens = ours.tokenize(text, language=sources[0])
        assert [t.id for t in tokens] == ours.encode(text, language=sources[0])
        assert [t.special for t in tokens] == [t.id in ours.special_ids - {ours.unk_id} for t in tokens]
        for t in tokens:
            assert 0 <= t.start <= t.end <= len(text)
            if text.isascii() and not t.special and t.id != ours.unk_id:
                assert "".join(text[t.start : t.end].split()) == t.text.replace("▁", ""), (text, t)


def test_the_spec_is_json_and_loads_back(pair, tmp_path, sentences):
    _, _, ours = pair
    ours.save(tmp_path / ours.file_name)
    again = MultilingualTokenizer.from_file(tmp_path / ours.file_name)
    language = next(iter(ours.languages))
    assert again.encode_batch(sentences[:100], language=language) == ours.encode_batch(
        sentences[:100], language=language
    )


def test_it_refuses_what_it_does_not_know(directories, tmp_path):
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "T5Tokenizer"}')
    with pytest.raises(CannotImport, match="T5Tokenizer is not supported"):
        spec_from(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "MBartTokenizer"}')  # mBART-cc25's
    with pytest.raises(CannotImport, match="MBartTokenizer is not supported"):
        spec_from(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "NllbTokenizer"}')
    (tmp_path / "sentencepiece.bpe.model").write_bytes(b"not a model")
    with pytest.raises(CannotImport, match="not a SentencePiece model"):
        spec_from(tmp_path)


def test_running_it_never_imports_transformers_or_sentencepiece(directories, tmp_path):
    text, expected = "A dog runs ☃ on grass.", []
    for name, path in directories.items():
        ours = MultilingualTokenizer(spec_from(path))
        ours.save(tmp_path / f"{name}.json")
        ids = ours.encode(text, language=next(iter(ours.languages)))
        expected.append(repr((ids, ours.decode(ids))))
    probe = (
        "import sys\n"
        "sys.modules.update(transformers=None, sentencepiece=None)  # importing either now fails\n"
        "from model.multilingual_tokenizer import MultilingualTokenizer\n"
        f"for name in {list(directories)!r}:\n"
        f"    tok = MultilingualTokenizer.from_file({str(tmp_path)!r} + f'/{{name}}.json')\n"
        f"    ids = tok.encode({text!r}, language=next(iter(tok.languages)))\n"
        "    print(repr((ids, tok.decode(ids))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == expected


def test_a_truncated_source_keeps_its_code_and_end_of_sentence(pair):
    from app.text.limits import Limits

    name, _, ours = pair
    language = KINDS[name][1]
    text = "A dog runs after a ball in the park. " * 20
    (whole,), _ = Limits(10_000, 16, 4, 4, ours.vocab_size).sources(ours, [text], False, True, language=language)
    (cut,), truncated = Limits(12, 16, 4, 4, ours.vocab_size).sources(ours, [text], True, True, language=language)
    assert truncated == {0} and len(cut) == 12
    specials = 2 if name == "nllb-legacy" else 1  # after the text: </s>, and a legacy NLLB's code
    assert cut[-specials:] == whole[-specials:] and cut[: 12 - specials] == whole[: 12 - specials]


def test_mbart50_without_tokenizer_json_has_fairseqs_layout(directories, tmp_path, sentences):
    """A download of only sentencepiece.bpe.model and tokenizer_config.json (no tokenizer.json, no codes named):
    the codes follow the pieces in MBart50Tokenizer's order, then <mask>, as transformers converts it."""
    source = tmp_path / "mbart50"
    source.mkdir()
    (source / "sentencepiece.bpe.model").write_bytes((directories["mbart50"] / "sentencepiece.bpe.model").read_bytes())
    (source / "tokenizer_config.json").write_text('{"tokenizer_class": "MBart50Tokenizer", "src_lang": "de_DE"}')
    bare, saved = MultilingualTokenizer(spec_from(source)), MultilingualTokenizer(spec_from(directories["mbart50"]))
    assert bare.languages == saved.languages and bare.vocab_size == saved.vocab_size
    assert bare.spec["special"]["other"] == saved.spec["special"]["other"] == {"<mask>": saved.vocab_size - 1}
    assert bare.encode_batch(sentences[:300], language="de_DE") == saved.encode_batch(sentences[:300], language="de_DE")
