import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from model.tokenizer import BOS, EOS, PAD, UNK, Tokenizer

TEXTS = [
    "Zwei junge weiße Männer sind im Freien.",
    "A café, 42 years old — naïve!",
    "Emoji 🙂🚲 and CJK 東京 and Ελληνικά.",
    'Punctuation: (yes), "quotes"; 3.14 & 100% ... ok?',
    "double  spaces and a trailing space ",
]
DECOMPOSED = "Decomposed: cafe\u0301 and nai\u0308ve, a\u0301\u0300 two marks"  # NFC composes them (not round trip)


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_restores_the_text(tokenizer, text):
    for side in ("source", "target"):
        assert tokenizer.decode(tokenizer.encode(text, side=side)) == text


def test_special_tokens_come_from_the_wrapping_only_and_text_that_spells_them_is_text(tokenizer):
    assert tokenizer.encode("a dog", side="source")[-1] == tokenizer.eos_id
    ids = tokenizer.encode("a dog", side="target")
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    for text in (PAD, BOS, EOS, UNK, "a </s> dog", "<s>struck</s> <pad><unk></s></s>"):
        assert not set(tokenizer.encode(text, add_special_tokens=False)) & tokenizer.special_ids, text
        tokens = tokenizer.tokenize(text, side="target")
        assert [t.special for t in tokens] == [True] + [False] * (len(tokens) - 2) + [True]
        assert not {t.text for t in tokens[1:-1]} & {PAD, BOS, EOS, UNK}  # ordinary pieces, bytes or characters
        assert tokenizer.decode([t.id for t in tokens]) == text  # skip_special_tokens drops the wrapping only


@given(st.lists(st.sampled_from([EOS, BOS, PAD, UNK, "<", ">", "/", "s", "<0x41>", "a dog", " ", "ä"]), max_size=8))
def test_any_mix_of_special_looking_text_round_trips(tokenizer, parts):
    text = "".join(parts).lstrip()  # a leading space is dropped by any decoding, special or not
    ids = tokenizer.encode(text, side="target")
    assert ids.count(tokenizer.bos_id) == ids.count(tokenizer.eos_id) == 1
    assert tokenizer.pad_id not in ids and tokenizer.unk_id not in ids
    assert tokenizer.decode(ids) == text


@pytest.mark.parametrize("text", [*TEXTS, DECOMPOSED])
def test_offsets_point_at_the_right_characters(tokenizer, text):
    tokens = tokenizer.tokenize(text, side="target")
    assert tokens[0].special and tokens[0].text == BOS and tokens[0].start == tokens[0].end == 0
    assert tokens[-1].special and tokens[-1].text == EOS and tokens[-1].start == tokens[-1].end == len(text)
    pieces = tokens[1:-1]
    for t in pieces:
        assert 0 <= t.start <= t.end <= len(text)
        span = text[t.start : t.end]
        piece = t.text.replace("▁", " ")
        if not piece.startswith("<0x"):  # byte-fallback pieces point at the whole character
            span = unicodedata.normalize("NFC", span)
            assert span == piece.strip() or span == piece, (t, span)
    ends = [t.end for t in pieces]
    assert ends == sorted(ends)
    covered = {i for t in pieces for i in range(t.start, t.end)}
    assert {i for i, ch in enumerate(text) if not ch.isspace()} <= covered


def test_unseen_characters_fall_back_to_bytes_not_unk(tokenizer):
    ids = tokenizer.encode("ʘ", add_special_tokens=False)
    assert tokenizer.unk_id not in ids
    assert all(tokenizer.id_to_token(i).startswith("<0x") or tokenizer.id_to_token(i) == "▁" for i in ids)


def test_save_and_load(tmp_path, tokenizer):
    tokenizer.save(tmp_path / "tok.json")
    again = Tokenizer.from_file(tmp_path / "tok.json")
    assert again.encode(TEXTS[2]) == tokenizer.encode(TEXTS[2])
    assert again.vocab_size == tokenizer.vocab_size
