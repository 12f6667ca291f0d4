"""HTML for /translate's format "html": the units of a page to translate, and the page with their translations.

parse() reads a page or a fragment with the standard library's HTMLParser and keeps every character of it: what
is not translated comes back byte for byte (tags as written, comments, doctype, entities, scripts, styles).

Translated, one unit each:
- the text flowing in a block-level element (p, li, td, h1, div, title, option, button, label: any element that
  is not inline) with the inline elements in it (a, b, i, em, strong, span, small, sub, sup, mark, abbr, ...) as
  spans of that text. Entities are decoded; the whitespace at its ends is left out of the unit and comes back as
  written, and so do the tags around the whole text. A flow with no text but whitespace is not a unit. An inline
  element holding a block (`<a><h3>..</h3></a>`) is a block itself.
- the attributes alt, title, placeholder and aria-label (plain text) of translated elements.

Not translated: script, style, textarea, pre, code, kbd, samp, var, svg, math, template, and elements with
translate="no" or the class notranslate (what Google and LibreTranslate honour), attributes included;
translate="yes" opts back in. pre is kept because it mostly holds code listings (`<pre translate="yes">` for
verse). Such an element inside a block is kept as written: code, kbd, samp, var and inline elements with
translate="no" keep their text in the unit (the model reads the whole sentence) and replace its translation;
script, style, img, input, comments and the like are empty spans. `<br>` is a "\\n" in the unit's text: split
into lines (app/segment.py), the translation's n-th line break is where the source's n-th (`<br>` or a newline
of the source) goes.

Putting back (render's alignment: per target token its span and the span of the source token it aligns to): a
tag wraps the target tokens aligned to the text it wrapped, widened to whole words. It stays inside the tag it
was in and off its siblings: crossing a sibling, it keeps its longest part no sibling holds; with no aligned
token, or no alignment at all, it takes the stretch of its parent no sibling holds nearest its place (so a lone
tag wraps the whole translation), else it is empty at the nearer end. An empty element follows the word aligned
to the one before it, or goes to the nearer end. A kept element replaces its text where the translation has that
text (the same occurrence), else the target aligned to it alone; else it goes in before that target, or at the
nearer end. No text is dropped and every tag comes back as written. A unit whose translation is its own text
comes back exactly as written.

Protected spans (parse's `protect`, app/protect.py): in the text between tags, each group of spans (placeholders,
URLs, ...) becomes a kept empty element whose markup is the spans as written, with the whitespace on one side of
them; the unit's text reads on without them, so the model never sees them, and each is placed where app/protect.py
puts a span (after the translation of the word before it, in front of the word after it, or at either end), then
written once as it was. A span that markup or an entity's characters cut is left in the text.

Reading and putting back keep their own stacks, not Python's, so any depth of nesting works. Their work grows with
the page's characters times a logarithm (the ranges siblings hold are kept sorted and bisected, the alignment is
indexed once per unit), but for two things: each distinct kept text is searched for in its unit's text and
translation, and a tag aligned to target words far apart looks at each stretch between them that no sibling holds.

MalformedHtml says what and where (line:column, from 1): an end tag closing nothing open, or closing an element
while another inside it is open (crossing tags); an element never closed; an unterminated tag or comment; a
declaration the standard library's parser cannot read (`<![` without a name). Not errors: void elements, `<x/>` (an
empty element), end tags HTML lets one omit (p, li, dt, dd, option, tr, td, th, thead, tbody, head, body, html, ...)
and fragments.
"""

from __future__ import annotations

import html
import re
import secrets
import unicodedata
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from heapq import heapify, heappop
from html.parser import HTMLParser, attrfind_tolerant, tagfind_tolerant
from itertools import accumulate
from operator import itemgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.protect import Protect

_WS = " \t\n\r\f"
_VOID = set("area base br col embed hr img input link meta param source track wbr".split())
_INLINE = set("a abbr acronym b bdi bdo big cite data del dfn em font i ins mark nobr q s small span".split())
_INLINE |= set("strike strong sub sup time tt u".split())
_KEPT_TEXT = {"code", "kbd", "samp", "var"}  # kept inline elements whose text is part of the unit
_KEPT_EMPTY = {"script", "style", "textarea", "svg", "math", "template"}
_IN_FLOW = _INLINE | _KEPT_TEXT | _KEPT_EMPTY | _VOID - {"hr"}
_KEPT = _KEPT_TEXT | _KEPT_EMPTY | {"pre"}
_ATTRIBUTES = {"alt", "title", "placeholder", "aria-label"}
_CELL = {"td", "th", "tr", "tbody", "thead", "tfoot"}
_P_CLOSERS = set("address article aside blockquote details dialog div dl fieldset figcaption figure footer".split())
_P_CLOSERS |= set("form h1 h2 h3 h4 h5 h6 header hgroup hr main menu nav ol p pre section table ul li dd dt".split())
_P_CLOSERS |= _CELL
_CLOSED_BY = {  # the elements whose end tag may be left out, and the start tags that close them
    "p": _P_CLOSERS, "li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "option": {"option", "optgroup"},
    "optgroup": {"optgroup"}, "tr": _CELL - {"td", "th"}, "td": _CELL, "th": _CELL, "thead": {"tbody", "tfoot"},
    "tbody": {"tbody", "tfoot"}, "tfoot": {"tbody"}, "colgroup": _CELL | {"colgroup"}, "head": {"body"},
}  # fmt: skip
_OPTIONAL_END = {*_CLOSED_BY, "html", "body"}
_PIECES = re.compile(r"&(?:#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)|[ \t\n\r\f]+|[^& \t\n\r\f]+|&")
_END = itemgetter(1)  # a range's end: the key that bisects sorted disjoint ranges by where they end

