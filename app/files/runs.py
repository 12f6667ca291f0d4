"""A paragraph's formatting runs as one unit (DOCX, PPTX, ODT, rich-text cells of XLSX), and back.

A run is a piece of text with a formatting key: anything hashable that tells two formats apart (a run's properties,
the link around it). encode() reads the runs of a stretch of text that nothing else interrupts (the formats cut
paragraphs at fields, drawings, page breaks: see their docstrings), and the Points in it, in order:
- whitespace-only runs take the format of the run before them (after them, at the start), and adjacent runs of one
  format are merged, so that a sentence a word processor cut into runs (spell-check, revision ids) reads as one;
- the whitespace at the ends of the whole text is left out of the unit and comes back as written, with the format
  of the run it was in;
- one format: a plain unit of its text. Several: an HTML fragment (`Unit(markup=True)`) where the dominant format
  (the most characters; the first, of equals) is bare text and each other format's runs are wrapped in an inline
  element that names it, `<span id="r2">...</span>`, or `<a id="h3">...</a>` for a link; the text is escaped.
- a Point is what a paragraph holds inside a sentence that is not its text: a tab, a run of spaces written as an
  element, a soft line break, a note's anchor. It does not cut the sentence: the unit has it as an empty element,
  `<img id="p4">` (inside the span of the texts either side, where they share a format), which app/html/place.py
  puts after the word aligned to the one before it; a tab, spaces or a line break after a sentence's end (`.`,
  `!`, `?`, `:`, `;`: "Note:\tA dog runs.") is a `<br id="p4">`, which the HTML path keeps between the sentences it
  separates, each translated on its own, as it keeps a page's `<br>` between its lines. Where the source has no
  whitespace on either side of a tab, spaces or a line break, the unit has a space after it, so that the model
  reads two words, not one. A point whose nearest text before it, or after it, has no letter (a list's number or a
  bullet before a tab, a date, a note's anchor at the paragraph's end) cuts the paragraph after all: `cuts()` finds
  them, and the text without a letter is not translated.

Runs.decode() reads a translation back into runs: app/html/place.py placed the tags around the words aligned to the
ones they wrapped and gave them back as written, so each piece of text takes the format its innermost known tag
names, bare text the dominant one; adjacent pieces of one format are merged and empty ones dropped, and the
characters XML cannot hold (control characters) are left out. Each Point comes back exactly once, where the
translation has it (a repeated one is left out, a missing one comes at the end), as the format's own (the element,
moved): the whitespace the translation has beside a tab, spaces or a line break is dropped on a side where the source
had none, and a note's anchor that the source attached to the word before it stays attached.

Builder writes a flow (a paragraph, or an element whose children are a paragraph's content) anew from its
content in order: each item (an element, or text) comes with its chain, the wrappers it sits in (a link, a run,
a span), outer first. Consecutive items of the same wrappers share one copy of them, so content given back in
its own order and chains comes back in the structure it had; the items themselves are moved, never copied.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Generic, TypeVar

from lxml import etree

from app.files import Unit, one_each
from app.segment import worded

K = TypeVar("K", bound=Hashable)
_TEXT = etree._Element.text  # an element's own text: python-docx and python-pptx elements give theirs another meaning
_ID = re.compile(r"[rh](\d+)")
_POINT_ID = re.compile(r"p(\d+)")
_SENTENCE_END = re.compile(r"[.!?:;\u2026\u3002\uff01\uff1f][\"')\]\u00bb\u2019\u201d]*\s*$")
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # no XML file may hold them


@dataclass(eq=False)
class Point:
    """A point of a paragraph inside its text that is not text: it stays in the sentence's unit (the module's
    docstring) and comes back as `item`, the format's own."""

    item: object  # what the format puts back where the translation has the point (its element, its atom)
    kind: str = "space"  # space (a tab, spaces: whitespace), break (a soft line break), anchor (a note's reference)


