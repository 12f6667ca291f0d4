"""Masking: a piece without its groups of spans, for the model, and what it takes to put them back; or the groups cut
out of a text run that keeps them aside (app/html/)."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass

from app.protect.restoring import Anchors, Pair, Restored, Span, closes, opens, word_char
from app.segment import Segment, blank, worded

_TAG = re.compile(r"<(/?)([A-Za-z][\w:.\-]*)[^<>]*?(/?)>\Z")  # a span that is a tag: its name, opening or closing


def inside(spans: list[Span], seg: Segment) -> list[Span]:
    """The spans within a segment, relative to its start."""
    i, j = bisect_left(spans, (seg.start, -1)), bisect_left(spans, (seg.end, -1))
    return [(a - seg.start, b - seg.start) for a, b in spans[i:j] if b <= seg.end]


def groups(text: str, spans: list[Span]) -> list[Span]:
    """Runs of spans with nothing but whitespace between them, or punctuation glued to both (`{a}-{b}`, `%s:%d`: the
    model would read a "-" alone, and drop it), each from its first span's start to its last's end."""
    out: list[list[int]] = []
    for a, b in spans:
        if out and _joins(text[out[-1][1] : a]):
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _joins(between: str) -> bool:
    """Whether the text between two spans makes them one group: whitespace alone, or punctuation without whitespace
    or a word's character."""
    return not between.strip() or not any(c.isspace() or word_char(c) for c in between)


def forward(text: str, a: int, b: int) -> bool:
    """Whether the group text[a:b] goes in front of the word after it: it ends in an opening tag, or is glued to the
    next word and not to the one before."""
    last = _tags(text[a:b])
    if last and last[-1][1]:
        return True
    glued_next = b < len(text) and word_char(text[b])
    glued_before = a > 0 and word_char(text[a - 1])
    return glued_next and not glued_before


def _tags(text: str) -> list[tuple[str, bool]]:
    """The tags among a group's spans, in order: (name, opening)."""
    out = []
    for m in re.finditer(r"<[^<>]*>", text):
        if t := _TAG.match(m.group()):
            out.append((t[2].lower(), not t[1] and not t[3]))
    return out


SENTENCE_END = ".!?。！？"  # what ends a sentence for certain (not "…", ":" or ";", which may go on)
CLOSING = re.compile(r"[.!?…。！？]+(?=\s|$)|[.!?…:;。！？]\Z")  # a sentence's end: after a group, before it


@dataclass(frozen=True)
class Cut:
    """A group of spans cut out of a text, kept aside and put back as written (app/html/)."""

    start: int  # [start, end) of the text: the group, and the whitespace on one side of it
    end: int
    joiner: str  # what the text reads in its place: a space where two words would otherwise meet
    forward: bool  # goes in front of the word after it


def cuts(text: str, spans: list[Span], before: str = "") -> list[Cut]:
    """Each group of spans with the whitespace before it (after it, when it goes in front of the next word), so that
    the text reads on without it; one glued to the word before it takes none (the whitespace after it stays the
    text's: "dog{x} runs" reads "dog runs", and "{x} " written back beside the translation's own space was two). A
    group that stands as a sentence of its own after one ("runs. {x}. A cat") takes its closing punctuation with it:
    left in the text, it read "runs.. A cat", and the model dropped one. `before`: how the text before this one ends,
    where it is a run of a longer one (app/html/'s text between tags): a group at the run's start stands after a
    sentence only where that does ("Hello <b>world</b> {x}. Two" reads "Hello world. Two", not "Hello world Two")."""
    out, at = [], 0
    for a, b in groups(text, spans):
        ahead, start, end = forward(text, a, b), a, b
        if ahead:
            while end < len(text) and text[end].isspace():
                end += 1
        elif a > at and text[a - 1].isspace():
            while start > at and text[start - 1].isspace():
                start -= 1
            if (closing := CLOSING.match(text, end)) and after_sentence(text[:start] if start else before):
                end = closing.end()
        left, right = text[start - 1 : start], text[end : end + 1]
        out.append(Cut(start, end, " " if left and right and word_char(left) and word_char(right) else "", ahead))
        at = end
    return out