Alignment = list[tuple[tuple[int, int], tuple[int, int]]]  # per target token: (its span, its source token's span)


class MalformedHtml(ValueError):
    """HTML that cannot be read back as written: what is wrong and where."""


@dataclass(frozen=True)
class InlineTag:
    name: str  # the element's tag name, lower case ("#comment" for a comment)
    start: int  # [start, end) of the unit's text inside it
    end: int
    kept: bool  # comes back as written (code, br, script, comment, ...) in place of its text's translation


@dataclass(frozen=True)
class Unit:
    text: str  # plain text to translate: entities decoded, without the whitespace at its ends
    tags: tuple[InlineTag, ...] = ()  # the inline elements in it, outer first; none for an attribute


@dataclass(eq=False)
class _Node:
    """An inline element of a unit, or an empty or kept one (a leaf)."""

    name: str
    start: list  # its start tag as pieces (str or _Attr); a kept element's whole markup
    kept: bool = False
    text: str = ""  # a kept element's text in the unit
    end: str = ""  # its end tag as written
    children: list[_Node] = field(default_factory=list)
    a: int = 0  # [a, b) of the unit's text inside it
    b: int = 0
    protect: Protect | None = None  # a protected span's leaf: what places it (app/protect.py)
    forward: bool = False  # and whether it goes in front of the word after it

    @property
    def ranged(self) -> bool:
        return bool(self.text) if self.kept else self.a < self.b


@dataclass(eq=False)
class _Attr:
    unit: Unit
    at: int
    raw: str  # the value as written, quotes included
    quote: str
    lead: str  # the value's whitespace around the unit's text
    trail: str
    index: int = -1

    def render(self, translations: list[str], alignments: list) -> str:
        return self.written(translations[self.index])

    def written(self, text: str) -> str:
        """The value as the page writes it, with `text` in place of the unit's."""
        if text == self.unit.text:
            return self.raw
        q = self.quote or '"'
        value = html.escape(self.lead + text + self.trail, quote=False).replace(q, "&quot;" if q == '"' else "&#x27;")
        return q + value + q


@dataclass(eq=False)
class _Block:
    unit: Unit
    at: int
    raw: list  # the flow as written
    prefix: list  # markup and whitespace before the unit's text, and after it
    suffix: list
    roots: list[_Node]  # the inline elements inside the unit's text
    index: int = -1

    def render(self, translations: list[str], alignments: list) -> str:
        text, source = translations[self.index], self.unit.text
        if text == source:
            return _join(self.raw, translations, alignments)
        placed = _place(self.roots, _Translation(source, text, alignments[self.index])) if self.roots else {}
        return _join(self.prefix + _emit(self.roots, text, placed) + self.suffix, translations, alignments)


@dataclass(frozen=True)
class HtmlDocument:
    """A parsed page: its units to translate, and the page with their translations put back."""

    units: list[Unit]
    pieces: list = field(repr=False)  # str, _Block and _Attr in page order

    def render(self, translations: list[str], alignments: list[Alignment | None] | None = None) -> str:
        """The page with each unit's translation (and, where given, its alignment to the unit's text)."""
        alignments = [None] * len(self.units) if alignments is None else alignments
        if len(translations) != len(self.units) or len(alignments) != len(self.units):
            raise ValueError(f"{len(self.units)} units, {len(translations)} translations, {len(alignments)} alignments")
        return _join(self.pieces, translations, alignments)

    def parts(self) -> list[str | Part]:
        """The page as markup kept as written and parts to translate one by one (a page too large for one request):
        each block's flow as written, an HTML fragment that translates as the block does in the page, and each
        attribute outside a flow, as plain text. Joining the strings and each part's put(translation) writes the
        page; with each part's own text, as written."""
        own, none = [u.text for u in self.units], [None] * len(self.units)
        return [p if isinstance(p, str) else Part(p, _join(p.raw, own, none) if isinstance(p, _Block) else p.unit.text)
                for p in self.pieces]  # fmt: skip


