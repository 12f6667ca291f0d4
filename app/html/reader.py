"""parse() reads a page or a fragment with the standard library's HTMLParser and keeps every character of it: what
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

Protected spans (parse's `protect`, app/protect/): in the text between tags, each group of spans (placeholders,
URLs, ...) becomes a kept empty element whose markup is the spans as written, with the whitespace on one side of
them; the unit's text reads on without them, so the model never sees them, and each is placed where app/protect/
puts a span (after the translation of the word before it, in front of the word after it, or at either end), then
written once as it was. A span that markup or an entity's characters cut is left in the text.

XML (the XML rules: DeepL's tag_handling "xml") is read the same way but for the element names HTML gives a meaning:
none is void, kept or closed by another's start tag, so every element is closed (or written <x/>) and translated;
those named as HTML's inline elements (and <br>) run in the text, and so does an empty element written <x/> (an
inline placeholder, as XLIFF's <x id="1"/>); any other is a block. DeepL's non_splitting_tags run in the text too, and
its splitting_tags are blocks, whatever their names (xml_rules()).

MalformedHtml says what and where (line:column, from 1): an end tag closing nothing open, or closing an element
while another inside it is open (crossing tags); an element never closed; an unterminated tag or comment; a
declaration the standard library's parser cannot read (`<![` without a name). Not errors: void elements, `<x/>` (an
empty element), end tags HTML lets one omit (p, li, dt, dd, option, tr, td, th, thead, tbody, head, body, html, ...)
and fragments.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from html.parser import HTMLParser, attrfind_tolerant, tagfind_tolerant
from typing import TYPE_CHECKING

from app.html.document import Attr, HtmlDocument, Node, Unit
from app.html.flow import WHITESPACE, unit_of

if TYPE_CHECKING:
    from app.protect.spans import Protect

VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track",
                  "wbr"})  # fmt: skip  # HTML's elements without an end tag
_INLINE = {
    "a", "abbr", "acronym", "b", "bdi", "bdo", "big", "cite", "data", "del", "dfn", "em", "font", "i", "ins", "mark",
    "nobr", "q", "s", "small", "span", "strike", "strong", "sub", "sup", "time", "tt", "u",
}  # fmt: skip
_KEPT_TEXT = {"code", "kbd", "samp", "var"}  # kept inline elements whose text is part of the unit
_KEPT_EMPTY = {"script", "style", "textarea", "svg", "math", "template"}
_IN_FLOW = _INLINE | _KEPT_TEXT | _KEPT_EMPTY | VOID - {"hr"}
_KEPT = _KEPT_TEXT | _KEPT_EMPTY | {"pre"}
_ATTRIBUTES = {"alt", "title", "placeholder", "aria-label"}
_CELL = {"td", "th", "tr", "tbody", "thead", "tfoot"}
_P_CLOSERS = {
    "address", "article", "aside", "blockquote", "details", "dialog", "div", "dl", "fieldset", "figcaption", "figure",
    "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "hr", "main", "menu", "nav", "ol", "p",
    "pre", "section", "table", "ul", "li", "dd", "dt",
}  # fmt: skip
_P_CLOSERS |= _CELL
_CLOSED_BY = {  # the elements whose end tag may be left out, and the start tags that close them
    "p": _P_CLOSERS, "li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "option": {"option", "optgroup"},
    "optgroup": {"optgroup"}, "tr": _CELL - {"td", "th"}, "td": _CELL, "th": _CELL, "thead": {"tbody", "tfoot"},
    "tbody": {"tbody", "tfoot"}, "tfoot": {"tbody"}, "colgroup": _CELL | {"colgroup"}, "head": {"body"},
}  # fmt: skip
_OPTIONAL_END = {*_CLOSED_BY, "html", "body"}


class MalformedHtml(ValueError):
    """HTML that cannot be read back as written: what is wrong and where."""


@dataclass(frozen=True)
class Rules:
    """What the reader knows of a page's elements by their names."""

    void: frozenset[str]  # elements without an end tag
    in_flow: frozenset[str]  # elements that run within a block's text (the rest are blocks)
    kept: frozenset[str]  # elements not translated unless translate="yes"
    kept_empty: frozenset[str]  # kept elements whose text is not part of the unit
    never: frozenset[str]  # elements never translated, whatever their translate attribute
    closed_by: dict[str, set[str]]  # elements whose end tag may be left out, and the start tags that close them
    optional_end: frozenset[str]  # elements that may be left open at the end, or inside another's end tag
    empty_in_flow: bool = False  # an element written <x/> runs within a block's text
    splitting: frozenset[str] = frozenset()  # elements that are blocks whatever else says (DeepL's splitting_tags)

    def flows(self, name: str, empty: bool) -> bool:
        """Whether an element (`empty`: written <x/>) runs within a block's text, rather than being a block."""
        return name not in self.splitting and (name in self.in_flow or empty and self.empty_in_flow)


