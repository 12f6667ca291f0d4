"""A paragraph's formatting runs as one unit (DOCX, PPTX, ODT, rich-text cells of XLSX), and back.

A run is a piece of text with a formatting key: anything hashable that tells two formats apart (a run's properties,
the link around it). encode() reads the runs of a stretch of text that nothing else interrupts (the formats cut
paragraphs at tabs, breaks, fields, drawings: see their docstrings):
- whitespace-only runs take the format of the run before them (after them, at the start), and adjacent runs of one
  format are merged, so that a sentence a word processor cut into runs (spell-check, revision ids) reads as one;
- the whitespace at the ends of the whole text is left out of the unit and comes back as written, with the format
  of the run it was in;
- one format: a plain unit of its text. Several: an HTML fragment (`Unit(markup=True)`) where the dominant format
  (the most characters; the first, of equals) is bare text and each other format's runs are wrapped in an inline
  element that names it, `<span id="r2">...</span>`, or `<a id="h3">...</a>` for a link; the text is escaped.

Runs.decode() reads a translation back into runs: app/html/place.py placed the tags around the words aligned to the
ones they wrapped and gave them back as written, so each piece of text takes the format its innermost known tag
names, bare text the dominant one; adjacent pieces of one format are merged and empty ones dropped, and the
characters XML cannot hold (control characters) are left out.

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
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Generic, TypeVar

from lxml import etree

from app.files import Unit, one_each

K = TypeVar("K", bound=Hashable)
_TEXT = etree._Element.text  # an element's own text: python-docx and python-pptx elements give theirs another meaning
_ID = re.compile(r"[rh](\d+)")
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # no XML file may hold them


def worth(text: str) -> bool:
    """Whether a text has a letter in it: numbers, dates and punctuation alone are not translated."""
    return any(c.isalpha() for c in text)


@dataclass(frozen=True)
class Runs(Generic[K]):
    unit: Unit
    keys: list[K]  # the formats, numbered as the tags name them
    base: int  # the dominant format's number: its text is bare
    lead: tuple[str, int]  # the whitespace before the unit's text and its format's number
    trail: tuple[str, int]

    def decode(self, translation: str) -> list[tuple[str, K]]:
        """The translation's runs: (text, format), adjacent formats differing, none empty."""
        pieces: list[tuple[str, int]] = [self.lead]
        if self.unit.markup:
            pieces += _Fragment(translation, self.base, len(self.keys)).pieces
        else:
            pieces.append((translation, self.base))
        pieces.append(self.trail)
        return [(text, self.keys[k]) for text, k in _merged([(_XML_ILLEGAL.sub("", t), k) for t, k in pieces])]


def encode(runs: Iterable[tuple[str, K]], link: Callable[[K], bool] = lambda key: False) -> Runs[K]:
    """The runs of a stretch of text as one unit (`link`: whether a format is a link, for the tag's name)."""
    keys: list[K] = []
    numbers: dict[K, int] = {}
    numbered: list[tuple[str, int]] = []
    for text, key in runs:
        if key not in numbers:
            numbers[key] = len(keys)
            keys.append(key)
        numbered.append((text, numbers[key]))
    pieces = _merged(_spaces_joined(numbered))
    whole = "".join(t for t, _ in pieces)
    if not whole.strip():
        k = pieces[0][1] if pieces else 0
        return Runs(Unit(""), keys, k, (whole, k), ("", k))
    first, last = pieces[0], pieces[-1]
    lead = (first[0][: len(first[0]) - len(first[0].lstrip())], first[1])
    trail = (last[0][len(last[0].rstrip()) :], last[1])
    pieces[0] = (first[0][len(lead[0]) :], first[1])
    pieces[-1] = (pieces[-1][0][: len(pieces[-1][0]) - len(trail[0])], last[1])
    pieces = [p for p in pieces if p[0]]
    chars: Counter[int] = Counter()
    for t, k in pieces:
        chars[k] += len(t)
    base = max(chars, key=chars.__getitem__)  # the first of equals: a Counter keeps the order keys came in
    if len(chars) == 1:
        return Runs(Unit("".join(t for t, _ in pieces)), keys, base, lead, trail)
    fragment = []
    for t, k in pieces:
        escaped = html.escape(t, quote=False)
        if k == base:
            fragment.append(escaped)
        elif link(keys[k]):
            fragment.append(f'<a id="h{k}">{escaped}</a>')
        else:
            fragment.append(f'<span id="r{k}">{escaped}</span>')
    return Runs(Unit("".join(fragment), markup=True), keys, base, lead, trail)


def _spaces_joined(pieces: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Whitespace-only pieces in the format of the piece before them (of the first with text, at the start)."""
    with_text = [k for t, k in pieces if t.strip()]
    out, before = [], with_text[0] if with_text else None
    for t, k in pieces:
        if t.strip():
            before = k
        out.append((t, k) if t.strip() or before is None else (t, before))
    return out


def _merged(pieces: list[tuple[str, int]]) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for text, k in pieces:
        if not text:
            continue
        if out and out[-1][1] == k:
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
    """A translated fragment's text, each piece with the number of the innermost tag around it that names a format."""

    def __init__(self, fragment: str, base: int, count: int):
        super().__init__(convert_charrefs=True)
        self.count, self.open, self.pieces = count, [(None, base)], []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag in ("span", "a"):
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

    def done(self) -> None:
        """Put the content written in place of the flow's own."""
        for child in list(self.flow):
            self.flow.remove(child)
        _TEXT.__set__(self.flow, _TEXT.__get__(self.root))
        for child in list(self.root):
            self.flow.append(child)