@dataclass(frozen=True)
class Part:
    """A block's flow or an attribute of a page (HtmlDocument.parts)."""

    piece: _Block | _Attr = field(repr=False)
    text: str  # the flow as written (markup), or the attribute's text (plain)

    @property
    def markup(self) -> bool:
        return isinstance(self.piece, _Block)

    def put(self, translation: str) -> str:
        """The part as the page writes it: a flow's translation as it is (translated as a fragment, its markup as
        written), an attribute's value quoted and escaped."""
        if self.markup:
            return translation
        return self.piece.written(translation)


def parse(page: str, protect: Protect | None = None) -> HtmlDocument:
    """The units of an HTML page or fragment, `protect`'s spans kept aside as written; raises MalformedHtml."""
    return _Reader(page, protect).document


def ignoring(page: str, names: set[str]) -> tuple[str, str]:
    """The page with `translate="no"` and a marker attribute added to the start tag of every element named in
    `names` (lower case; DeepL's ignore_tags) that has no translate attribute of its own, and that marker: after
    translating, removing the marker (`' ' + marker`) gives back the tags as written."""
    marker = f'translate="no" data-nmt-ignored-{secrets.token_hex(6)}'
    found = _StartTags(page, names).found
    out, done = [], 0
    for at in found:
        out += [page[done:at], " ", marker]
        done = at
    return "".join(out) + page[done:], marker


class _StartTags(HTMLParser):
    """Where to add an attribute to the start tags of the elements named: just after each one's name."""

    def __init__(self, page: str, names: set[str]):
        super().__init__(convert_charrefs=True)
        self.names, self.found = names, []
        self.lines = [0] + [m.end() for m in re.finditer("\n", page)]
        self.feed(page)  # not close(): an unterminated tag at the end is the engine's parser's error to report

    def handle_starttag(self, tag, attrs):
        if tag in self.names and not any(name == "translate" for name, _ in attrs):
            line, column = self.getpos()
            name_ends = tagfind_tolerant.match(self.get_starttag_text(), 1).end(1)
            self.found.append(self.lines[line - 1] + column + name_ends)

    handle_startendtag = handle_starttag


def _decoded(raw: str):
    """A run of text with its entities decoded, and the raw offset of any decoded one (None inside an entity)."""
    pieces = [(m[0], html.unescape(m[0]) if m[0][0] == "&" else m[0]) for m in _PIECES.finditer(raw)]
    starts = list(accumulate((len(d) for _, d in pieces), initial=0))
    raw_starts = list(accumulate((len(r) for r, _ in pieces), initial=0))

    def offset(d: int) -> int | None:
        i = bisect_right(starts, d) - 1
        if d == starts[i]:
            return raw_starts[i]
        return None if pieces[i][0][0] == "&" else raw_starts[i] + d - starts[i]

    return "".join(d for _, d in pieces), offset


def _join(pieces: list, translations: list[str], alignments: list) -> str:
    return "".join(p if isinstance(p, str) else p.render(translations, alignments) for p in pieces)


def _letter(c: str) -> bool:
    """A word character of a script that puts spaces between words (not Thai, CJK, ...)."""
    return (c.isalnum() or unicodedata.category(c)[0] == "M") and not ("\u0e00" <= c < "\u1100" or c >= "\u2e80")


class _Extremes:
    """The least (or greatest) of a list's values over any slice of it in O(1): a sparse table."""

    def __init__(self, values: list[int], pick) -> None:
        self.pick, self.levels = pick, [values]  # levels[k][i]: pick over values[i : i + 2**k]
        while 2 ** len(self.levels) <= len(values):
            last, half = self.levels[-1], 2 ** (len(self.levels) - 1)
            self.levels.append([pick(last[i], last[i + half]) for i in range(len(last) - half)])

    def over(self, i: int, j: int) -> int:
        k = (j - i).bit_length() - 1
        return self.pick(self.levels[k][i], self.levels[k][j - 2**k])


