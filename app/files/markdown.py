"""Markdown (.md): the text of paragraphs, headings and table cells translated (paragraphs in list items and block
quotes too), everything else kept byte for byte: fenced and indented code blocks, HTML blocks, link reference
definitions, thematic breaks, YAML (---) and TOML (+++) front matter, and the markup around the text of each line
(list markers, `>`, indentation, a heading's #s, a table's pipes).

The file is parsed by markdown-it-py (CommonMark, with GFM tables and strikethrough) and written back by editing
its lines in place at the lines each block's map gives: a block whose translation is its own text is not touched.
A paragraph or heading is one unit: its lines are joined by spaces (the engine splits sentences) and the
translation is put back on as many lines as the source had, each with that line's own prefix, each break at the
space nearest the source's line end in proportion (app/files/inline.py) and never before a word that would start a
list, quote or heading; a hard line break (two spaces or a backslash at a line's end) stays a hard break between
the same lines. A table cell is one unit on its own row.

Inline markup is inline codes of the unit (app/files/inline.py), each written back as the source wrote it: emphasis,
strong emphasis and strikethrough (`*`, `_`, `**`, `__`, `~~`: the delimiters used) and link text wrap the words
aligned to the ones they wrapped, a link's destination and title (`](url "title")`, `][ref]`) coming back with its
closing bracket; inline code is kept as written in place of the translation of its text (which the model reads);
images, autolinks and inline HTML are points after the word aligned to the one before them. The positions of links,
images and code spans in a block's text are recorded by wrapping markdown-it's inline rules. In translated text,
the characters Markdown would read as markup (\\ ` * _ [ ] < and | in a table) are escaped with a backslash, and so
is a list marker, quote or heading marker a translated paragraph starts with.

A file over MAX_CHARS characters is refused: markdown-it-py's time is linear in the text but up to ~15 us a
character on hostile text (runs of "[", lines of one character), so a 20 MB upload could hold a worker for minutes.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cache
from itertools import pairwise

from markdown_it import MarkdownIt
from markdown_it.helpers import parseLinkLabel

from app.files import FileLimits, FileTooLarge, Unit, one_each
from app.files.inline import Fragment, lines
from app.files.subrip import decode, split_lines

MAX_CHARS = 1_000_000  # markdown-it-py takes up to ~15 us a character (a run of "["s): at most ~15 s a file
_SPANNED = {"link_open", "image", "code_inline", "hardbreak"}  # tokens whose source text is recorded
_FRONT = {"---": ("---", "..."), "+++": ("+++",)}  # front matter's first line, and its last
_MARKUP = re.compile(r"[\\`*_\[\]<~]")
# GitHub's footnote references and labels ("[^1]", "[^note]:"), a task list item's box ("[ ] ", "[x] "), Hugo's
# shortcodes ("{{< ref "a.md" >}}"), inline math ("$a+b$"): CommonMark's text, which a model would drop
_POINTS = re.compile(
    r"\[\^[^\]\s]+\]:?|(?P<task>\[[ xX]\](?= ))|\{\{[<%].*?[>%]\}\}|\$[^$\s](?:[^$]*[^$\s])?\$(?![0-9])"
)
_BLOCK_START = re.compile(r"[#>+=-]|[0-9]{1,9}[.)]")  # what would start a list, quote or heading at a line's start


def _tracked(fn):
    """An inline rule that records in each token of _SPANNED it makes the [start, end) of its source text."""

    def rule(state, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        ok = fn(state, silent)
        for t in state.tokens[count:] if ok and not silent else ():
            if t.type in _SPANNED and "span" not in t.meta:
                t.meta["span"] = (start, state.pos)
                if t.type == "link_open" and t.markup != "autolink":
                    t.meta["label_end"] = parseLinkLabel(state, start, True)
        return ok

    return rule


@cache
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    for r in list(md.inline.ruler.__rules__):
        md.inline.ruler.at(r.name, _tracked(r.fn), {"alt": r.alt})
    return md


def _escape(text: str, table: bool) -> str:
    text = _MARKUP.sub(lambda m: "\\" + m[0], text.replace("\n", " "))
    return text.replace("|", "\\|") if table else text


def _fragment(inline) -> Fragment:
    """An inline token's children as a unit: text, and the markup as codes."""
    f, src, auto = Fragment(), inline.content, False
    for t in inline.children:
        span = t.meta.get("span") if t.meta else None
        if auto:
            auto = t.type != "link_close"
        elif t.type == "text":
            _text(f, t.content, t is inline.children[0])
        elif t.type == "softbreak":
            f.text(" ")
        elif t.type == "hardbreak":
            f.line_break("\\" if span and src[span[0]] == "\\" else "  ")
        elif t.type in ("em_open", "strong_open", "s_open"):
            f.open(t.markup, t.markup)
        elif t.type in ("em_close", "strong_close", "s_close", "link_close"):
            f.close()
        elif t.type == "link_open" and t.markup == "autolink" and span:
            f.empty(src[span[0] : span[1]])
            auto = True
        elif t.type == "link_open" and span and t.meta.get("label_end", -1) >= 0:
            f.open(src[span[0]], src[t.meta["label_end"] : span[1]])
        elif t.type == "code_inline" and span:
            f.kept(src[span[0] : span[1]], t.content)
        elif t.type in ("image", "html_inline") and (span or t.content):
            f.empty(src[span[0] : span[1]] if span else t.content)
        else:
            raise _Skip  # markup this module does not know where it came from: the block is kept as written
    return f


