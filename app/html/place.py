"""A unit's inline tags put back into its translation by the alignment (per target token, its span and the span of
the source token it aligns to): a tag wraps the target tokens aligned to the text it wrapped, widened to whole words.
It stays inside the tag it was in and off its siblings: crossing a sibling, it keeps its longest part no sibling
holds; with no aligned token, or no alignment at all, it takes the stretch of its parent no sibling holds nearest its
place (so a lone tag wraps the whole translation), else it is empty at the nearer end. An empty element follows the
word aligned to the one before it (and the space after that word, where its source had whitespace before it), or goes
to the nearer end. A kept element replaces its text where the translation
has that text (the same occurrence), else the target aligned to it alone (not the punctuation its source has right
outside it); else it goes in before that target, or with none, after the word aligned to the one before it, or with no
alignment at the nearer end. Put in, it is spaced as app/protect/ spaces a span: a space on a side where its source had
whitespace or where a word would touch it, none where its source had it attached. A protected span (app/html/reader.py)
goes where app/protect/ puts one, and so does an element that holds nothing but spans (`<b>{name}</b>`). An alignment
pair with an empty target span is a sentence withheld under min_confidence: a tag inside its source comes back empty
where its translation would have been, and a protected span inside it is left out with it. No text is dropped and
every tag comes back as written. A unit whose translation is its own text comes back exactly as written
(app/html/document.py).
"""

from __future__ import annotations

import html
import re
import unicodedata
from bisect import bisect_left, bisect_right, insort
from heapq import heapify, heappop
from itertools import accumulate
from operator import itemgetter
from typing import TYPE_CHECKING

from app.protect.masking import SENTENCE_END
from app.protect.restoring import closes, opens, word_char

if TYPE_CHECKING:
    from app.html.document import Alignment, Node

_END = itemgetter(1)  # a range's end: the key that bisects sorted disjoint ranges by where they end


def put_back(roots: list[Node], source: str, translation: str, alignment: Alignment | None) -> list:
    """The translation escaped, with the markup of a unit's inline elements (`roots`, outer first) placed in it."""
    tr = _Translation(source, translation, alignment)
    placed = _place(roots, tr) if roots else {}
    return _emit(roots, source, translation, placed, _edges(roots, tr.withheld), tr.withheld)