class _Translation:
    """A unit's text, its translation and their alignment, indexed once so that each node's question is a bisection."""

    def __init__(self, src: str, tgt: str, alignment: Alignment | None) -> None:
        self.src, self.tgt, self.found, self.anchors = src, tgt, {}, None
        n = len(tgt)
        self.next_text, self.last_text = [n] * (n + 1), [-1] * (n + 1)  # the first non-space from i, the last before i
        for i in range(n - 1, -1, -1):
            self.next_text[i] = self.next_text[i + 1] if tgt[i].isspace() else i
        for i in range(n):
            self.last_text[i + 1] = self.last_text[i] if tgt[i].isspace() else i
        self.pairs = pairs = [(t, s) for t, s in alignment or () if t[0] < t[1] and s[0] < s[1]]
        if not pairs:
            return
        letters = [_letter(c) for c in tgt]
        self.word_start, self.word_end = list(range(n + 1)), list(range(n + 1))  # of the word i is inside of
        for i in range(1, n):
            self.word_start[i] = self.word_start[i - 1] if letters[i - 1] and letters[i] else i
        for i in range(n - 1, 0, -1):
            self.word_end[i] = self.word_end[i + 1] if letters[i - 1] and letters[i] else i
        self.ends = sorted((s[1], t[1]) for t, s in pairs)  # by source end, for the word before an empty element
        self.end_at = [e for e, _ in self.ends]
        self.last_target = _Extremes([t for _, t in self.ends], max)
        self.by_start = sorted(pairs, key=lambda p: p[1][0])  # by source start, each with the furthest end so far
        self.start_at = [s[0] for _, s in self.by_start]
        self.reach = list(accumulate((s[1] for _, s in self.by_start), max))
        self.first_target = _Extremes([t[0] for t, _ in self.by_start], min)
        self.by_target = sorted(pairs, key=lambda p: p[0][0])  # by target start, each with the furthest end so far
        self.target_at = [t[0] for t, _ in self.by_target]
        self.target_reach = list(accumulate((t[1] for t, _ in self.by_target), max))

    def trim(self, x: int, y: int) -> tuple[int, int]:
        """tgt[x:y] without the whitespace at its ends, or (x, x) when it has no text."""
        first = self.next_text[min(max(x, 0), len(self.tgt))]
        end = min(max(y, 0), len(self.tgt))
        return (first, self.last_text[end] + 1) if first < end else (x, x)

    def snap(self, x: int, y: int) -> tuple[int, int]:
        """[x, y) widened to whole words, without whitespace at its ends."""
        n = len(self.tgt)
        return self.trim(self.word_start[x] if 0 < x < n else x, self.word_end[y] if 0 < y < n else y)

    def occurrence(self, text: str, at: int) -> tuple[int, int] | None:
        """Where the translation has a kept text: the occurrence numbered as the source's at `at`."""
        if text not in self.found:
            literal = re.escape(text)  # first, for the regex engine's fast search; then: not inside a word
            pattern = literal + (f"(?<!\\w{literal})" if re.match(r"\w", text) else "")
            pattern += "(?!\\w)" if re.search(r"\w$", text) else ""
            ours = {m.start(): i for i, m in enumerate(re.finditer(pattern, self.src))}  # its number by where it is
            theirs = [m.span() for m in re.finditer(pattern, self.tgt)]
            self.found[text] = (ours, theirs) if len(ours) == len(theirs) else ({}, [])
        index, theirs = self.found[text]
        return theirs[index[at]] if at in index else None

    def straddling(self, x: int):
        """The pairs whose source span has x strictly inside."""
        j = bisect_left(self.start_at, x) - 1
        while j >= 0 and self.reach[j] > x:
            if self.by_start[j][1][1] > x:
                yield self.by_start[j]
            j -= 1

    def stranger(self, x: int, y: int, a: int, b: int) -> bool:
        """Whether a target token in (x, y) is aligned outside [a, b) of the source."""
        j = bisect_left(self.target_at, y) - 1
        while j >= 0 and self.target_reach[j] > x:
            t, s = self.by_target[j]
            if x < t[1] and not (s[0] < b and a < s[1]):
                return True
            j -= 1
        return False

    def wanted(self, n: _Node) -> tuple[int, int] | None:
        """Where a node goes by its text or by the alignment: a range of tgt, a position (x == y) or None."""
        if n.protect is not None:  # a protected span: where app/protect.py puts one
            self.anchors = self.anchors or n.protect.anchors(self.src, self.tgt, self.pairs)
            x = self.anchors.place(n.a, n.a, n.forward)
            return x, x
        if n.kept and n.text and (found := self.occurrence(n.text, n.a)):
            return found
        if not self.pairs:
            return None
        a, b = n.a, n.b
        if not n.ranged:
            i = bisect_right(self.end_at, a)
            x = self.snap(self.ends[i - 1][1], self.ends[i - 1][1])[1] if i else 0
            return x, x
        # the pairs aligned to [a, b): those starting in it (a range of by_start), those ending in it (of ends), and
        # those around a or b, cut in proportion
        i, j = bisect_left(self.start_at, a), bisect_left(self.start_at, b)
        firsts = [_share(t, s, a, b)[0] for t, s in self.straddling(a)]
        firsts += [self.first_target.over(i, j)] if i < j else []
        if not firsts:
            return None
        i, j = bisect_right(self.end_at, a), bisect_right(self.end_at, b)
        lasts = [_share(t, s, a, b)[1] for t, s in self.straddling(b)]
        lasts += [self.last_target.over(i, j)] if i < j else []
        x, y = self.snap(min(firsts), max(lasts))
        if n.kept and self.stranger(x, y, a, b):
            return x, x  # a kept element replaces no other word's translation: it goes in before them
        return x, y


