"""A parsed page: its units to translate, and the page written back with their translations."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.html.place import put_back

if TYPE_CHECKING:
    from app.protect.spans import Protect

Alignment = list[tuple[tuple[int, int], tuple[int, int]]]  # per target token: (its span, its source token's span)


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
class Node:
    """An inline element of a unit, or an empty or kept one (a leaf)."""

    name: str
    start: list  # its start tag as pieces (str or Attr); a kept element's whole markup
    kept: bool = False
    text: str = ""  # a kept element's text in the unit
    end: str = ""  # its end tag as written
    children: list[Node] = field(default_factory=list)
    a: int = 0  # [a, b) of the unit's text inside it
    b: int = 0
    protect: Protect | None = None  # a protected span's leaf: what places it (app/protect/)
    forward: bool = False  # and whether it goes in front of the word after it
    left: str | None = None  # the page's character before it, where the unit's text left it out (app/html/flow.py's
    right: str | None = None  # _across: whitespace a protected span took with it), and after it
    after: str = ""  # the page's text right after its end tag that it takes with it (a full stop: flow.py's _across)

    @property
    def ranged(self) -> bool:
        return bool(self.text) if self.kept else self.a < self.b


@dataclass(eq=False)
class Attr:
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
class Block:
    unit: Unit
    at: int
    raw: list  # the flow as written
    prefix: list  # markup and whitespace before the unit's text, and after it
    suffix: list
    roots: list[Node]  # the inline elements inside the unit's text
    index: int = -1

    def render(self, translations: list[str], alignments: list) -> str:
        text, source = translations[self.index], self.unit.text
        if text == source:
            return _join(self.raw, translations, alignments)
        tagged = put_back(self.roots, source, text, alignments[self.index])
        return _join(self.prefix + tagged + self.suffix, translations, alignments)


@dataclass(frozen=True)
class HtmlDocument:
    """A parsed page: its units to translate, and the page with their translations put back."""

    units: list[Unit]
    pieces: list = field(repr=False)  # str, Block and Attr in page order

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
        return [p if isinstance(p, str) else Part(p, _join(p.raw, own, none) if isinstance(p, Block) else p.unit.text)
                for p in self.pieces]  # fmt: skip


@dataclass(frozen=True)
class Part:
    """A block's flow or an attribute of a page (HtmlDocument.parts)."""

    piece: Block | Attr = field(repr=False)
    text: str  # the flow as written (markup), or the attribute's text (plain)

    @property
    def markup(self) -> bool:
        return isinstance(self.piece, Block)

    def put(self, translation: str) -> str:
        """The part as the page writes it: a flow's translation as it is (translated as a fragment, its markup as
        written), an attribute's value quoted and escaped."""
        if self.markup:
            return translation
        return self.piece.written(translation)


def _join(pieces: list, translations: list[str], alignments: list) -> str:
    return "".join(p if isinstance(p, str) else p.render(translations, alignments) for p in pieces)
