"""A file's units as the engine takes them: a plain unit longer than a request may be (NMT_MAX_REQUEST_CHARS) is
sent as pieces cut at its line breaks, and its translation is the pieces' joined by those line breaks; the units go
to the engine in chunks of a few (a job's share of the batch), each chunk within a request's characters. A chunk
with more sentences than a request may have (NMT_MAX_REQUEST_SEQUENCES) is halved, and a unit halved too (halve())."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from app.files import FileTooLarge, Unit
from app.html.reader import VOID
from app.segment import blank

LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Segments:
    units: list[Unit]  # what the engine translates, in order
    breaks: list[list[str]]  # per unit of the file: the line breaks between its pieces (none: sent whole)

    def rejoin(self, translations: list[str]) -> list[str]:
        """One translation per unit of the file, from one per segment."""
        out, at = [], 0
        for between in self.breaks:
            text = translations[at]
            for i, brk in enumerate(between, 1):
                text += brk + translations[at + i]
            out.append(text)
            at += len(between) + 1
        return out


def segments(units: list[Unit], limit: int) -> Segments:
    """The units with each plain one over `limit` characters cut at line breaks into pieces of at most `limit`;
    FileTooLarge for a markup unit, or a line, over it."""
    out: list[Unit] = []
    breaks: list[list[str]] = []
    for n, unit in enumerate(units, 1):
        if len(unit.text) <= limit:
            out.append(unit)
            breaks.append([])
            continue
        if unit.markup:
            raise FileTooLarge(
                f"segment {n} of the file has {len(unit.text)} characters with its formatting; a segment may have at "
                f"most {limit} (NMT_MAX_REQUEST_CHARS)"
            )
        pieces, between = cut(unit.text, limit, n)
        out += [Unit(p, placeholders=unit.placeholders) for p in pieces]
        breaks.append(between)
    return Segments(out, breaks)


def cut(text: str, limit: int, n: int) -> tuple[list[str], list[str]]:
    """`text` as pieces of whole lines, each at most `limit` characters, and the line breaks between them."""
    lines = LINE_BREAK.split(text)
    ends = LINE_BREAK.findall(text) + [""]
    pieces, between, piece, brk = [], [], "", ""
    for line, end in zip(lines, ends, strict=True):
        if len(line) > limit:
            raise FileTooLarge(
                f"segment {n} of the file has a line of {len(line)} characters; a line may have at most {limit} "
                "(NMT_MAX_REQUEST_CHARS): break it into paragraphs"
            )
        if piece and len(piece) + len(line) > limit:
            pieces.append(piece[: len(piece) - len(brk)])
            between.append(brk)
            piece = ""
        piece += line + end
        brk = end
    pieces.append(piece)
    return pieces, between


SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+")
SPACE = re.compile(r"\s+")
PUNCTUATION = re.compile(r"(?<=[.!?…。！？,;:])")  # an empty match after it
ANYWHERE = re.compile(r"(?<=.)", re.DOTALL)


MARKUP_BREAK = re.compile(r"\s*<br\b[^>]*>\s*", re.IGNORECASE)  # a line break a markup unit's tag marks
_TAG = re.compile(r"<!--.*?-->|<(/?)([A-Za-z][\w:.-]*)\b[^>]*?(/?)>", re.DOTALL)


def halve(unit: Unit) -> tuple[Unit, str, Unit] | None:
    """A unit cut in two where it has too many sentences for one request: at the line break nearest its middle,
    else at the sentence end nearest it, the space, the punctuation, the character (`a.b.c.` has sentences too); and
    what was between the halves. A markup unit only outside every element (each half is markup that stands alone)
    and at a line break (a `<br>` too), a sentence's end or a space. None where there is no such place."""
    text, middle = unit.text, len(unit.text) / 2
    tiers = (LINE_BREAK, SENTENCE_END, SPACE, PUNCTUATION, ANYWHERE)
    if unit.markup:
        outside, tiers = _outside(text), (LINE_BREAK, MARKUP_BREAK, SENTENCE_END, SPACE)
    for where in tiers:
        cuts = [m for m in where.finditer(text) if 0 < m.start() and m.end() < len(text)
                and (not unit.markup or (m.start() in outside and m.end() in outside))]  # fmt: skip
        if cuts:
            at = min(cuts, key=lambda m: abs(m.start() - middle))
            first, second = text[: at.start()], text[at.end() :]
            return (Unit(first, unit.markup, unit.placeholders), at.group(),
                    Unit(second, unit.markup, unit.placeholders))  # fmt: skip
    return None


def _outside(markup: str) -> set[int]:
    """The positions in markup outside every element and tag (where it may be cut in two that stand alone)."""
    out, depth, at = set(), 0, 0
    for m in _TAG.finditer(markup):
        if depth == 0:
            out.update(range(at, m.start() + 1))
        if m[2] and m[2].lower() not in VOID and not m[3]:
            depth = max(0, depth - 1) if m[1] else depth + 1
        at = m.end()
    if depth == 0:
        out.update(range(at, len(markup) + 1))
    return out


def chunks(units: list[Unit], size: int, chars: int) -> Iterator[list[Unit]]:
    """Consecutive units, at most `size` of them not blank (blank units never reach the model) and at most `chars`
    characters of those, a chunk."""
    chunk: list[Unit] = []
    live = length = 0
    for unit in units:
        empty = blank(unit.text)
        if chunk and not empty and (live + 1 > size or length + len(unit.text) > chars):
            yield chunk
            chunk, live, length = [], 0, 0
        chunk.append(unit)
        if not empty:
            live, length = live + 1, length + len(unit.text)
    if chunk:
        yield chunk


def weight(chunk: list[Unit]) -> int:
    """The units of a chunk that reach the model: what counts against NMT_JOB_SEGMENTS_IN_FLIGHT."""
    return sum(1 for u in chunk if not blank(u.text))