def _share(t: tuple[int, int], s: tuple[int, int], a: int, b: int) -> tuple[int, int]:
    """The part of target span t that its source span s gives to [a, b) of the source, in proportion."""
    scale = (t[1] - t[0]) / (s[1] - s[0])
    return t[0] + round((max(a, s[0]) - s[0]) * scale), t[1] - round((s[1] - min(b, s[1])) * scale)


class _Free:
    """What sibling nodes hold of their parent's [lo, hi) of the translation, and the text between: both sorted and
    disjoint (the text as stretches trimmed of whitespace, only those with text), so each question is a bisection."""

    def __init__(self, tr: _Translation, lo: int, hi: int) -> None:
        self.tr, self.held, self.ranked = tr, [], None
        g = tr.trim(lo, hi)
        self.gaps = [g] if g[0] < g[1] else []

    def hold(self, n: _Node, r: tuple[int, int] | None, placed: dict) -> None:
        """Give n the range r (one no sibling holds), if there is one."""
        if r is None:
            return
        placed[n] = r
        insort(self.held, r)
        i = bisect_right(self.gaps, r[0], key=_END)
        if i < len(self.gaps) and self.gaps[i][0] < r[1]:
            g = self.gaps.pop(i)
            self.gaps[i:i] = [p for p in (self.tr.trim(g[0], r[0]), self.tr.trim(r[1], g[1])) if p[0] < p[1]]

    def taken(self, x: int, y: int) -> bool:
        """Whether a sibling holds some of (x, y)."""
        i = bisect_right(self.held, x, key=_END)
        return i < len(self.held) and self.held[i][0] < y

    def after(self, x: int) -> int:
        """The end of the range a sibling holds around x, else x."""
        i = bisect_left(self.held, (x,)) - 1
        return self.held[i][1] if i >= 0 and self.held[i][1] > x else x

    def between(self, x: float, y: float) -> list[tuple[int, int]]:
        """The stretches of text no sibling holds that overlap (x, y)."""
        return self.gaps[bisect_right(self.gaps, x, key=_END) : bisect_left(self.gaps, (y,))]

    def longest(self, x: int, y: int) -> tuple[int, int] | None:
        """The longest text of [x, y) that no sibling holds (the first of equals)."""
        best = None
        for g in self.between(x, y):
            g = self.tr.trim(max(g[0], x), min(g[1], y))
            if g[0] < g[1] and (best is None or g[1] - g[0] > best[1] - best[0]):
                best = g
        return best

    def nearest(self, u: float, v: float) -> tuple[int, int] | None:
        """The stretch of text no sibling holds that overlaps [u, v] the most (then the longest, the first of equals),
        else the longest. Asked once the ranges by alignment are held: each answer is a whole stretch."""
        if self.ranked is None:
            self.ranked = [(g[0] - g[1], *g) for g in self.gaps]  # the longest first, then the first
            heapify(self.ranked)
        best, key = None, None
        for g in self.between(u, v) if u < v else ():
            score = (min(g[1], v) - max(g[0], u), g[1] - g[0])
            if best is None or score > key:
                best, key = g, score
        while best is None and self.ranked:
            g, i = self.ranked[0][1:], bisect_left(self.gaps, self.ranked[0][1:])
            if i < len(self.gaps) and self.gaps[i] == g:
                best = g
            else:
                heappop(self.ranked)  # held since
        return best


def _place(roots: list[_Node], tr: _Translation) -> dict[_Node, tuple[int, int]]:
    """Where each node goes in the translation: a range, or a position (x == y); parents before their children."""
    placed: dict[_Node, tuple[int, int]] = {}
    families = [(roots, 0, len(tr.tgt), 0, len(tr.src))]
    while families:
        nodes, lo, hi, pa, pb = families.pop()
        _place_siblings(nodes, lo, hi, pa, pb, tr, placed)
        families += [(n.children, *placed[n], n.a, n.b) for n in nodes if n.children and not n.kept]
    return placed


def _place_siblings(nodes: list[_Node], lo: int, hi: int, pa: int, pb: int, tr: _Translation, placed: dict) -> None:
    """Target ranges for sibling nodes inside their parent's [lo, hi) of the translation ([pa, pb) of the source)."""
    wanted = {n: tr.wanted(n) for n in nodes}
    free = _Free(tr, lo, hi)
    for n in [n for n in nodes if n.ranged and wanted[n]]:
        x, y = wanted[n]
        if not n.kept:
            free.hold(n, free.longest(max(x, lo), min(y, hi)), placed)
        elif lo <= x < y <= hi and not free.taken(x, y):
            free.hold(n, (x, y), placed)
    scale = (hi - lo) / max(pb - pa, 1)
    for n in [n for n in nodes if n.ranged and not n.kept and wanted[n] is None]:
        free.hold(n, free.nearest(lo + (n.a - pa) * scale, lo + (n.b - pa) * scale), placed)
    for n in [n for n in nodes if n not in placed]:
        x = free.after(min(max(wanted[n][0], lo), hi) if wanted[n] else lo if n.a - pa <= pb - n.b else hi)
        placed[n] = (x, x)


