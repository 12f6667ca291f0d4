"""Inline codes of the text formats (a subtitle's tags, XLIFF's `<g>` and `<ph/>`, Markdown's emphasis and links) as
the inline tags of a markup unit, and back.

A Fragment is a unit being read: text, and codes in reading order. A code is what the format writes, opaque here:
paired (a start and an end around text: `<i>..</i>`, `<g>`, `**..**`, a link), empty (a point: `<x/>`, `{\\an8}`, an
image) or kept (text the model reads that comes back as written: inline code). In the unit each is an element with
its number, `<span id="c3">..</span>`, `<img id="c4">`, `<code id="c5">..</code>` (and `<br id="c6">` for a line
break the format marks), which app/html/place.py puts back around the words aligned to the ones it wrapped, each exactly
once. A fragment without codes is a plain unit. `back()` reads a unit's translation as text and the codes, in order,
each exactly once (defensively: one the translation lacks comes at the end, a repeated one is left out).

`tagged()` reads text in which a pattern finds a format's codes (tags, a start paired with its end, and points) into
a Fragment (subtitle cues, HTML in a PO msgid). `lines()` puts a translation back on as many lines as its source had,
each break at a space nearest the source's proportional point (subtitle cues, hard-wrapped Markdown paragraphs).
"""

from __future__ import annotations

import html
import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

from app.files import Unit

_TAG = re.compile(
    r'<span id="c(\d+)">|</span>|<img id="c(\d+)">|<br id="c(\d+)">|<code id="c(\d+)">.*?</code>', re.DOTALL
)


@dataclass(eq=False)
class Code:
    start: object  # what the format writes at its start (a str, an element)
    end: object = None  # a paired code's end; None for an empty or kept one
    kind: str = "empty"  # paired, empty, kept or break
    text: str = ""  # a kept code's text, which the model reads (and a break's "\n")
    spaced: tuple[bool, bool] = (False, False)  # whitespace before it and after it in the source


Piece = tuple[str, object]  # ("text", str) or ("open" | "close" | "empty", Code)


@dataclass
class Fragment:
    """A unit as it is read: its HTML and its codes."""

    parts: list[str] = field(default_factory=list)
    plain: list[str] = field(default_factory=list)
    codes: list[Code] = field(default_factory=list)
    stack: list[Code] = field(default_factory=list)

    def text(self, s: str) -> None:
        if self.codes and self.codes[-1].kind != "paired" and self.parts[-1].endswith(">"):
            self.codes[-1].spaced = (self.codes[-1].spaced[0], s[:1].isspace())
        self.parts.append(html.escape(s, quote=False))
        self.plain.append(s)

    def open(self, start: object, end: object) -> None:
        self.stack.append(self._add(Code(start, end, "paired")))
        self.parts.append(f'<span id="c{len(self.codes) - 1}">')

    def close(self) -> None:
        self.stack.pop()
        self.parts.append("</span>")

    def empty(self, start: object) -> None:
        self._add(Code(start))
        self.parts.append(f'<img id="c{len(self.codes) - 1}">')

    def kept(self, start: object, text: str) -> None:
        self._add(Code(start, kind="kept", text=text))
        self.parts.append(f'<code id="c{len(self.codes) - 1}">{html.escape(text, quote=False)}</code>')

    def line_break(self, start: object) -> None:
        self._add(Code(start, kind="break", text="\n"))
        self.parts.append(f'<br id="c{len(self.codes) - 1}">')

    def _add(self, code: Code) -> Code:
        code.spaced = (bool(self.plain) and self.plain[-1][-1:].isspace(), False)
        self.codes.append(code)
        return code

    def unit(self, placeholders: bool = False) -> Unit:
        while self.stack:
            self.close()
        if not self.codes:
            return Unit("".join(self.plain), placeholders=placeholders)
        return Unit("".join(self.parts), markup=True, placeholders=placeholders)

    @property
    def visible(self) -> str:
        return "".join(self.plain)

    def back(self, translation: str) -> list[Piece]:
        """The translation as text and codes: each code exactly once, paired ones balanced."""
        if not self.codes:
            return [("text", translation)]
        out: list[Piece] = []
        seen: set[int] = set()
        open_ids: list[int | None] = []  # per open <span>: its code, None for a repeated one left out
        at = 0
        for m in _TAG.finditer(translation):
            if m.start() > at:
                out.append(("text", html.unescape(translation[at : m.start()])))
            at = m.end()
            if m[0] == "</span>":
                i = open_ids.pop() if open_ids else None
                out += [("close", self.codes[i])] if i is not None else []
                continue
            i = int(next(g for g in m.groups() if g is not None))
            first = i < len(self.codes) and i not in seen
            seen.add(i)
            if m[0].startswith("<span"):
                open_ids.append(i if first else None)
                out += [("open", self.codes[i])] if first else []
            elif first:
                out.append(("empty", self.codes[i]))
        if at < len(translation):
            out.append(("text", html.unescape(translation[at:])))
        out += [("close", self.codes[i]) for i in reversed(open_ids) if i is not None]
        for i, c in enumerate(self.codes):
            if i not in seen:
                out += [("open", c), ("close", c)] if c.kind == "paired" else [("empty", c)]
        return _spaced(out)