def _text(f: Fragment, text: str, first: bool) -> None:
    """Text, with what GitHub's and other Markdown read as markup in it (which CommonMark reads as text: _POINTS)
    kept as written, each where the words around it go."""
    at = 0
    for m in _POINTS.finditer(text):
        if m.group("task") and not (first and m.start() == 0):
            continue  # a task's box starts a list item's text
        f.text(text[at : m.start()]) if m.start() > at else None
        f.empty(m.group())
        at = m.end()
    if at < len(text):
        f.text(text[at:])


class _Skip(Exception):
    """A block whose text cannot be found in its lines as markdown-it read it."""


def _render(f: Fragment, translation: str, table: bool) -> list[list[tuple[str, bool]]]:
    """The translation in Markdown, as breakable and unbreakable parts, in groups between hard line breaks."""
    groups: list[list[tuple[str, bool]]] = [[]]
    for kind, x in f.back(translation):
        if kind == "text":
            groups[-1].append((_escape(x, table), True))
        elif x.kind == "break":
            groups[-1].append((x.start, False))
            groups.append([])
        else:
            groups[-1].append((x.end if kind == "close" else x.start, False))
    return groups


@dataclass
class _Text:
    """A paragraph or heading: its text on rows first.., each row as prefix + text + suffix."""

    first: int
    prefixes: list[str]
    suffixes: list[str]
    widths: list[int]  # the text's length on each row
    groups: list[int]  # rows per stretch between hard line breaks
    fragment: Fragment
    paragraph: bool

    def render(self, translations: list[str]) -> list[str]:
        out: list[str] = []
        for parts, count in zip(_render(self.fragment, translations[0], False), self.groups):
            widths = self.widths[len(out) : len(out) + count]
            out += lines(parts, widths, lambda text, at: not _BLOCK_START.match(text, at)) if parts else []
        out = [line for line in out if line.strip()] or [""]
        if self.paragraph and _BLOCK_START.match(out[0]):
            out[0] = re.sub(r"([.)])", r"\\\1", out[0], count=1) if out[0][0].isdigit() else "\\" + out[0]
        return [p + line + s for p, line, s in zip(self.prefixes, out, self.suffixes)]

    @property
    def fragments(self) -> list[Fragment]:
        return [self.fragment]

    @property
    def count(self) -> int:
        return len(self.prefixes)


@dataclass
class _Row:
    """A table row: its cells' text at [start, end) of the row."""

    first: int
    row: str
    cells: list[tuple[int, int]]
    fragments: list[Fragment]
    count: int = 1

    def render(self, translations: list[str]) -> list[str]:
        out, at = [], 0
        for (a, b), f, t in zip(self.cells, self.fragments, translations):
            out += [self.row[at:a], "".join(s for group in _render(f, t, True) for s, _ in group)]
            at = b
        return ["".join(out) + self.row[at:]]


def _cells(body: str) -> list[tuple[int, int]]:
    """[start, end) of each cell's text in a table row, as markdown-it's escapedSplit and mdTrim find them."""
    cuts, escaped = [-1], False
    for i, c in enumerate(body):
        if c == "|" and not escaped:
            cuts.append(i)
        escaped = c == "\\"
    cuts.append(len(body))
    spans = []
    for a, b in pairwise(cuts):
        cell = body[a + 1 : b]
        lead = len(cell) - len(cell.lstrip(" \t"))
        spans.append((a + 1 + lead, a + 1 + len(cell.rstrip(" \t"))))
    if spans and spans[0][0] >= spans[0][1] and body.lstrip(" \t").startswith("|"):
        spans.pop(0)
    if spans and spans[-1][0] >= spans[-1][1] and body.rstrip(" \t").endswith("|"):
        spans.pop()
    return spans


