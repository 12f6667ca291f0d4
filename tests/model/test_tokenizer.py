import pytest

from model.tokenizer import BOS, EOS, PAD, UNK, Tokenizer

TEXTS = [
    "Zwei junge weiße Männer sind im Freien.",
    "A café, 42 years old — naïve!",
    "Emoji 🙂🚲 and CJK 東京 and Ελληνικά.",
    "Punctuation: (yes), \"quotes\"; 3.14 & 100% ... ok?",
    "double  spaces and a trailing space ",
]


@pytest.mark.parametrize("text", TEXTS)
def test_round_trip_restores_the_text(tokenizer, text):
    for side in ("source", "target"):
        assert tokenizer.decode(tokenizer.encode(text, side=side)) == text


def test_special_tokens_are_single_ids_and_never_split(tokenizer):
    assert [tokenizer.encode(t, add_special_tokens=False) for t in (PAD, BOS, EOS, UNK)] == [[0], [1], [2], [3]]
    assert tokenizer.encode("a dog", side="source")[-1] == tokenizer.eos_id
    ids = tokenizer.encode("a dog", side="target")
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    # a special token written inside text is one id, and decoding with skip drops it
    inner = tokenizer.encode("a </s> dog", add_special_tokens=False)
    assert inner.count(tokenizer.eos_id) == 1
    assert tokenizer.decode(inner, skip_special_tokens=False).count("</s>") == 1


@pytest.mark.parametrize("text", TEXTS)
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