@dataclass(frozen=True)
class Runs(Generic[K]):
    unit: Unit
    keys: list[K]  # the formats, numbered as the tags name them
    base: int  # the dominant format's number: its text is bare
    lead: tuple[str, int]  # the whitespace before the unit's text and its format's number
    trail: tuple[str, int]
    points: list[Point] = field(default_factory=list)  # numbered as the tags name them
    spaced: list[tuple[bool, bool]] = field(default_factory=list)  # per point: whitespace before it, after it

    def decode(self, translation: str) -> list[tuple[str, K] | Point]:
        """The translation's runs, (text, format), adjacent formats differing, none empty, and its Points, each
        exactly once, in the translation's order."""
        pieces: list[tuple[str | Point, int | None]] = [self.lead]
        if self.unit.markup:
            pieces += self._once(_Fragment(translation, self.base, len(self.keys), self.points).pieces)
        else:
            pieces.append((translation, self.base))
        pieces.append(self.trail)
        pieces = self._respaced(pieces)
        pieces = [(_XML_ILLEGAL.sub("", t), k) if isinstance(t, str) else (t, k) for t, k in pieces]
        return [(text, self.keys[k]) if isinstance(text, str) else text for text, k in _merged(pieces)]

    def _once(self, pieces: list) -> list:
        """Each point exactly once: a repeated one left out, a missing one at the end."""
        seen: set[int] = set()
        out = []
        for t, k in pieces:
            if isinstance(t, Point):
                if id(t) in seen:
                    continue
                seen.add(id(t))
            out.append((t, k))
        return out + [(p, None) for p in self.points if id(p) not in seen]

    def _respaced(self, pieces: list) -> list:
        """The whitespace beside each point as its source had it (the module's docstring)."""
        number = {id(p): i for i, p in enumerate(self.points)}
        for i, (t, _) in enumerate(pieces):
            if not isinstance(t, Point):
                continue
            before, after = self.spaced[number[id(t)]]
            prev = i - 1 if i and isinstance(pieces[i - 1][0], str) else None
            nxt = i + 1 if i + 1 < len(pieces) and isinstance(pieces[i + 1][0], str) else None
            if t.kind == "anchor":
                if not before and prev is not None and pieces[prev][0][-1:].isspace():
                    pieces[prev] = (pieces[prev][0].rstrip(), pieces[prev][1])
                    if nxt is not None and pieces[nxt][0][:1].isalnum():
                        pieces[nxt] = (" " + pieces[nxt][0], pieces[nxt][1])
                continue
            if not before and prev is not None:
                pieces[prev] = (pieces[prev][0].rstrip(), pieces[prev][1])
            if not after and nxt is not None:
                pieces[nxt] = (pieces[nxt][0].lstrip(), pieces[nxt][1])
        return pieces


def encode(runs: Iterable[tuple[str, K] | Point], link: Callable[[K], bool] = lambda key: False) -> Runs[K]:
    """The runs of a stretch of text, and the Points between them, as one unit (`link`: whether a format is a link,
    for the tag's name)."""
    keys: list[K] = []
    numbers: dict[K, int] = {}
    numbered: list[tuple[str | Point, int | None]] = []
    for piece in runs:
        if isinstance(piece, Point):
            numbered.append((piece, None))
            continue
        text, key = piece
        if key not in numbers:
            numbers[key] = len(keys)
            keys.append(key)
        numbered.append((text, numbers[key]))
    pieces = _merged(_spaces_joined(numbered))
    whole = "".join(t for t, _ in pieces if isinstance(t, str))
    if not whole.strip():
        k = next((k for _, k in pieces if k is not None), 0)
        return Runs(Unit(""), keys, k, (whole, k), ("", k))
    first, last = pieces[0], pieces[-1]
    lead: tuple[str, int | None] = ("", None)
    trail: tuple[str, int | None] = ("", None)
    if isinstance(first[0], str):
        lead = (first[0][: len(first[0]) - len(first[0].lstrip())], first[1])
        pieces[0] = (first[0][len(lead[0]) :], first[1])
    if isinstance(last[0], str):
        trail = (last[0][len(last[0].rstrip()) :], last[1])
        pieces[-1] = (pieces[-1][0][: len(pieces[-1][0]) - len(trail[0])], last[1])
    pieces = [p for p in pieces if p[0]]
    chars: Counter[int] = Counter()
    for t, k in pieces:
        if isinstance(t, str):
            chars[k] += len(t)
    base = max(chars, key=chars.__getitem__)  # the first of equals: a Counter keeps the order keys came in
    lead, trail = (lead[0], base if lead[1] is None else lead[1]), (trail[0], base if trail[1] is None else trail[1])
    points = [t for t, _ in pieces if isinstance(t, Point)]
    if len(chars) == 1 and not points:
        return Runs(Unit("".join(t for t, _ in pieces)), keys, base, lead, trail)
    before, after = _texts_around(pieces)
    spaced = [_spacing(pieces, i, before, after) for i, (t, _) in enumerate(pieces) if isinstance(t, Point)]
    return Runs(Unit(_fragment(pieces, keys, base, link), markup=True), keys, base, lead, trail, points, spaced)


