"""app/segment.py: texts split into the segments a sentence-level model translates, and put back in their shape."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.segment import Segment, assemble, blank, cut_to_fit, segment
from bench.splitters import HARD_CASES

MISSED = {"(This is a note.) The text goes on."}  # sentencex 1.0.32 keeps a sentence in brackets with the next


def sentences(text: str, split: str = "sentences") -> list[str]:
    return [text[s.start : s.end] for s in segment(text, split)]


@pytest.mark.parametrize("text,want", [c for c in HARD_CASES if c[0] not in MISSED], ids=lambda v: str(v)[:30])
def test_hard_cases_split_as_a_reader_would(text, want):
    assert sentences(text) == want


@pytest.mark.xfail(strict=True, reason="sentencex keeps a bracketed sentence with the next one")
@pytest.mark.parametrize("text,want", [c for c in HARD_CASES if c[0] in MISSED])
def test_known_misses(text, want):
    assert sentences(text) == want


def test_lines_and_paragraphs_bound_sentences_and_their_whitespace_comes_back():
    text = "  Two dogs play. A cat sleeps.\n\n\tA man reads\r\nthe paper.  \n"
    assert sentences(text) == ["Two dogs play.", "A cat sleeps.", "A man reads", "the paper."]
    assert sentences(text, "lines") == ["Two dogs play. A cat sleeps.", "A man reads", "the paper."]
    assert sentences(text, "none") == ["Two dogs play. A cat sleeps.\n\n\tA man reads\r\nthe paper."]
    out, spans = assemble(
        text, segment(text), ["Zwei Hunde spielen.", "Eine Katze schläft.", "Ein Mann liest", "die Zeitung."]
    )
    assert out == "  Zwei Hunde spielen. Eine Katze schläft.\n\n\tEin Mann liest\r\ndie Zeitung.  \n"
    assert [out[a:b] for a, b in spans] == [
        "Zwei Hunde spielen.",
        "Eine Katze schläft.",
        "Ein Mann liest",
        "die Zeitung.",
    ]


def test_blank_texts_have_no_segments_and_stay_as_they_are():
    for text in ("", " ", "\n\n", " \t\r\n ", "\u200b", "\ufeff\u200e \u2060\n\u00ad", "\u00a0\u202f"):
        assert blank(text)
        for split in ("sentences", "lines", "none"):
            assert segment(text, split) == [] and assemble(text, [], []) == (text, [])


def test_invisible_characters_at_a_segments_ends_stay_outside_it_and_inside_go_with_its_words():
    text = "\ufeffA dog runs.\u200e\n\u200b\nTwo cats play.\u200f A zero\u200bwidth word."
    expected = {
        "sentences": ["A dog runs.", "Two cats play.", "A zero\u200bwidth word."],
        "lines": ["A dog runs.", "Two cats play.\u200f A zero\u200bwidth word."],
        "none": ["A dog runs.\u200e\n\u200b\nTwo cats play.\u200f A zero\u200bwidth word."],
    }
    for split, pieces in expected.items():
        assert [text[s.start : s.end] for s in segment(text, split)] == pieces
    assert not blank("\u200bA") and not blank("\u00a0.")


def test_wrong_arguments_are_refused():
    with pytest.raises(ValueError, match="split='words'"):
        segment("A text.", "words")
    with pytest.raises(ValueError, match="1 segments, 2 translations"):
        assemble("A text.", [Segment(0, 7)], ["Ein", "Text."])


WORDS = st.sampled_from(["A", "dog", "Dr.", "U.S.", "3.5", "e.g.", "runs", "«Hi»", "...", "…", "it.", "Why?", "No!"])
SPACE = st.sampled_from([" ", "  ", "\t", "\n", "\n\n", "\r\n", " \n "])
DOCUMENTS = st.lists(st.one_of(WORDS, SPACE), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=DOCUMENTS, split=st.sampled_from(["sentences", "lines", "none"]))
def test_segments_cover_every_word_in_order_and_the_rest_is_kept(text, split):
    segs = segment(text, split)
    at = 0
    for s in segs:  # in order, inside the text, none overlapping, no whitespace at either end
        assert at <= s.start < s.end <= len(text)
        assert not text[s.start].isspace() and not text[s.end - 1].isspace()
        at = s.end
    outside = "".join(text[a:b] for a, b in zip([0] + [s.end for s in segs], [s.start for s in segs] + [len(text)]))
    assert outside.strip() == "", "no text is lost outside the segments"
    if split != "none":  # no segment spans a line break
        assert not any(re.search(r"[\r\n]", text[s.start : s.end]) for s in segs)
    # put back: itself when nothing changes; otherwise the same skeleton of whitespace and line breaks
    assert assemble(text, segs, [text[s.start : s.end] for s in segs])[0] == text
    out, spans = assemble(text, segs, ["x" * (i + 1) for i in range(len(segs))])
    assert re.sub(r"x+", "", out) == outside and [out[a:b] for a, b in spans] == [
        "x" * (i + 1) for i in range(len(segs))
    ]


def test_a_segment_too_long_is_cut_at_clauses_then_spaces_then_anywhere_until_each_piece_fits():
    text = "A man, who is tall, rides a bike; a dog — brown — runs after him and barks at the cat on the wall."

    def fits(piece):
        return len(piece) <= 30

    pieces = [text[s.start : s.end] for s in cut_to_fit(text, segment(text), fits)]
    assert pieces == ["A man, who is tall,", "rides a bike; a dog — brown", "— runs after him and barks",
                      "at the cat on the wall."]  # fmt: skip
    assert assemble(text, cut_to_fit(text, segment(text), fits), pieces)[0] == text
    unspaced = "一二三四五六七八九十，一二三四五六七八九十一二三四五六七八九十"
    pieces = [unspaced[s.start : s.end] for s in cut_to_fit(unspaced, segment(unspaced), lambda p: len(p) <= 8)]
    assert "".join(pieces) == unspaced and all(len(p) <= 8 for p in pieces) and pieces[1].endswith("，")
    assert cut_to_fit("x", [Segment(0, 1)], lambda p: False) == [Segment(0, 1)]  # a character: as it is
    fine = segment(text)
    assert cut_to_fit(text, fine, lambda p: True) == fine