def after_sentence(before: str) -> bool:
    """Whether a group after `before` starts a sentence: nothing but whitespace before it, a sentence's end right
    before it (not one anywhere before it: "Hi. A dog {x}. The" reads "Hi. A dog. The"), or a line break."""
    core = before.rstrip()
    return not core or core[-1] in ".!?…:;。！？" or "\n" in before[len(core) :]


@dataclass(frozen=True)
class Group:
    start: int  # [start, end) of the piece: its spans and the whitespace between them
    end: int
    before: bool  # whitespace before it in the piece
    after: bool  # and after it
    joined_left: bool  # a word's character right before it (no whitespace between)
    joined_right: bool  # and right after it
    left: int  # where the text before it ends in the masked text
    right: int  # and where the text after it begins (left + the space left in its place)
    forward: bool  # goes in front of the word after it, not after the word before
    tags: tuple[tuple[str, bool], ...] = ()  # its tags: (name, opening)


@dataclass(frozen=True)
class Masked:
    """A piece (or a whole text), the text without its groups of spans, and the groups."""

    source: str
    text: str
    groups: tuple[Group, ...] = ()
    to_source: tuple[int, ...] = ()  # each character of `text` (and its end) as a character of `source`

    @property
    def reads(self) -> str:
        """What the model reads: `text`, or "" when the groups left nothing to translate (no letter: app/segment.py's
        worded()): the piece then comes back as written."""
        return self.text if not self.groups or worded(self.text) else ""

    def source_span(self, span: Span) -> Span:
        """A span of `text` as a span of the piece."""
        if not self.groups:
            return span
        a, b = span
        return (self.to_source[a], self.to_source[b - 1] + 1) if a < b else (self.to_source[a],) * 2

    def restore(self, target: str, pairs: list[Pair]) -> Restored:
        """The translation of `text` with every group put back (`pairs`: its alignment to `text`)."""
        if not self.groups:
            return Restored(target)
        if not self.reads:
            return Restored(self.source, ((0, self.source),))
        anchors = Anchors(self.text, target, pairs)
        points = [anchors.place(g.left, g.right, g.forward) for g in self.groups]
        opened: dict[str, list[int]] = {}
        for i, g in enumerate(self.groups):  # a closing tag goes no earlier than its opening one
            for name, opening in g.tags:
                if opening:
                    opened.setdefault(name, []).append(points[i])
                elif opened.get(name):
                    points[i] = max(points[i], opened[name].pop())
        out, insertions, at, last = [], [], 0, ""  # last: the last character written
        for i in sorted(range(len(self.groups)), key=lambda i: (points[i], i)):
            g, p = self.groups[i], points[i]
            out.append(target[at:p])
            last, at = target[p - 1] if p > at else last, p
            text, nxt = self.source[g.start : g.end], target[p : p + 1]
            spaced = (g.before or word_char(last)) and not g.joined_left and not opens(last, nxt)
            lead = " " if last and not last.isspace() and spaced else ""
            spaced = (g.after or word_char(nxt)) and not g.joined_right and not closes(nxt, target[p + 1 : p + 2])
            trail = " " if nxt and not nxt.isspace() and spaced else ""
            insertions.append((p, lead + text + trail))
            out.append(insertions[-1][1])
            last = insertions[-1][1][-1]
        out.append(target[at:])
        return Restored("".join(out), tuple(insertions))