def cuts(items: list[str | Point | None]) -> set[int]:
    """The points that cut a paragraph after all, by their index in `items`, a paragraph's content in order: per item
    its text, its Point, or None for what cuts it (anything else: ""). Those whose nearest text before them, or after
    them, back to a cut (blank text and other points passed over), has no letter, or that have none."""
    bounds = [i for i, x in enumerate(items) if not isinstance(x, str)]
    groups = ["".join(items[a + 1 : b]) for a, b in zip([-1, *bounds], [*bounds, len(items)], strict=True)]
    before, after, state = [False] * len(bounds), [False] * len(bounds), False
    for n, i in enumerate(bounds):  # groups[n] is the text before bounds[n], groups[n + 1] that after it
        state = worded(groups[n]) if groups[n].strip() else state
        before[n], state = state, state and items[i] is not None
    state = False
    for n in range(len(bounds) - 1, -1, -1):
        state = worded(groups[n + 1]) if groups[n + 1].strip() else state
        after[n], state = state, state and items[bounds[n]] is not None
    return {i for n, i in enumerate(bounds) if isinstance(items[i], Point) and not (before[n] and after[n])}


def _fragment(pieces: list, keys: list, base: int, link: Callable) -> str:
    """The pieces as an HTML fragment: each format's texts in its element (the dominant one's bare), each point an
    empty element (in the element of the texts either side where they share a format)."""
    before, after = _texts_around(pieces)
    formats = [  # per piece, the format whose element it is in
        k if k is not None else pieces[before[i]][1] if 0 <= before[i] < after[i] < len(pieces)
        and pieces[before[i]][1] == pieces[after[i]][1] else base
        for i, (_, k) in enumerate(pieces)
    ]  # fmt: skip
    out, spaced_after, number, last = [], False, 0, ""  # last: the last text with more than whitespace
    for i, ((t, _), k) in enumerate(zip(pieces, formats, strict=True)):
        if i == 0 or k != formats[i - 1]:
            if i and formats[i - 1] != base:
                out.append("</a>" if link(keys[formats[i - 1]]) else "</span>")
            if k != base:
                out.append(f'<a id="h{k}">' if link(keys[k]) else f'<span id="r{k}">')
        if isinstance(t, str):
            out.append(html.escape((" " if spaced_after and not t[:1].isspace() else "") + t, quote=False))
            spaced_after, last = False, t if t.strip() else last
            continue
        line = t.kind != "anchor" and _SENTENCE_END.search(last)
        out.append(f'<br id="p{number}">' if line else f'<img id="p{number}">')
        if line:
            spaced_after = False  # the line break is the unit's "\n"
        elif t.kind != "anchor" and not any(_spacing(pieces, i, before, after)):
            spaced_after = True
        number += 1
    if formats and formats[-1] != base:
        out.append("</a>" if link(keys[formats[-1]]) else "</span>")
    return "".join(out)


def _texts_around(pieces: list) -> tuple[list[int], list[int]]:
    """Per piece, the index of the nearest text before it (-1 for none) and after it (len(pieces) for none)."""
    before, after, b, a = [], [0] * len(pieces), -1, len(pieces)
    for i, (t, _) in enumerate(pieces):
        before.append(b)
        b = i if isinstance(t, str) else b
    for i in range(len(pieces) - 1, -1, -1):
        after[i] = a
        a = i if isinstance(pieces[i][0], str) else a
    return before, after


def _spacing(pieces: list, i: int, before: list[int], after: list[int]) -> tuple[bool, bool]:
    """Whether the source has whitespace right before piece i, and right after it (the ends count as whitespace)."""
    b = pieces[before[i]][0] if before[i] >= 0 else " "
    a = pieces[after[i]][0] if after[i] < len(pieces) else " "
    return b[-1:].isspace(), a[:1].isspace()


def _spaces_joined(pieces: list) -> list:
    """Whitespace-only pieces in the format of the piece before them (of the first with text, at the start)."""
    with_text = [k for t, k in pieces if isinstance(t, str) and t.strip()]
    out, before = [], with_text[0] if with_text else None
    for t, k in pieces:
        if not isinstance(t, str):
            out.append((t, k))
            continue
        if t.strip():
            before = k
        out.append((t, k) if t.strip() or before is None else (t, before))
    return out


