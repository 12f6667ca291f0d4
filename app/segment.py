"""Texts of any shape into the segments a sentence-level model translates, and the translations back into the
text's shape.

A model trained on single sentences garbles a paragraph (and drops its later sentences), so a document is to be
split into segments, each translated as a sequence of its own in the running batch, and the translations put back
between the text's own whitespace: paragraph breaks, line breaks, indentation and the leading and trailing
whitespace come back exactly as they were. A segment is a span of the text without whitespace (or invisible
characters: INVISIBLE) at either end.
/translate splits its texts with it (app/text/documents.py).

- `sentences` (the default): each line is split into sentences by sentencex (Wikimedia's rule-based splitter,
  ~250 languages with fallbacks, no dependencies). A sentence never spans lines: a line break is kept where it
  was, so hard-wrapped prose is translated line by line.
- `lines`: one segment a line (subtitles, lists, tables pasted as text).
- `none`: the whole text, trimmed, as one segment (what the model sees when the caller has split it already).
- `nonewlines` (DeepL's `split_sentences=nonewlines`): sentences, a line break inside one read as a space.

bench/splitters.py compares the splitters that were considered on hard cases (abbreviations, decimals, quotes,
ellipses, lines without a full stop) and on speed: docs/performance.md has the figures, the README why sentencex.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import sentencex

Split = Literal["sentences", "lines", "none", "nonewlines"]
# Characters nobody sees, beside whitespace: zero-width spaces, joiners and non-joiners, direction marks and
# isolates, the word joiner, the byte-order mark, the soft hyphen. Inside a segment they go to the model with its
# words; at a segment's ends, or a line of nothing else, they are kept as written like whitespace (a model given
# one alone writes a sentence of its own)
INVISIBLE = "\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
_SEEN = rf"[^\s{INVISIBLE}]"
_CONTENT = re.compile(rf"{_SEEN}(?:.*{_SEEN})?", re.DOTALL)  # a span's text without the blank at its ends


@dataclass(frozen=True)
class Segment:
    start: int  # [start, end) characters of the text
    end: int


def _trimmed(text: str, start: int, end: int) -> Segment | None:
    m = _CONTENT.search(text, start, end)
    return None if m is None else Segment(m.start(), m.end())


def unwrapped(text: str) -> str:
    """The text with each line break character a space (as long as it was: its spans are the text's)."""
    return text.translate(_BREAKS)


_BREAKS = {ord("\r"): " ", ord("\n"): " "}


def blank(text: str) -> bool:
    """Whether the text has nothing to translate: whitespace and invisible characters alone (or nothing)."""
    return _CONTENT.search(text) is None


def worded(text: str) -> bool:
    """Whether the text has a letter in it (of any script). One without (a number, a date, a price, "♪♪", "--") is
    kept as written, not translated: a model given one writes words in its place, as DeepL would not."""
    return any(c.isalpha() for c in text)


def _lines(text: str) -> list[tuple[int, int]]:
    """[start, end) of each line, without its line break."""
    spans, start = [], 0
    for m in re.finditer(r"\r\n|\r|\n", text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return spans


def _sentences(text: str, start: int, end: int, language: str) -> list[tuple[int, int]]:
    """sentencex's sentences of text[start:end], as spans: its pieces are consecutive slices of the line (each with
    the whitespace after it); where they are not, the line is one sentence."""
    spans, at = [], start
    for piece in sentencex.segment(language, text[start:end]):
        if text.startswith(piece, at):
            spans.append((at, at + len(piece)))
            at += len(piece)
        else:  # never seen; a line translated whole is safer than text lost
            return [(start, end)]
    return spans if at == end else [(start, end)]


def segment(text: str, split: Split = "sentences", language: str = "en") -> list[Segment]:
    """The segments of `text` to translate, in order, none overlapping; the text outside them is whitespace."""
    if split == "none":
        spans = [(0, len(text))]
    elif split == "lines":
        spans = _lines(text)
    elif split == "sentences":
        spans = [s for a, b in _lines(text) if a < b for s in _sentences(text, a, b, language)]
    elif split == "nonewlines":  # DeepL's: sentences wherever they run, a line break as a space
        spans = _sentences(unwrapped(text), 0, len(text), language) if text else []
    else:
        raise ValueError(f"split={split!r}: one of sentences, lines, none")
    return [s for a, b in spans if (s := _trimmed(text, a, b)) is not None]


# Where a sentence too long for the model is cut, best first: after a clause's punctuation, at a dash between
# spaces, at any whitespace, anywhere (a script written without spaces)
_CLAUSE = re.compile(r"(?<=[,;:)\]»”])\s+|\s+(?=[–—]\s)|(?<=[，、；：])")
_SPACE = re.compile(r"\s+")
_ANYWHERE = re.compile(r"(?<=.)", re.DOTALL)


def cut_to_fit(text: str, segments: list[Segment], fits: Callable[[str], bool]) -> list[Segment]:
    """The segments, each that does not `fits` (a sentence over the model's tokens) cut into pieces that do, at the
    place nearest its middle of the best kind there (_CLAUSE, then any whitespace, then anywhere), again and again;
    the text between two pieces stays as written, as between sentences."""
    out: list[Segment] = []
    todo = list(reversed(segments))
    while todo:
        s = todo.pop()
        if fits(text[s.start : s.end]) or (halves := _halves(text, s)) is None:
            out.append(s)  # fits, or a single character: the engine cuts it to the limit
        else:
            todo += reversed(halves)
    return out


def _halves(text: str, s: Segment) -> list[Segment] | None:
    middle = (s.start + s.end) / 2
    for where in (_CLAUSE, _SPACE, _ANYWHERE):
        cuts = [m for m in where.finditer(text, s.start, s.end) if s.start < m.start() and m.end() < s.end]
        if cuts:
            at = min(cuts, key=lambda m: abs(m.start() - middle))
            halves = [_trimmed(text, s.start, at.start()), _trimmed(text, at.end(), s.end)]
            return [h for h in halves if h is not None] if all(halves) else None
    return None


def assemble(text: str, segments: list[Segment], translations: list[str]) -> tuple[str, list[tuple[int, int]]]:
    """The text with each segment replaced by its translation -> (the result, each translation's [start, end) in it).
    Everything between the segments is kept as it was."""
    if len(segments) != len(translations):
        raise ValueError(f"{len(segments)} segments, {len(translations)} translations")
    out, spans, at, length = [], [], 0, 0
    for s, t in zip(segments, translations, strict=True):
        out += [text[at : s.start], t]
        length += s.start - at
        spans.append((length, length + len(t)))
        length += len(t)
        at = s.end
    out.append(text[at:])
    return "".join(out), spans