def _edges(roots: list[Node], withheld: set[Node]) -> dict[Node, str]:
    """What each node shows of its own, put in with no text of the translation: its kept leaves' text and protected
    spans (not those of a withheld sentence), as its first and last characters ("" for none but whitespace)."""
    order, todo = [], list(roots)
    while todo:  # parents before children
        order.append(n := todo.pop())
        todo += [] if n.kept else n.children
    edges: dict[Node, str] = {}
    for n in reversed(order):
        if n.kept:
            shown = n.text or ("".join(p for p in n.start if isinstance(p, str)) if n.protect is not None else "")
            shown = "" if n in withheld else shown
            edges[n] = shown[:1] + shown[-1:] if shown.strip() else ""
        else:
            inner = [edges[c] for c in n.children if edges[c]]
            edges[n] = inner[0][:1] + (n.after or inner[-1])[-1:] if inner else ""
    return edges


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
        self.withheld: set[Node] = set()  # the protected spans of withheld sentences: left out with them
        n = len(tgt)
        self.next_text, self.last_text = [n] * (n + 1), [-1] * (n + 1)  # the first non-space from i, the last before i
        for i in range(n - 1, -1, -1):
            self.next_text[i] = self.next_text[i + 1] if tgt[i].isspace() else i
        for i in range(n):
            self.last_text[i + 1] = self.last_text[i] if tgt[i].isspace() else i
        self.pairs = pairs = [(t, s) for t, s in alignment or () if t[0] < t[1] and s[0] < s[1]]
        # a sentence withheld under min_confidence: its source, and the place its translation would have had
        self.gaps = [(s, t[0]) for t, s in alignment or () if t[0] == t[1] and s[0] < s[1]]
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

    def after_word_before(self, a: int) -> tuple[int, int]:
        """The position after the translation of the source's word that ends last at or before a (else the start),
        and after the space that follows it where the source has whitespace before a ("einem <img> Fahrrad")."""
        i = bisect_right(self.end_at, a)
        x = self.snap(self.ends[i - 1][1], self.ends[i - 1][1])[1] if i else 0
        x += x > 0 and self.src[a - 1 : a].isspace() and self.tgt[x : x + 1].isspace()
        return x, x

    def wanted(self, n: Node) -> tuple[int, int] | None:
        """Where a node goes by its text or by the alignment: a range of tgt, a position (x == y) or None."""
        # a protected span, or an element of spans alone, goes where app/protect/ puts one; inside a withheld
        # sentence (not between it and the next), it is left out with it
        if spans := [n] if n.protect is not None else _only_spans(n):
            if (gap := next((x for (s, e), x in self.gaps if s < n.a < e), None)) is not None:
                self.withheld.update(spans)
                return gap, gap
            self.anchors = self.anchors or spans[0].protect.anchors(self.src, self.tgt, self.pairs)
            x = self.anchors.place(n.a, n.b, all(c.forward for c in spans))
            return x, x
        if n.kept and n.text and (found := self.occurrence(n.text, n.a)):
            return found
        a, b = n.a, n.b
        if (gap := next((x for (s, e), x in self.gaps if s <= a and b <= e), None)) is not None:
            return gap, gap  # inside a withheld sentence: empty where its translation would have been
        if not self.pairs:
            return None
        if not n.ranged or not n.kept and self.src[a:b].isspace():  # an element around whitespace is an empty one
            return self.after_word_before(a)
        # the pairs aligned to [a, b): those starting in it (a range of by_start), those ending in it (of ends), and
        # those around a or b, cut in proportion
        i, j = bisect_left(self.start_at, a), bisect_left(self.start_at, b)
        firsts = [_share(t, s, a, b)[0] for t, s in self.straddling(a)]
        firsts += [self.first_target.over(i, j)] if i < j else []
        if not firsts:
            return self.after_word_before(a) if n.kept else None
        i, j = bisect_right(self.end_at, a), bisect_right(self.end_at, b)
        lasts = [_share(t, s, a, b)[1] for t, s in self.straddling(b)]
        lasts += [self.last_target.over(i, j)] if i < j else []
        x, y = self.snap(min(firsts), max(lasts))
        if n.kept and self.stranger(x, y, a, b):
            return x, x  # a kept element replaces no other word's translation: it goes in before them
        if n.kept and y - x > 1:  # nor the punctuation its source has right outside it
            x += self.tgt[x] == self.src[a - 1 : a] and not _letter(self.tgt[x])
            y -= self.tgt[y - 1] == self.src[b : b + 1] and not _letter(self.tgt[y - 1])
            x, y = self.trim(x, y)
        return x, y


def _only_spans(n: Node) -> list[Node]:
    """The protected spans an element holds where it holds nothing else (`<b>{name}</b>`): it goes where they go."""
    if n.kept or n.ranged:
        return []
    spans, todo = [], list(n.children)
    while todo:
        c = todo.pop()
        if c.protect is None and c.kept:
            return []
        spans += [c] if c.protect is not None else []
        todo += c.children
    return spans


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

    def hold(self, n: Node, r: tuple[int, int] | None, placed: dict) -> None:
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


def _place(roots: list[Node], tr: _Translation) -> dict[Node, tuple[int, int]]:
    """Where each node goes in the translation: a range, or a position (x == y); parents before their children."""
    placed: dict[Node, tuple[int, int]] = {}
    families = [(roots, 0, len(tr.tgt), 0, len(tr.src))]
    while families:
        nodes, lo, hi, pa, pb = families.pop()
        _place_siblings(nodes, lo, hi, pa, pb, tr, placed)
        families += [(n.children, *placed[n], n.a, n.b) for n in nodes if n.children and not n.kept]
    return placed


def _place_siblings(nodes: list[Node], lo: int, hi: int, pa: int, pb: int, tr: _Translation, placed: dict) -> None:
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
    for before, n in zip(nodes, nodes[1:]):  # a span that starts a line (after a <br>) stays on it, not on the last
        spans = n.protect or _only_spans(n)
        if spans and before.name == "br" and not tr.src[before.b : n.a].strip() and placed[n] < placed[before]:
            placed[n] = (placed[before][1],) * 2