HTML = Rules(
    VOID, frozenset(_IN_FLOW), frozenset(_KEPT), frozenset(_KEPT_EMPTY), frozenset({"script", "style", "textarea"}),
    _CLOSED_BY, frozenset(_OPTIONAL_END),
)  # fmt: skip
# XML (DeepL's tag_handling "xml"): every element is closed (or written <x/>) and translated whatever its name; those
# named as HTML's inline ones (and <br>, a line break) and the empty ones (<x/>) run in the text, any other is a block
XML = Rules(frozenset(), frozenset(_INLINE | {"br"}), frozenset(), frozenset(), frozenset(), {}, frozenset(), True)


def xml_rules(non_splitting: set[str], splitting: set[str]) -> Rules:
    """The XML rules with DeepL's non_splitting_tags running in the text and its splitting_tags as blocks."""
    if not non_splitting and not splitting:
        return XML
    return replace(XML, in_flow=XML.in_flow | frozenset(non_splitting), splitting=frozenset(splitting))


def parse(page: str, protect: Protect | None = None, rules: Rules = HTML) -> HtmlDocument:
    """The units of an HTML page or fragment (an XML one with the XML rules), `protect`'s spans kept aside as written;
    raises MalformedHtml."""
    return _Reader(page, protect, rules).document


def _translates(name: str, attrs: dict, parent: bool, rules: Rules) -> bool:
    """Whether an element's text and attributes are translated (HTML's translate attribute, inherited)."""
    if name in rules.never or "notranslate" in (attrs.get("class") or "").split():
        return False
    if "translate" in attrs:
        return (attrs["translate"] or "").strip().lower() != "no"
    return parent and name not in rules.kept


@dataclass(eq=False)
class _Open:
    name: str
    at: int
    translate: bool
    node: Node | None = None  # its node while in the current flow (or while it is the kept element being read)


class _Reader(HTMLParser):
    """The page as pieces written and units to translate: each event is handled when the next shows its end."""

    def __init__(self, page: str, protect: Protect | None = None, rules: Rules = HTML):
        super().__init__(convert_charrefs=True)
        self.page, self.pieces, self.units, self.stack, self.protect = page, [], [], [], protect
        self.rules = rules
        if rules is XML:  # <script> and <style> are elements as any other: their content is markup, not raw text
            self.CDATA_CONTENT_ELEMENTS = self.RCDATA_CONTENT_ELEMENTS = ()
        self.lines = [0] + [m.end() for m in re.finditer("\n", page)]
        self.pending: tuple | None = None  # the last event: (handler, its arguments, its offset)
        self.flow: list[tuple[str, object, int]] = []  # the current block's text, inline elements and leaves
        self.flowing: list[_Open] = []  # the open elements given a node since the flow began
        self.leaf: Node | None = None  # the kept element being read, and its text when that is the unit's
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
            if o.name not in self.rules.optional_end:
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
        rules = self.rules
        void = empty or name in rules.void
        if self.leaf:
            self.leaf.start.append(raw)
            self.stack += [] if void else [_Open(name, at, False)]
            return
        flows = rules.flows(name, empty)
        if not flows:
            self.end_flow()
            while self.stack and name in rules.closed_by.get(self.stack[-1].name, ()):
                self.stack.pop()
        zone = self.zone
        own = _translates(name, dict(attrs), zone, rules)
        start = self.attributes(raw, at) if own else [raw]
        if not (zone and flows):
            self.pieces += start
            self.stack += [] if void else [_Open(name, at, own)]
        elif name != "br" and own and not void:
            node = Node(name, start)
            self.flow.append(("open", node, at))
            self.stack.append(_Open(name, at, True, node))
            self.flowing.append(self.stack[-1])
        else:
            leaf = Node(name, start, kept=name == "br" or not own, text="\n" if name == "br" else "")
            if void:
                self.flow.append(("leaf", leaf, at))
            else:
                self.leaf, self.leaf_text = leaf, None if name in rules.kept_empty else []
                self.stack.append(_Open(name, at, False, leaf))
                self.flowing.append(self.stack[-1])

    def on_end(self, name: str, at: int, raw: str) -> None:
        if raw.index(">") < len(raw) - 1:
            raise MalformedHtml(f"markup the parser could not read at {self.where(at)}: {raw!r}")
        i = next((i for i in reversed(range(len(self.stack))) if self.stack[i].name == name), None)
        if i is None:
            raise MalformedHtml(f"</{name}> at {self.where(at)} closes nothing: no <{name}> is open")
        if inner := next((o for o in reversed(self.stack[i + 1 :]) if o.name not in self.rules.optional_end), None):
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
            self.flow.append(("leaf", Node("#comment", [raw], kept=True), at))
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
            if core := text.strip(WHITESPACE):
                lead = text[: text.index(core)]
                attr = Attr(Unit(core), at + m.start(3), value, quote, lead, text[len(lead) + len(core) :])
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

    def finish(self, tokens: list) -> None:
        """One flow: a unit with its inline tags, or as written when it has no text to translate."""
        pieces, block = unit_of(tokens, self.protect)
        self.pieces += pieces
        self.units += [block] if block else []