def _merged(pieces: list) -> list:
    out: list = []
    for text, k in pieces:
        if not text:
            continue
        if out and out[-1][1] == k and isinstance(text, str) and isinstance(out[-1][0], str):
            out[-1] = (out[-1][0] + text, k)
        else:
            out.append((text, k))
    return out


def rewritten(stretches: Iterable, translations: list[str], units: list[Unit]) -> dict:
    """The stretches to write anew, by the paragraph (`paragraph`) they are in and then their first item (`first`),
    each with its translation read back into runs: only those whose translation is not their own text."""
    one_each(units, translations)
    changed: dict = {}
    for s, text in zip(stretches, translations, strict=True):
        if text != s.runs.unit.text:
            changed.setdefault(s.paragraph, {})[s.first] = (s, s.runs.decode(text))
    return changed


class _Fragment(HTMLParser):
    """A translated fragment's text, each piece with the number of the innermost tag around it that names a format,
    and its points, (Point, None)."""

    def __init__(self, fragment: str, base: int, count: int, points: list[Point]):
        super().__init__(convert_charrefs=True)
        self.count, self.points, self.open, self.pieces = count, points, [(None, base)], []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag in ("img", "br"):
            m = _POINT_ID.fullmatch(dict(attrs).get("id") or "")
            if m and int(m[1]) < len(self.points):
                self.pieces.append((self.points[int(m[1])], None))
        elif tag in ("span", "a"):
            m = _ID.fullmatch(dict(attrs).get("id") or "")
            k = int(m[1]) if m and int(m[1]) < self.count else self.open[-1][1]
            self.open.append((tag, k))

    def handle_endtag(self, tag):
        for i in range(len(self.open) - 1, 0, -1):
            if self.open[i][0] == tag:
                del self.open[i:]
                return

    def handle_data(self, data):
        self.pieces.append((data, self.open[-1][1]))


class Builder:
    """A flow's content written anew, item by item, each in its chain of wrappers (see the module's docstring)."""

    def __init__(self, flow: etree._Element, clone: Callable[[etree._Element], etree._Element]):
        self.flow, self.clone = flow, clone
        self.root = flow.makeelement(flow.tag)
        self.open: list[tuple[etree._Element | None, etree._Element]] = [(None, self.root)]

    def _into(self, chain: tuple, fresh: bool) -> etree._Element:
        k = 0
        while k < len(chain) and k + 1 < len(self.open) and self.open[k + 1][0] is chain[k]:
            k += 1
        if fresh and chain and k == len(chain):
            k -= 1  # a new copy of the innermost wrapper, for a format that allows one text a run
        del self.open[k + 1 :]
        for source in chain[k:]:
            copy = self.clone(source)
            self.open[-1][1].append(copy)
            self.open.append((source, copy))
        return self.open[-1][1]

    def element(self, chain: tuple, item: etree._Element, fresh: bool = False) -> None:
        item.tail = None  # the text after it is an item of its own
        self._into(chain, fresh).append(item)

    def text(self, chain: tuple, text: str) -> None:
        into = self._into(chain, False)
        if len(into):
            into[-1].tail = (into[-1].tail or "") + text
        else:
            _TEXT.__set__(into, (_TEXT.__get__(into) or "") + text)

    def stretch(self, atoms: list, pieces: list, chains: dict, formatted: Callable[[tuple], object],
                put: Callable[[tuple, str], None]) -> None:  # fmt: skip
        """A stretch's atoms (their `kind`: start, end; their `point`, `chain` and `item`) and its translation's
        pieces (text with its format's key, and Points): the stretch's starts, then each piece, then its ends. Text
        after a point goes on in the point's chain where that has its format (`formatted`), else in its format's
        (`chains`); `put` writes a text into a chain."""
        for a in atoms:
            if a.kind == "start":
                self.element((), a.item)
        around = {id(a.point): a.chain for a in atoms if a.point}
        chain: tuple = ()  # the last point's
        for piece in pieces:
            if isinstance(piece, Point):
                chain = around[id(piece)]
                self.element(chain, piece.item)
                continue
            text, key = piece
            put(chain if chain and formatted(chain) == key else chains[key], text)
        for a in atoms:
            if a.kind == "end":
                self.element((), a.item)

    def done(self) -> None:
        """Put the content written in place of the flow's own."""
        for child in list(self.flow):
            self.flow.remove(child)
        _TEXT.__set__(self.flow, _TEXT.__get__(self.root))
        for child in list(self.root):
            self.flow.append(child)