def _emit(roots: list[Node], src: str, tgt: str, placed: dict, edges: dict[Node, str], withheld: set[Node]) -> list:
    """The translation escaped, with the nodes' markup where they were placed: an element put in empty that shows
    something of its own (a URL kept as written: `<a href="..">https://..</a>`) is spaced as a kept element is; the
    protected spans of a withheld sentence are left out."""
    out, at, last = [], 0, ""  # last: the last character of text written
    stack = [(roots, 0, len(tgt), "")]  # per element open: its children, the next, its end, its end tag
    while stack:
        nodes, i, hi, end = stack.pop()
        if i == 0:
            nodes = sorted(nodes, key=lambda n: (placed[n][0], placed[n][0] < placed[n][1]))
        if i == len(nodes):
            out += [html.escape(tgt[at:hi], quote=False), end]
            last, at = tgt[hi - 1] if hi > at else last, hi
            continue
        n, (x, y) = nodes[i], placed[nodes[i]]
        out.append(html.escape(tgt[at:x], quote=False))
        last = tgt[x - 1] if x > at else last
        stack.append((nodes, i + 1, hi, end))
        if not n.kept:
            lead, trail = _spacing(n, edges[n], src, last, tgt[x : x + 2]) if x == y and edges[n] else ("", "")
            if x == y and not edges[n] and last.isspace() and _right(n, src).isspace() and word_char(tgt[x : x + 1]):
                trail = " "  # showing nothing, between two words as its source was: "einem <img> Fahrrad"
            out += [lead, *n.start]
            last, at = lead or last, x
            stack.append((n.children, 0, y, n.end + _after(n, tgt, x, edges[n]) + trail))
            continue
        if n in withheld:
            continue
        lead, trail = _spacing(n, n.text, src, last, tgt[x : x + 2]) if x == y and n.text.strip() else ("", "")
        out += [lead, *n.start, trail]
        last, at = (trail or n.text or edges[n] or last)[-1:], y  # edges: a protected span's own last character
    return out


def _after(n: Node, tgt: str, x: int, shown: str) -> str:
    """The punctuation an element standing as a sentence of its own took with it (Node.after), where it went between
    two sentences of the translation (after one's end, or at the start, and not before punctuation): not where the
    alignment put it inside a sentence or before the sentence's own full stop, which it would double."""
    before, ahead = tgt[:x].rstrip()[-1:], tgt[x:].lstrip()[:1]
    between = (not before or before in SENTENCE_END) and not (ahead and ahead in SENTENCE_END + "…,;:，；：)]")
    return n.after if shown and between else ""


def _spacing(n: Node, shown: str, src: str, last: str, ahead: str) -> tuple[str, str]:
    """The whitespace around a kept element (or one put in empty, which `shown` starts and ends as) put in between
    `last` (the text written before it) and `ahead` (the translation's next two characters), as
    app/protect/masking.py's restore puts it around a span: a space on a side
    where its source had whitespace, or where a word or punctuation facing away from it would touch it; none where
    its source had it attached to a word (or to that same punctuation), where there is whitespace already, or against
    punctuation that faces it (a full stop, an opening bracket)."""
    left, right, nxt = _left(n, src), _right(n, src), ahead[:1]
    spaced = left.isspace() or word_char(last) or closes(last, shown[0]) and last != left
    spaced = spaced and not word_char(left) and not opens(last, shown[0])
    lead = " " if last and not last.isspace() and not shown[0].isspace() and spaced else ""
    spaced = right.isspace() or word_char(nxt) or opens(nxt, ahead[1:]) and nxt != right
    spaced = spaced and not word_char(right) and not closes(nxt, ahead[1:])
    trail = " " if nxt and not nxt.isspace() and not shown[-1].isspace() and spaced else ""
    return lead, trail


def _left(n: Node, src: str) -> str:
    """The source's character before a node: the unit's, or the page's where the unit's text left it out."""
    return src[n.a - 1 : n.a] if n.left is None else n.left


def _right(n: Node, src: str) -> str:
    """The source's character after a node (as _left)."""
    return src[n.b : n.b + 1] if n.right is None else n.right
