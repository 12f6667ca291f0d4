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

MalformedHtml says what and where (line:column, from 1): an end tag closing nothing open, or closing an element
while another inside it is open (crossing tags); an element never closed; an unterminated tag or comment. Not
errors: void elements, `<x/>` (an empty element), end tags HTML lets one omit (p, li, dt, dd, option, tr, td,
th, thead, tbody, head, body, html, ...) and fragments.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser, attrfind_tolerant, tagfind_tolerant

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
_CONTENT = re.compile(r"\S(?:.*\S)?", re.DOTALL)

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
        text = translations[self.index]
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
        placed: dict[_Node, tuple[int, int]] = {}
        _place(self.roots, 0, len(text), 0, len(source), (source, text, alignments[self.index]), placed)
        core = _emit(self.roots, 0, len(text), text, placed)
        return _join(self.prefix + core + self.suffix, translations, alignments)


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


def parse(page: str) -> HtmlDocument:
    """The units of an HTML page or fragment; raises MalformedHtml."""
    return _Reader(page).document


def _join(pieces: list, translations: list[str], alignments: list) -> str:
    return "".join(p if isinstance(p, str) else p.render(translations, alignments) for p in pieces)


def _letter(c: str) -> bool:
    """A word character of a script that puts spaces between words (not Thai, CJK, ...)."""
    return (c.isalnum() or unicodedata.category(c)[0] == "M") and not ("\u0e00" <= c < "\u1100" or c >= "\u2e80")


def _snap(tgt: str, x: int, y: int) -> tuple[int, int]:
    """[x, y) widened to whole words, without whitespace at its ends."""
    while 0 < x < len(tgt) and _letter(tgt[x - 1]) and _letter(tgt[x]):
        x -= 1
    while 0 < y < len(tgt) and _letter(tgt[y - 1]) and _letter(tgt[y]):
        y += 1
    return _trim(tgt, x, y)


def _trim(tgt: str, x: int, y: int) -> tuple[int, int]:
    m = _CONTENT.search(tgt, x, y)
    return m.span() if m else (x, x)


def _occurrence(text: str, at: int, src: str, tgt: str) -> tuple[int, int] | None:
    """Where the translation has a kept text: the occurrence numbered as the source's at `at`."""
    pattern = re.escape(text)
    pattern = ("(?<!\\w)" if re.match(r"\w", text) else "") + pattern + ("(?!\\w)" if re.search(r"\w$", text) else "")
    ours, theirs = [m.start() for m in re.finditer(pattern, src)], [m.span() for m in re.finditer(pattern, tgt)]
    return theirs[ours.index(at)] if len(ours) == len(theirs) and at in ours else None


def _wanted(n: _Node, src: str, tgt: str, alignment: Alignment | None) -> tuple[int, int] | None:
    """Where a node goes by its text or by the alignment: a range of tgt, a position (x == y) or None."""
    if n.kept and n.text and (found := _occurrence(n.text, n.a, src, tgt)):
        return found
    pairs = [(t, s) for t, s in alignment or () if t[0] < t[1] and s[0] < s[1]]
    if not pairs:
        return None
    if not n.ranged:
        ends = [(s[1], t[1]) for t, s in pairs if s[1] <= n.a]
        x = _snap(tgt, max(ends)[1], max(ends)[1])[1] if ends else 0
        return x, x
    hits = [_share(t, s, n.a, n.b) for t, s in pairs if s[0] < n.b and n.a < s[1]]
    if not hits:
        return None
    x, y = _snap(tgt, min(t[0] for t in hits), max(t[1] for t in hits))
    if n.kept and any(t[0] < y and x < t[1] for t, s in pairs if not (s[0] < n.b and n.a < s[1])):
        return x, x  # a kept element replaces no other word's translation: it goes in before them
    return x, y


def _share(t: tuple[int, int], s: tuple[int, int], a: int, b: int) -> tuple[int, int]:
    """The part of target span t that its source span s gives to [a, b) of the source, in proportion."""
    scale = (t[1] - t[0]) / (s[1] - s[0])
    return t[0] + round((max(a, s[0]) - s[0]) * scale), t[1] - round((s[1] - min(b, s[1])) * scale)