def _locate(inline, bodies: list[str], heading: bool) -> tuple[list[str], list[str], list[int]]:
    """Each row's text before and after the block's text on it, and the text's length there."""
    first, last = inline.map
    pieces = inline.content.split("\n")
    if len(pieces) != last - first:
        raise _Skip
    prefixes, suffixes, widths = [], [], []
    for body, piece in zip(bodies[first:last], pieces):
        if heading and "#" in body:
            at = body.find(piece, body.index("#") + 1)
        else:
            at = len(body) - len(piece) if body.endswith(piece) else len(body.rstrip()) - len(piece)
        if at < 0 or body[at : at + len(piece)] != piece or not piece.strip():
            raise _Skip
        prefixes.append(body[:at])
        suffixes.append(body[at + len(piece) :])
        widths.append(len(piece))
    return prefixes, suffixes, widths


@dataclass
class MarkdownFile:
    rows: list[str]  # the file's lines, each with its line ending
    blocks: list[_Text | _Row]
    units: list[Unit] = field(default_factory=list)
    bom: str = ""

    def write(self, translations: list[str]) -> bytes:
        one_each(self.units, translations)
        rows, at = list(self.rows), 0
        for block in self.blocks:
            mine, at = translations[at : at + len(block.fragments)], at + len(block.fragments)
            if all(t == u.text for t, u in zip(mine, self.units[at - len(mine) : at])):
                continue
            new = block.render(mine)
            old = rows[block.first : block.first + block.count]
            endings = [r[len(r.rstrip("\r\n")) :] for r in old]
            endings[len(new) - 1] = endings[-1]  # the block's last row ends as the source's last did
            rows[block.first : block.first + len(old)] = [n + e for n, e in zip(new, endings)] + [""] * (
                len(old) - len(new)
            )
        return (self.bom + "".join(rows)).encode()


def _front_matter(bodies: list[str]) -> int:
    """How many rows the front matter at the file's start takes (0 for none)."""
    ends = _FRONT.get(bodies[0].rstrip()) if bodies else None
    if not ends:
        return 0
    return next((i + 1 for i in range(1, len(bodies)) if bodies[i].rstrip() in ends), 0)


def _groups(inline) -> list[int]:
    """How many of the block's rows each stretch between its hard line breaks takes."""
    newlines, ends = [m.start() for m in re.finditer("\n", inline.content)], []
    for t in inline.children:
        if t.type == "hardbreak":
            if not (t.meta and "span" in t.meta):
                raise _Skip
            ends.append(bisect_left(newlines, t.meta["span"][0]))  # the row it ends
    bounds = [-1, *ends, len(newlines)]
    return [b - a for a, b in pairwise(bounds)]


def read(data: bytes, limits: FileLimits) -> MarkdownFile:
    text, bom = decode(data, "Markdown")
    if len(text) > MAX_CHARS:
        raise FileTooLarge(f"the Markdown file has {len(text)} characters; the limit is {MAX_CHARS}")
    rows = split_lines(text)
    bodies = [r.rstrip("\r\n") for r in rows]
    skip = _front_matter(bodies)
    tokens = _parser().parse("\n".join(["" for _ in bodies[:skip]] + bodies[skip:]))
    blocks: list[_Text | _Row] = []
    cell = 0  # the cell's number in its row
    for i, t in enumerate(tokens):
        if t.type != "inline" or not t.map:
            continue
        opener = tokens[i - 1]
        if opener.type in ("th_open", "td_open"):
            row = t.map[0]
            if not (blocks and isinstance(blocks[-1], _Row) and blocks[-1].first == row):
                blocks.append(_Row(row, bodies[row], [], []))
                cell, spans = 0, _cells(bodies[row])
            cell += 1
            if t.content.strip() and cell <= len(spans):
                a, b = spans[cell - 1]
                if bodies[row][a:b].replace("\\|", "|") == t.content:
                    with suppress(_Skip):
                        blocks[-1].fragments.append(_fragment(t))
                        blocks[-1].cells.append((a, b))
            continue
        if not t.content.strip():
            continue
        try:
            heading = opener.type == "heading_open" and opener.markup.startswith("#")
            prefixes, suffixes, widths = _locate(t, bodies, heading)
            block = _Text(
                t.map[0], prefixes, suffixes, widths, _groups(t), _fragment(t), opener.type == "paragraph_open"
            )
        except _Skip:
            continue
        blocks.append(block)
        if len(blocks) > limits.max_units:
            raise FileTooLarge(f"the file has more than {limits.max_units} blocks of text; the limit is "
                               f"{limits.max_units}")  # fmt: skip
    blocks = [b for b in blocks if b.fragments]
    units = [f.unit() for b in blocks for f in b.fragments]
    return MarkdownFile(rows, blocks, units, bom)