def tagged(
    text: str, codes: re.Pattern, decode: Callable[[str], str] = str, void: frozenset[str] = frozenset()
) -> Fragment:
    """The text as a Fragment: each match of `codes` a code as written, the text between them `decode`d. A match
    with a group 1 is a tag of that name (case-insensitive): an end tag closes the innermost start tag still open
    where it has its name, the two wrapping the text between them; a start tag never closed wraps the rest; an end
    tag that closes none, a self-closing tag (`<br/>`), a start tag whose name is in `void` (`<br>`) and a match
    without a group 1 are points."""
    tokens, stack, pairs = [], [], {}  # tokens: (start, end, name of a start or end tag, closing); pairs: start -> end
    for m in codes.finditer(text):
        name = m[1] and m[1].lower()
        point = name is not None and (m[0].endswith("/>") or (name in void and not m[0].startswith("</")))
        tokens.append((m.start(), m.end(), None if point else name, m[0].startswith("</")))
        name, closing = tokens[-1][2:]
        if name and not closing:
            stack.append(len(tokens) - 1)
        elif name and stack and tokens[stack[-1]][2] == name:
            pairs[stack.pop()] = len(tokens) - 1
    f, at, ends = Fragment(), 0, set(pairs.values())
    for i, (a, b, name, closing) in enumerate(tokens):
        if a > at:
            f.text(decode(text[at:a]))
        at = b
        if name and not closing:
            f.open(text[a:b], text[tokens[pairs[i]][0] : tokens[pairs[i]][1]] if i in pairs else "")
        elif i in ends:
            f.close()
        else:
            f.empty(text[a:b])
    if at < len(text):
        f.text(decode(text[at:]))
    return f


def _spaced(pieces: list[Piece]) -> list[Piece]:
    """A point or kept code that the translation glues to a word is spaced from it where the source spaced it."""
    for i, (kind, code) in enumerate(pieces):
        if kind != "empty" or code.kind == "break":
            continue
        if code.spaced[0] and i and pieces[i - 1][0] == "text" and pieces[i - 1][1][-1:].isalnum():
            pieces[i - 1] = ("text", pieces[i - 1][1] + " ")
        if code.spaced[1] and i + 1 < len(pieces) and pieces[i + 1][0] == "text" and pieces[i + 1][1][:1].isalnum():
            pieces[i + 1] = ("text", " " + pieces[i + 1][1])
    return pieces


def lines(
    parts: list[tuple[str, bool]], widths: list[int], ok: Callable[[str, int], bool] = lambda text, at: True
) -> list[str]:
    """`parts` (strings, each breakable at its spaces or not) joined and put on len(widths) lines, fewer where there
    are too few spaces: each break at the run of spaces nearest the point where the source's line of that number
    ended, in proportion (the spaces dropped); `ok(text, at)` may refuse a break before the text's character at."""
    text = "".join(s for s, _ in parts)
    if len(widths) < 2:
        return [text]
    runs, at = [], 0
    for s, breakable in parts:
        if breakable:
            runs += [(at + m.start(), at + m.end()) for m in re.finditer(r" +", s)]
        at += len(s)
    runs = [(a, b) for a, b in runs if 0 < a and b < len(text) and ok(text, b)]
    total, sums = sum(widths) or 1, list(accumulate(widths))
    chosen: list[tuple[int, int]] = []
    lo = 0
    for j, w in enumerate(sums[:-1]):
        left = len(widths) - 2 - j  # breaks still to place after this one
        hi = len(runs) - left
        if lo >= hi:
            break
        goal = len(text) * w / total
        i = min(max(bisect_left(runs, (goal,), lo, hi), lo), hi - 1)
        if i > lo and goal - runs[i - 1][1] < runs[i][0] - goal:
            i -= 1
        chosen.append(runs[i])
        lo = i + 1
    out, at = [], 0
    for a, b in chosen:
        out.append(text[at:a])
        at = b
    return [*out, text[at:]]