def _emit(roots: list[_Node], tgt: str, placed: dict) -> list:
    """The translation escaped, with the nodes' markup where they were placed."""
    out, at, stack = [], 0, [(roots, 0, len(tgt), "")]  # per element open: its children, the next, its end, end tag
    while stack:
        nodes, i, hi, end = stack.pop()
        if i == 0:
            nodes = sorted(nodes, key=lambda n: (placed[n][0], placed[n][0] < placed[n][1]))
        if i == len(nodes):
            out += [html.escape(tgt[at:hi], quote=False), end]
            at = hi
            continue
        n, (x, y) = nodes[i], placed[nodes[i]]
        out += [html.escape(tgt[at:x], quote=False), *n.start]
        stack.append((nodes, i + 1, hi, end))
        if n.kept:
            at = y
        else:
            at = x
            stack.append((n.children, 0, y, n.end))
    return out


def _translates(name: str, attrs: dict, parent: bool) -> bool:
    """Whether an element's text and attributes are translated (HTML's translate attribute, inherited)."""
    if name in ("script", "style", "textarea") or "notranslate" in (attrs.get("class") or "").split():
        return False
    if "translate" in attrs:
        return (attrs["translate"] or "").strip().lower() != "no"
    return parent and name not in _KEPT


def _raw(item: tuple) -> list:
    """A flow item's pieces as written."""
    return [item[1]] if item[0] == "text" else [item[1].end] if item[0] == "close" else item[1].start


@dataclass(eq=False)
class _Open:
    name: str
    at: int
    translate: bool
    node: _Node | None = None  # its node while in the current flow (or while it is the kept element being read)