def _place(nodes: list[_Node], lo: int, hi: int, pa: int, pb: int, texts: tuple, placed: dict) -> None:
    """Target ranges for sibling nodes inside their parent's [lo, hi) of the translation ([pa, pb) of the source)."""
    held: list[tuple[int, int]] = []
    wanted = {n: _wanted(n, *texts) for n in nodes}

    def hold(n: _Node, x: int, y: int, aim: tuple[float, float] | None = None) -> None:
        """Give n the part of [x, y) no sibling holds nearest aim (else the longest), if there is one."""
        gaps, at, aim = [], x, aim or (x, x)
        for p, q in sorted(r for r in held if r[0] < y and x < r[1]):
            gaps.append((at, p))
            at = max(at, q)
        near = max(
            (_trim(texts[1], *g) for g in gaps + [(at, y)]),
            key=lambda g: (max(0, min(g[1], aim[1]) - max(g[0], aim[0])), g[1] - g[0]),
        )
        if near[0] < near[1]:
            placed[n] = near
            held.append(near)

    for n in [n for n in nodes if n.ranged and wanted[n]]:
        x, y = wanted[n]
        if not n.kept:
            hold(n, max(x, lo), min(y, hi))
        elif lo <= x < y <= hi and not any(p < y and x < q for p, q in held):
            placed[n] = x, y
            held.append((x, y))
    scale = (hi - lo) / max(pb - pa, 1)
    for n in [n for n in nodes if n.ranged and not n.kept and wanted[n] is None]:
        hold(n, lo, hi, (lo + (n.a - pa) * scale, lo + (n.b - pa) * scale))
    for n in [n for n in nodes if n not in placed]:
        x = min(max(wanted[n][0], lo), hi) if wanted[n] else lo if n.a - pa <= pb - n.b else hi
        x = next((q for p, q in held if p < x < q), x)
        placed[n] = (x, x)
    for n in nodes:
        if not n.kept:
            _place(n.children, *placed[n], n.a, n.b, texts, placed)


def _emit(nodes: list[_Node], lo: int, hi: int, tgt: str, placed: dict) -> list:
    """tgt[lo:hi] escaped, with the nodes' markup where they were placed."""
    out, at = [], lo
    for n in sorted(nodes, key=lambda n: (placed[n][0], placed[n][0] < placed[n][1])):
        x, y = placed[n]
        out += [html.escape(tgt[at:x], quote=False), *n.start]
        if not n.kept:
            out += [*_emit(n.children, x, y, tgt, placed), n.end]
        at = y
    return out + [html.escape(tgt[at:hi], quote=False)]


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

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.page, self.pieces, self.units, self.stack = page, [], [], []
        self.lines = [0] + [m.end() for m in re.finditer("\n", page)]
        self.pending: tuple | None = None  # the last event: (handler, its arguments, its offset)
        self.flow: list[tuple[str, object, int]] = []  # the current block's text, inline elements and leaves
        self.leaf: _Node | None = None  # the kept element being read, and whether its text is the unit's
        self.leaf_text = False
        self.feed(page)
        self.close()
        self.event(None)
        for o in reversed(self.stack):
            if o.name not in _OPTIONAL_END:
                raise MalformedHtml(f"<{o.name}> opened at {self.where(o.at)} is never closed")
        self.end_flow()
        units = sorted(self.units, key=lambda u: u.at)
        for i, u in enumerate(units):
            u.index = i
        self.document = HtmlDocument([u.unit for u in units], self.pieces)

    def event(self, handler, *args) -> None:
        line, column = self.getpos()
        at = self.lines[line - 1] + column if handler else len(self.page)
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
        else:
            leaf = _Node(name, start, kept=name == "br" or not own, text="\n" if name == "br" else "")
            if void:
                self.flow.append(("leaf", leaf, at))
            else:
                self.leaf, self.leaf_text = leaf, name not in _KEPT_EMPTY
                self.stack.append(_Open(name, at, False, leaf))

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
                self.flow.append(("leaf", self.leaf, closing.at))
                self.leaf = None
        elif closing.node:
            closing.node.end = raw
            self.flow.append(("close", closing.node, at))
        else:
            self.end_flow()
            self.pieces.append(raw)
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
            self.leaf.text += html.unescape(raw) if self.leaf_text else ""
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
        cut, segment = {o.node for o in self.stack if o.node}, []
        for token in self.flow:
            if token[0] == "open" and token[1] in cut:
                self.finish(segment)
                self.pieces += token[1].start
                segment = []
            else:
                segment.append(token)
        self.finish(segment)
        for o in self.stack:
            o.node = None
        self.flow = []

    def finish(self, tokens: list) -> None:
        """One flow: a unit with its inline tags, or as written when it has no text to translate."""
        items, parts, stack, top, leaves, pos = [], [], [], [], [], 0
        for kind, x, _ in tokens:
            if kind == "text":
                for m in _PIECES.finditer(x):
                    parts.append(html.unescape(m[0]) if m[0][0] == "&" else m[0])
                    items.append(("text", m[0], pos, pos + len(parts[-1])))
                    pos += len(parts[-1])
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

        def classify(nodes: list[_Node], inside: bool) -> None:
            """Each node before the unit's text, after it, around it (wrap) or in it (core, spans made relative)."""
            for n in nodes:
                if inside or not (n.b <= s or n.a >= e or n.a <= s and n.b >= e and not n.kept):
                    side[n] = "core"
                    n.a, n.b = min(max(n.a - s, 0), e - s), min(max(n.b - s, 0), e - s)
                    core.append(n)
                    roots.extend([] if inside else [n])
                else:
                    side[n] = "pre" if n.b <= s else "post" if n.a >= e else "wrap"
                classify(n.children, side[n] == "core")

        classify(top, False)
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