def mask(piece: str, spans: list[Span]) -> Masked:
    """The piece without its spans, for the model (spans: relative to the piece, in order, not overlapping)."""
    if not spans:
        return Masked(piece, piece)
    out, to_source, found, at, length = [], [], [], 0, 0
    runs = groups(piece, spans)
    for a, b in runs:
        cut, upto = a, b  # the group with the whitespace around it
        while cut > at and piece[cut - 1].isspace():
            cut -= 1
        while upto < len(piece) and piece[upto].isspace():
            upto += 1
        out.append(piece[at:cut])
        to_source += range(at, cut)
        length += cut - at
        before, after = cut < a, upto > b
        left_char, right_char = (piece[cut - 1] if cut > 0 else ""), (piece[upto] if upto < len(piece) else "")
        words_meet = word_char(right_char) and (before or word_char(left_char))
        joiner = " " if left_char and right_char and (after or words_meet) else ""
        if joiner and re.search("[\r\n]", piece[cut:a] + piece[b:upto]):
            joiner = "\n"  # a line break stays one: lines are segments (app/segment.py)
        joined = (not before and word_char(piece[a - 1 : a]), not after and word_char(piece[b : b + 1]))
        tags = tuple(t for s in spans if a <= s[0] < b for t in _tags(piece[s[0] : s[1]]))
        found.append(Group(a, b, before, after, *joined, length, length + len(joiner), forward(piece, a, b), tags))
        out.append(joiner)
        to_source += [upto] * len(joiner)
        length += len(joiner)
        at = upto
    out.append(piece[at:])
    to_source += [*range(at, len(piece)), len(piece)]
    return Masked(piece, "".join(out), tuple(found), tuple(to_source))


_GLUED = re.compile(r"[^\w\s]+(?=\s)")  # punctuation glued to a group and followed by whitespace: `{x}…`, `{x};`
STAND_IN = "Word"  # what a sentence splitter reads for a group: an ordinary word, in no language's abbreviations


@dataclass(frozen=True)
class StoodIn:
    """A text with each group of spans replaced by an ordinary word (STAND_IN), for a sentence splitter: it sees a
    word where the group was ("holds a {x}. The dog" reads "holds a Word. The dog", not "holds a. The dog", whose
    "a." it takes for an initial), and none of the group's own punctuation (a URL's "?", a term's "!")."""

    source: str
    text: str
    groups: tuple[Span, ...] = ()
    starts: tuple[int, ...] = ()  # each character of `text` as a span of `source`: where it starts
    ends: tuple[int, ...] = ()  # and ends (a stand-in's characters: its group's)

    def segments(self, segs: list[Segment]) -> list[Segment]:
        """Segments of `text` as segments of `source`: the groups at a segment's ends are taken out of it (they stay
        between segments, as written), a segment of groups alone goes, and one of groups and punctuation (`{x}.`) is
        kept whole (it has nothing to translate and comes back as written)."""
        if not self.groups:
            return segs
        by_start, by_end = dict(self.groups), {b: a for a, b in self.groups}
        out: list[Segment] = []
        end = 0
        for seg in segs:  # a segment cut inside a stand-in (cut_to_fit) starts after the one before
            start, end = max(self.starts[seg.start], end), self.ends[seg.end - 1]
            while start < end and blank(self.source[start]):
                start += 1
            a, b = start, end
            while a < b and (blank(self.source[a]) or a in by_start and by_start[a] <= b):
                a = by_start.get(a, a + 1)
                glued = _GLUED.match(self.source, a, b) if a in by_end else None  # `{x}… A man`: "…" is the group's,
                a = glued.end() if glued else a  # not the model's to read (and drop) at the start of its sentence
            while b > a and (blank(self.source[b - 1]) or b in by_end and by_end[b] >= a):
                b = by_end.get(b, b - 1)
            if a < b:
                out.append(Segment(a, b) if any(c.isalnum() for c in self.source[a:b]) else Segment(start, end))
        return out


def stand_in(text: str, spans: list[Span]) -> StoodIn:
    """The text with each group of its spans (in order, not overlapping) replaced by STAND_IN, for a splitter."""
    if not spans:
        return StoodIn(text, text)
    runs = groups(text, spans)
    out, starts, ends, at = [], [], [], 0
    for a, b in runs:
        out += [text[at:a], STAND_IN]
        starts += [*range(at, a), *[a] * len(STAND_IN)]
        ends += [*range(at + 1, a + 1), *[b] * len(STAND_IN)]
        at = b
    out.append(text[at:])
    starts += range(at, len(text))
    ends += range(at + 1, len(text) + 1)
    return StoodIn(text, "".join(out), tuple(runs), tuple(starts), tuple(ends))
