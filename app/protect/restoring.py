"""Restoring: where a group of spans goes in the translation, by the alignment of the words around it, and the
translation with the groups put back (see app/protect/__init__.py)."""

from __future__ import annotations

import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

Span = tuple[int, int]  # [start, end) characters
Pair = tuple[Span, Span]  # a target token's span, and the span of the source token it aligns to


def word_char(c: str) -> bool:
    """A character of a word of a script that puts spaces between words (not Thai, CJK, ...), as app/html/place.py's."""
    if not c:
        return False
    return (c.isalnum() or unicodedata.category(c)[0] == "M") and not ("\u0e00" <= c < "\u1100" or c >= "\u2e80")


class Anchors:
    """Where a span goes in a translation, by the alignment of the words around it (see app/protect/__init__.py)."""

    def __init__(self, source: str, target: str, pairs: list[Pair]):
        self.source, self.target = source, target
        pairs = [(t, s) for t, s in pairs if t[0] < t[1] and s[0] < s[1]]
        self.ends = sorted((s[1], t[1]) for t, s in pairs)  # by source end: the last one before a place
        self.starts = sorted((s[0], t[0]) for t, s in pairs)  # by source start: the first one after a place
        words = [i for i, c in enumerate(source) if c.isalnum()]
        self.first, self.last = (words[0], words[-1] + 1) if words else (len(source), 0)
        text = [i for i, c in enumerate(source) if not c.isspace()]
        self.first_text, self.last_text = (text[0], text[-1] + 1) if text else (len(source), 0)

    def place(self, left: int, right: int, forward: bool) -> int:
        """Where in the translation the span between source[:left] and source[right:] goes."""
        t = self.target
        if self.first >= left:  # no word before it: at the start
            return _opening(t) if self.first_text < left else 0
        if self.last <= right:  # no word after it: at the end
            return _closing(t) if self.last_text > right else len(t)
        if not self.ends:  # no alignment: its share of the way through
            x = round(len(t) * left / max(len(self.source), 1))
            return _word_start(t, x) if forward else _word_end(t, x)
        if forward:
            i = bisect_left(self.starts, (right, -1))
            return _word_start(t, self.starts[i][1]) if i < len(self.starts) else len(t)
        i = bisect_right(self.ends, (left, len(t) + 1)) - 1
        return _word_end(t, self.ends[i][1]) if i >= 0 else 0


def _quote(c: str) -> bool:
    return bool(c) and (c in "\"'«»„“”‚‘’" or unicodedata.category(c) in ("Pi", "Pf"))


def opens(c: str, after: str) -> bool:
    """Punctuation a space does not follow: an opening bracket, or a quote with a word after it (`after`)."""
    if _quote(c):
        return word_char(after)
    return bool(c) and (c in "([{¿¡" or unicodedata.category(c) == "Ps")


def closes(c: str, after: str) -> bool:
    """Punctuation a space does not come before: a full stop, comma, closing bracket, or a quote with no word after
    it (`after`): which way a quote faces depends on the language („so“, »so«, “so”)."""
    if _quote(c):
        return not word_char(after)
    return bool(c) and (c in ".,;:!?…%" or unicodedata.category(c) == "Pe")


def _opening(t: str) -> int:
    """After the translation's opening punctuation."""
    i = 0
    while i < len(t) and not t[i].isalnum() and not t[i].isspace():
        i += 1
    return i


def _closing(t: str) -> int:
    """Before the translation's closing punctuation."""
    j = len(t)
    while j > 0 and not t[j - 1].isalnum() and not t[j - 1].isspace():
        j -= 1
    return j


def _inside(t: str, x: int) -> bool:
    """Whether place x of t is inside a word (a hyphen or an apostrophe between two letters is part of it)."""

    def part(i: int) -> bool:
        return word_char(t[i]) or t[i] in "-'’" and 0 < i < len(t) - 1 and word_char(t[i - 1]) and word_char(t[i + 1])

    return 0 < x < len(t) and part(x - 1) and part(x)


def _word_end(t: str, x: int) -> int:
    while _inside(t, x):
        x += 1
    return x


def _word_start(t: str, x: int) -> int:
    while _inside(t, x):
        x -= 1
    return x


@dataclass(frozen=True)
class Restored:
    """A translation with its groups put back, and what went where: (its place in the translation, the text)."""

    text: str
    insertions: tuple[tuple[int, str], ...] = ()

    def shift(self, x: int, end: bool = False) -> int:
        """A place in the translation as a place in `text`: after what went in there, or before it (`end`)."""
        return x + sum(len(s) for p, s in self.insertions if (p < x if end else p <= x))

    def span(self, span: Span) -> Span:
        start = self.shift(span[0])  # an empty span (a token that writes nothing) stays empty where spans go back in
        return (start, start) if span[0] == span[1] else (start, self.shift(span[1], end=True))

    def word(self, span: Span) -> Span:
        """A word's span in `text`: as span(), but it ends where a group went in inside it (the group, written as it
        was, is no part of the word the model wrote: "Mann" of "Mann {name}.", not the whole)."""
        a, b = span
        return self.span((a, next((p for p, _ in self.insertions if a < p < b), b)))

    def deltas(self, target: str, ends: list[int]) -> list[str]:
        """What each token adds to `text`, where token i ends at ends[i] of the translation `target`: a group goes
        with the token it follows (the first token takes those at the start, the last those at the end)."""
        out, k, at = [], 0, 0
        for i, e in enumerate(ends):
            last, parts = i == len(ends) - 1, []
            while k < len(self.insertions) and (self.insertions[k][0] <= e or last):
                p, s = self.insertions[k]
                parts += [target[at:p], s]
                at, k = max(at, p), k + 1
            parts.append(target[at:] if last else target[at:e])
            at = len(target) if last else max(at, e)
            out.append("".join(parts))
        return out