class _Reader(HTMLParser):
    """The page as pieces written and units to translate: each event is handled when the next shows its end."""

    def __init__(self, page: str, protect: Protect | None = None):
        super().__init__(convert_charrefs=True)
        self.page, self.pieces, self.units, self.stack, self.protect = page, [], [], [], protect
        self.lines = [0] + [m.end() for m in re.finditer("\n", page)]
        self.pending: tuple | None = None  # the last event: (handler, its arguments, its offset)
        self.flow: list[tuple[str, object, int]] = []  # the current block's text, inline elements and leaves
        self.flowing: list[_Open] = []  # the open elements given a node since the flow began
        self.leaf: _Node | None = None  # the kept element being read, and its text when that is the unit's
        self.leaf_text: list[str] | None = None
        self.stop: int | None = None  # where text is sure to be an error that no later event can change
        try:
            self.feed(page)
            if len(self.rawdata) > 1 and self.rawdata[0] == "<" and not self.cdata_elem:
                # an unterminated tag or comment: close() reads it as text, the error on_text raises with 40
                # characters of it, and would read the rest again from each "<" after it (quadratic: CVE-2025-6069)
                self.stop = len(page) - len(self.rawdata) + 40
            self.close()
        except AssertionError as e:  # how the standard library's parser refuses a declaration, e.g. "<![ x"
            raise MalformedHtml(f"markup the parser could not read at {self.where(self.here)}: {e}") from None
        self.event(None)
        for o in reversed(self.stack):
            if o.name not in _OPTIONAL_END:
                raise MalformedHtml(f"<{o.name}> opened at {self.where(o.at)} is never closed")
        self.end_flow()
        units = sorted(self.units, key=lambda u: u.at)
        for i, u in enumerate(units):
            u.index = i
        self.document = HtmlDocument([u.unit for u in units], self.pieces)

    @property
    def here(self) -> int:
        """Where the parser is in the page."""
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def event(self, handler, *args) -> None:
        at = self.here if handler else len(self.page)
        if self.pending and not (handler == self.pending[0] == self.on_text):
            self.pending[0](*self.pending[1], self.pending[2], self.page[self.pending[2] : at])
            self.pending = None
        if handler and not self.pending:
            self.pending = (handler, args, at)

    def handle_starttag(self, tag, attrs):
        self.event(self.on_start, tag, attrs, self.get_starttag_text(), False)

    def handle_startendtag(self, tag, attrs):
        self.event(self.on_start, tag, attrs, self.get_starttag_text(), True)

    def handle_endtag(self, tag):
        self.event(self.on_end, tag)

    def handle_data(self, data):
        if self.stop is not None and self.here >= self.stop:
            self.event(None)  # on_text raises
        self.event(self.on_text)

    def handle_comment(self, data):
        self.event(self.on_markup)

    handle_decl = handle_pi = unknown_decl = handle_comment

    def where(self, at: int) -> str:
        return f"{self.page.count(chr(10), 0, at) + 1}:{at - self.page.rfind(chr(10), 0, at)}"

    @property
    def zone(self) -> bool:
        return not self.stack or self.stack[-1].translate

    def on_start(self, name: str, attrs: list, start_tag: str, empty: bool, at: int, raw: str) -> None:
        if raw != start_tag and name not in ("script", "style"):  # the parser leaves out an unclosed one's text
            raise MalformedHtml(f"markup the parser could not read at {self.where(at + len(start_tag))}: {raw!r}")
        void = empty or name in _VOID
        if self.leaf:
            self.leaf.start.append(raw)
            self.stack += [] if void else [_Open(name, at, False)]
            return
        if name not in _IN_FLOW:
            self.end_flow()
            while self.stack and name in _CLOSED_BY.get(self.stack[-1].name, ()):
                self.stack.pop()
        zone = self.zone
        own = _translates(name, dict(attrs), zone)
        start = self.attributes(raw, at) if own else [raw]
        if not (zone and name in _IN_FLOW):
            self.pieces += start
            self.stack += [] if void else [_Open(name, at, own)]
        elif name != "br" and own and not void:
            node = _Node(name, start)
            self.flow.append(("open", node, at))
            self.stack.append(_Open(name, at, True, node))
            self.flowing.append(self.stack[-1])
        else:
            leaf = _Node(name, start, kept=name == "br" or not own, text="\n" if name == "br" else "")
            if void:
                self.flow.append(("leaf", leaf, at))
            else:
                self.leaf, self.leaf_text = leaf, None if name in _KEPT_EMPTY else []
                self.stack.append(_Open(name, at, False, leaf))
                self.flowing.append(self.stack[-1])

    def on_end(self, name: str, at: int, raw: str) -> None:
        if raw.index(">") < len(raw) - 1:
            raise MalformedHtml(f"markup the parser could not read at {self.where(at)}: {raw!r}")
        i = next((i for i in reversed(range(len(self.stack))) if self.stack[i].name == name), None)
        if i is None:
            raise MalformedHtml(f"</{name}> at {self.where(at)} closes nothing: no <{name}> is open")
        if inner := next((o for o in reversed(self.stack[i + 1 :]) if o.name not in _OPTIONAL_END), None):
            raise MalformedHtml(
                f"</{name}> at {self.where(at)} closes <{name}> (opened at {self.where(self.stack[i].at)}) while "
                f"<{inner.name}> (opened at {self.where(inner.at)}) is still open: elements must nest"
            )
        closing = self.stack[i]
        if self.leaf:
            self.leaf.start.append(raw)
            if closing.node is self.leaf:
                self.leaf.text = self.leaf.text if self.leaf_text is None else "".join(self.leaf_text)
                self.flow.append(("leaf", self.leaf, closing.at))
                self.leaf = None
        elif closing.node:
            closing.node.end = raw
            self.flow.append(("close", closing.node, at))
        else:
            self.end_flow()
            self.pieces.append(raw)
        closing.node = None  # out of the flow (those above it, with end tags one may omit, are blocks: no nodes)
        del self.stack[i:]

    def on_text(self, at: int, raw: str) -> None:
        if not (self.stack and self.stack[-1].name in ("script", "style")) and (m := re.search("<[a-zA-Z/!?]", raw)):
            bad = raw[m.start() :]
            what = next(w for p, w in [("<!--", "comment"), ("<!", "declaration"), ("<?", "processing instruction"),
                                       ("</", "end tag"), ("<", "start tag")] if bad.startswith(p))  # fmt: skip
            where = self.where(at + m.start())
            raise MalformedHtml(f"unterminated {what} at {where}: {bad[:40]!r} (a tag ends with '>', a comment '-->')")
        if self.leaf:
            self.leaf.start.append(raw)
            if self.leaf_text is not None:
                self.leaf_text.append(html.unescape(raw))
        elif self.zone:
            self.flow.append(("text", raw, at))
        else:
            self.pieces.append(raw)

    def on_markup(self, at: int, raw: str) -> None:
        if self.leaf:
            self.leaf.start.append(raw)
        elif self.flow:
            self.flow.append(("leaf", _Node("#comment", [raw], kept=True), at))
        else:
            self.pieces.append(raw)

    def attributes(self, raw: str, at: int) -> list:
        """A start tag as pieces, its translatable attributes' values as units."""
        pieces, done, k = [], 0, tagfind_tolerant.match(raw, 1).end()
        while k < len(raw) and (m := attrfind_tolerant.match(raw, k)) and m.end() > k:
            value, k = m.group(3), m.end()
            if m.group(1).lower() not in _ATTRIBUTES or not m.group(2) or not value:
                continue
            quote = value[0] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else ""
            text = html.unescape(value[len(quote) : len(value) - len(quote)])
            if core := text.strip(_WS):
                lead = text[: text.index(core)]
                attr = _Attr(Unit(core), at + m.start(3), value, quote, lead, text[len(lead) + len(core) :])
                pieces += [raw[done : m.start(3)], attr]
                self.units.append(attr)
                done = m.end(3)
        return pieces + [raw[done:]]

    def end_flow(self) -> None:
        """The current flow as units; inline elements still open (holding a block) become blocks themselves."""
        cut, segment = {o.node for o in self.flowing if o.node}, []  # those still open: the nodes on the stack
        for token in self.flow:
            if token[0] == "open" and token[1] in cut:
                self.finish(segment)
                self.pieces += token[1].start
                segment = []
            else:
                segment.append(token)
        self.finish(segment)
        for o in self.flowing:
            o.node = None
        self.flow, self.flowing = [], []

    def protected(self, tokens: list) -> list:
        """The flow with the protected spans of its text as kept empty elements: each group of spans, with the
        whitespace on one side of it, as written (app/protect.py's cuts), and a space in its place where two words
        would otherwise meet. A span whose edge falls inside an entity's characters is left in the text."""
        out = []
        for kind, x, at in tokens:
            if kind != "text":
                out.append((kind, x, at))
                continue
            decoded, raw = _decoded(x)
            done = 0
            for cut in self.protect.cuts(decoded):
                a, b = raw(cut.start), raw(cut.end)
                if a is None or b is None or a < done:
                    continue
                out += [("text", x[done:a], at + done)] if done < a else []
                out.append(("leaf", _Node("#protected", [x[a:b]], kept=True, protect=self.protect,
                                          forward=cut.forward), at + a))  # fmt: skip
                out += [("joiner", " ", at + b)] if cut.joiner else []
                done = b
            out += [("text", x[done:], at + done)] if done < len(x) else []
        return out

    def finish(self, tokens: list) -> None:
        """One flow: a unit with its inline tags, or as written when it has no text to translate."""
        items, parts, stack, top, leaves, pos = [], [], [], [], [], 0
        for kind, x, _ in self.protected(tokens) if self.protect else tokens:
            if kind == "text":
                for m in _PIECES.finditer(x):
                    parts.append(html.unescape(m[0]) if m[0][0] == "&" else m[0])
                    items.append(("text", m[0], pos, pos + len(parts[-1])))
                    pos += len(parts[-1])
                continue
            if kind == "joiner":  # a space the unit reads where a protected span came out from between two words
                parts.append(" ")
                items.append(("text", "", pos, pos + 1))
                pos += 1
                continue
            if kind != "close":
                x.a, x.b = pos, pos + len(x.text)
                (stack[-1].children if stack else top).append(x)
            if kind == "open":
                stack.append(x)
            elif kind == "close":
                stack.pop().b = pos
            else:
                parts.append(x.text)
                leaves += [x] if x.text else []
                pos = x.b
            items.append((kind, x))
        text = "".join(parts)
        if not any(i[0] == "text" and text[i[2] : i[3]].strip(_WS) for i in items):
            self.pieces += [p for i in items for p in _raw(i)]
            return
        s, e = len(text) - len(text.lstrip(_WS)), len(text.rstrip(_WS))
        for n in leaves:  # a kept element is not cut
            s, e = n.a if n.a < s < n.b else s, n.b if n.a < e < n.b else e
        side, core, roots = {}, [], []
        todo = [(n, False) for n in reversed(top)]  # outer first, each node's children before its next sibling
        while todo:  # each node before the unit's text, after it, around it (wrap) or in it (core, spans relative)
            n, inside = todo.pop()
            if inside or not (n.b <= s or n.a >= e or n.a <= s and n.b >= e and not n.kept):
                side[n] = "core"
                n.a, n.b = min(max(n.a - s, 0), e - s), min(max(n.b - s, 0), e - s)
                core.append(n)
                roots.extend([] if inside else [n])
            else:
                side[n] = "pre" if n.b <= s else "post" if n.a >= e else "wrap"
            todo += [(c, side[n] == "core") for c in reversed(n.children)]
        prefix, suffix = [], []
        for i in items:
            where = ("pre" if i[3] <= s else "post" if i[2] >= e else "core") if i[0] == "text" else side[i[1]]
            if where == "pre" or where == "wrap" and i[0] == "open":
                prefix += _raw(i)
            elif where in ("post", "wrap"):
                suffix += _raw(i)
        unit = Unit(text[s:e], tuple(InlineTag(n.name, n.a, n.b, n.kept) for n in core))
        block = _Block(unit, tokens[0][2], [p for i in items for p in _raw(i)], prefix, suffix, roots)
        self.pieces.append(block)
        self.units.append(block)
