"""Protected spans: placeholders, inline tags, URLs, e-mail addresses, code and the caller's own terms and patterns,
kept verbatim through translation.

The guarantee is by construction: the model never reads a protected span, so it can neither change nor drop nor
repeat one. Each piece of text (a sentence) is masked, its spans taken out, and the model translates what is left;
then each span is put back into the translation, as written, exactly once, where the words around it went:

- Spans are found leftmost first, the longest where several start at one place, never overlapping, whatever their
  kind. Spans with only whitespace between them are one group, put back as written (whitespace included).
- Masking: a group goes out with the whitespace around it, and one space is left where words would otherwise meet
  ("Hello {name}, welcome" reads "Hello, welcome"; "Send {n} files" reads "Send files").
- Restoring, by the alignment of the translation to what the model read (per target token, the source token it
  aligns to): a group follows the translation of the word before it (to be exact, of the last source token before
  it that some target token aligns to), widened to the whole target word. A group glued to the next word and not to
  the one before (`{currency}100`), or that ends in an opening tag (`<g id="1">`), goes in front of the translation
  of the word after it instead; a closing tag never goes before its opening one. A group with no word before it
  stays at the start (after the translation's opening punctuation, where the source had some before it), one with
  no word after it stays at the end (before the closing punctuation); with no alignment at all, it goes where its
  share of the way through the text puts it. Spaces: one before it where the source had whitespace before it, one
  after it where the source had whitespace after it, never two in a row, none before closing punctuation or after
  opening punctuation (a quote faces by what follows it), and never two words glued that the source kept apart.
- A whole text is split into sentences with its groups taken out (app/engine/protected.py): a group between two
  sentences stays there as written; the splitter never sees a span.
- A piece that is nothing but spans, whitespace and punctuation is not translated: it comes back as written.

User patterns run on RE2 (linear time in the text whatever the pattern; no lookaround, no backreferences), each
within limits of count, length and program size; a pattern that matches the empty string is refused. The built-in
kinds run on RE2 too; literal terms match as whole words (not inside a longer word), case-sensitively.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate

import re2

from app.engine.errors import InputTooLong, InvalidRequest
from app.segment import Segment

MAX_TERMS = 256  # protect_terms a request
MAX_TERM_CHARS = 200
MAX_PATTERNS = 16  # protect_patterns a request
MAX_PATTERN_CHARS = 500
MAX_PROGRAM_SIZE = 5_000  # RE2's program size (instructions) of one pattern: [\pL\pN]{1,3} is 4,032
PATTERN_MEMORY = 1 << 20  # RE2's memory budget of one user pattern (its compiling and its DFA)
EMPTY_PROBES = ("", " ", "a", "A b", "0", "\n", "-", "a\nb")  # where a pattern that can match nothing shows it

Span = tuple[int, int]  # [start, end) characters
Pair = tuple[Span, Span]  # a target token's span, and the span of the source token it aligns to

_PRINTF = r"[-+#0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"  # printf's flags, width, precision, size
_PLACEHOLDERS = (
    r"\{\{[^{}\n]{1,200}\}\}",  # {{ x }}: Jinja, Handlebars, Mustache
    r"\$\{[^{}\s]{1,100}\}",  # ${x}: shell, JavaScript templates
    r"\{[\pL\pN_.:,!#|\[\]\-]{0,100}\}",  # {name}, {0}, {}, {0:.2f}: Python, .NET, ICU arguments
    r"%\([\pL\pN_.\-]{1,100}\)" + _PRINTF + r"[diouxXeEfFgGcrsa]",  # %(name)s: Python
    r"%\d{1,2}\$" + _PRINTF + r"[diouxXeEfFgGcsp@]",  # %1$s: positional printf, Android, iOS
    r"%" + _PRINTF + r"[diouxXeEfFgGcsp]\b|%@",  # %s, %d, %5.2f, %ld, %@: not "50%off"
)
KINDS: dict[str, str] = {  # the built-in kinds, RE2 patterns, alternatives tried in order at each place
    "placeholders": "|".join(_PLACEHOLDERS),
    "tags": r"</?[A-Za-z][\w:.\-]*(?:\s+[\w:.\-]+\s*=\s*(?:\"[^\"<>]*\"|'[^'<>]*'))*\s*/?>",  # <x id="1"/>, <g>, </g>
    "urls": r"(?:(?:https?|ftp)://|www\.)[^\s<>\"'`{}|\\^]*[^\s<>\"'`{}|\\^.,;:!?)\]]",  # without closing punctuation
    "emails": r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}",
    "code": r"(?s:```.+?```)|``[^`\n](?:[^\n]*?[^`\n])?``|`[^`\n]+`",  # fenced, double and single backticks
}
_TAG = re.compile(r"<(/?)([A-Za-z][\w:.\-]*)[^<>]*?(/?)>\Z")  # a span that is a tag: its name, opening or closing


def _word(c: str) -> bool:
    """A character of a word of a script that puts spaces between words (not Thai, CJK, ...), as app/html/place.py's."""
    if not c:
        return False
    return (c.isalnum() or unicodedata.category(c)[0] == "M") and not ("\u0e00" <= c < "\u1100" or c >= "\u2e80")


# ---- finding spans -------------------------------------------------------------------------------------------------


class _Text:
    """A text as RE2 reads it: its UTF-8 bytes, encoded once, and the character offset of any byte offset."""

    def __init__(self, text: str):
        self.text, self.data = text, text.encode()
        self.starts = (
            None if len(self.data) == len(text) else list(accumulate((len(c.encode()) for c in text), initial=0))
        )

    def byte(self, i: int) -> int:
        return i if self.starts is None else self.starts[i]

    def char(self, b: int) -> int | None:
        """The character at byte offset b; None inside one (RE2's \\C matches a byte)."""
        if self.starts is None:
            return b
        i = bisect_left(self.starts, b)
        return i if self.starts[i] == b else None


class _RE2:
    """A kind's or a user pattern's matches, searched for from any place."""

    def __init__(self, regex, name: str):
        self.regex, self.name = regex, name

    def next(self, t: _Text, at: int) -> Span | None:
        m = self.regex.search(t.data, t.byte(at))
        if m is None:
            return None
        a, b = t.char(m.start()), t.char(m.end())
        if a is None or b is None or a == b:
            what = "the empty string" if a == b else "part of a character"
            raise InvalidRequest(
                f"{self.name} matched {what} at character {a if a is not None else at} of a text; a pattern must match "
                "at least one whole character (use + rather than *, and no \\C)"
            )
        return a, b


class _Terms:
    """Literal terms, each where it stands as whole words (not inside a longer word), the longest first."""

    def __init__(self, terms: tuple[str, ...]):
        self.regex = _terms_regex(terms)

    def next(self, t: _Text, at: int) -> Span | None:
        m = self.regex.search(t.text, at)
        return None if m is None else m.span()


@lru_cache(maxsize=64)
def _terms_regex(terms: tuple[str, ...]) -> re.Pattern:
    def bounded(term: str) -> str:  # a word boundary only where the term's own end is a word character
        return (
            ("(?<!\\w)" if re.match(r"\w", term) else "")
            + re.escape(term)
            + ("(?!\\w)" if re.search(r"\w\Z", term) else "")
        )

    return re.compile("|".join(bounded(t) for t in sorted(terms, key=len, reverse=True)))


@lru_cache(maxsize=1)
def _kinds() -> dict[str, object]:
    return {kind: re2.compile(pattern, _options(8 << 20)) for kind, pattern in KINDS.items()}


def _options(memory: int) -> re2.Options:
    options = re2.Options()
    options.log_errors, options.max_mem = False, memory
    return options


@lru_cache(maxsize=1024)
def _pattern(pattern: str):
    return re2.compile(pattern, _options(PATTERN_MEMORY))


@dataclass(frozen=True)
class Protect:
    """What a request protects: built-in kinds (names of KINDS), literal terms and RE2 patterns, checked."""

    kinds: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    _matchers: list = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._matchers.extend(_RE2(_kinds()[k], k) for k in self.kinds)
        if self.terms:
            self._matchers.append(_Terms(self.terms))
        self._matchers.extend(_RE2(_pattern(p), f"protect_patterns[{i}]") for i, p in enumerate(self.patterns))

    def spans(self, text: str) -> list[Span]:
        """The protected spans of `text`, in order: leftmost first, then the longest, never overlapping."""
        if not self._matchers or not text:
            return []
        t, found, at = _Text(text), [], 0
        nexts = [m.next(t, 0) for m in self._matchers]
        while True:
            best = None
            for i, n in enumerate(nexts):
                if n is not None and n[0] < at:  # overtaken by a span found since: its next one from here
                    n = nexts[i] = self._matchers[i].next(t, at)
                if n is not None and (best is None or n[0] < best[0] or n[0] == best[0] and n[1] > best[1]):
                    best = n
            if best is None:
                return found
            found.append(best)
            at = best[1]

    def cuts(self, text: str) -> list[Cut]:
        """Where to cut the protected spans out of a text that keeps them aside rather than masking them (app.html's
        text runs, whose spans become kept elements)."""
        return cuts(text, self.spans(text))

    @staticmethod
    def anchors(source: str, target: str, pairs: list[Pair]) -> Anchors:
        return Anchors(source, target, pairs)


def protection(kinds: bool | list[str] | None, terms: list[str] | None, patterns: list[str] | None) -> Protect | None:
    """A request's protect, protect_terms and protect_patterns, checked against the limits (422 or 413 saying what is
    allowed) and compiled; None when it protects nothing."""
    kinds = tuple(KINDS) if kinds is True else tuple(dict.fromkeys(kinds or ()))
    if unknown := [k for k in kinds if k not in KINDS]:
        raise InvalidRequest(f"protect names {unknown}; the kinds are {list(KINDS)}, or true for all of them")
    terms, patterns = terms or [], patterns or []
    for name, items, most, chars in (("protect_terms", terms, MAX_TERMS, MAX_TERM_CHARS),
                                     ("protect_patterns", patterns, MAX_PATTERNS, MAX_PATTERN_CHARS)):  # fmt: skip
        if len(items) > most:
            raise InvalidRequest(f"{name} has {len(items)} items; the limit is {most} a request")
        for i, item in enumerate(items):
            if not item.strip():
                raise InvalidRequest(f"{name}[{i}] is blank; each needs a character other than whitespace")
            if len(item) > chars:
                raise InputTooLong(f"{name}[{i}] has {len(item)} characters; the limit is {chars}")
    for i, p in enumerate(patterns):
        _check(p, f"protect_patterns[{i}]")
    if not (kinds or terms or patterns):
        return None
    return Protect(kinds, tuple(dict.fromkeys(terms)), tuple(patterns))


def _check(pattern: str, name: str) -> None:
    try:
        regex = _pattern(pattern)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        if "too large" in why or "out of memory" in why:
            raise InputTooLong(
                f"{name} is too large for RE2 to compile within {PATTERN_MEMORY >> 20} MiB ({why}); the limit is a "
                f"program of {MAX_PROGRAM_SIZE} instructions: fewer or smaller repetitions, narrower classes"
            ) from None
        raise InvalidRequest(
            f"{name} is not a regular expression RE2 accepts ({why}): {pattern!r}. RE2's syntax is Perl's without "
            "lookaround or backreferences: https://github.com/google/re2/wiki/Syntax"
        ) from None
    if regex.programsize > MAX_PROGRAM_SIZE:
        raise InputTooLong(
            f"{name} compiles to a program of {regex.programsize} instructions (RE2's program size); the limit is "
            f"{MAX_PROGRAM_SIZE}: fewer or smaller repetitions, narrower classes ([a-z] rather than \\pL)"
        )
    if any(m.start() == m.end() for probe in EMPTY_PROBES for m in regex.finditer(probe.encode())):
        raise InvalidRequest(
            f"{name} matches the empty string ({pattern!r}); a pattern must match at least one character "
            "(+ rather than *, and not an anchor or \\b alone)"
        )


# ---- masking -------------------------------------------------------------------------------------------------------


def inside(spans: list[Span], seg: Segment) -> list[Span]:
    """The spans within a segment, relative to its start."""
    i, j = bisect_left(spans, (seg.start, -1)), bisect_left(spans, (seg.end, -1))
    return [(a - seg.start, b - seg.start) for a, b in spans[i:j] if b <= seg.end]


def groups(text: str, spans: list[Span]) -> list[Span]:
    """Runs of spans with nothing but whitespace between them, each from its first span's start to its last's end."""
    out: list[list[int]] = []
    for a, b in spans:
        if out and not text[out[-1][1] : a].strip():
            out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def forward(text: str, a: int, b: int) -> bool:
    """Whether the group text[a:b] goes in front of the word after it: it ends in an opening tag, or is glued to the
    next word and not to the one before."""
    last = _tags(text[a:b])
    if last and last[-1][1]:
        return True
    glued_next = b < len(text) and _word(text[b])
    glued_before = a > 0 and _word(text[a - 1])
    return glued_next and not glued_before


def _tags(text: str) -> list[tuple[str, bool]]:
    """The tags among a group's spans, in order: (name, opening)."""
    out = []
    for m in re.finditer(r"<[^<>]*>", text):
        if t := _TAG.match(m.group()):
            out.append((t[2].lower(), not t[1] and not t[3]))
    return out


@dataclass(frozen=True)
class Cut:
    """A group of spans cut out of a text, kept aside and put back as written (app/html/)."""

    start: int  # [start, end) of the text: the group, and the whitespace on one side of it
    end: int
    joiner: str  # what the text reads in its place: a space where two words would otherwise meet
    forward: bool  # goes in front of the word after it


def cuts(text: str, spans: list[Span]) -> list[Cut]:
    """Each group of spans with the whitespace before it (after it, when it goes in front of the next word or has
    none before it), so that the text reads on without it."""
    out, at = [], 0
    for a, b in groups(text, spans):
        ahead, start, end = forward(text, a, b), a, b
        if ahead or not (a > at and text[a - 1].isspace()):
            while end < len(text) and text[end].isspace():
                end += 1
        else:
            while start > at and text[start - 1].isspace():
                start -= 1
        left, right = text[start - 1 : start], text[end : end + 1]
        out.append(Cut(start, end, " " if left and right and _word(left) and _word(right) else "", ahead))
        at = end
    return out


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
        """What the model reads: `text`, or "" when the groups left nothing to translate (no letter or digit): the
        piece then comes back as written."""
        return self.text if not self.groups or any(c.isalnum() for c in self.text) else ""

    def segment(self, seg: Segment) -> Segment:
        """A segment of `text` (its ends not whitespace) as a segment of `source`: its groups in it, or outside."""
        if not self.groups:
            return seg
        return Segment(self.to_source[seg.start], self.to_source[seg.end - 1] + 1)

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
            spaced = (g.before or _word(last)) and not g.joined_left and not _opens(last, nxt)
            lead = " " if last and not last.isspace() and spaced else ""
            spaced = (g.after or _word(nxt)) and not g.joined_right and not _closes(nxt, target[p + 1 : p + 2])
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
        words_meet = _word(right_char) and (before or _word(left_char))
        joiner = " " if left_char and right_char and (after or words_meet) else ""
        if joiner and re.search("[\r\n]", piece[cut:a] + piece[b:upto]):
            joiner = "\n"  # a line break stays one: lines are segments (app/segment.py)
        joined = (not before and _word(piece[a - 1 : a]), not after and _word(piece[b : b + 1]))
        tags = tuple(t for s in spans if a <= s[0] < b for t in _tags(piece[s[0] : s[1]]))
        found.append(Group(a, b, before, after, *joined, length, length + len(joiner), forward(piece, a, b), tags))
        out.append(joiner)
        to_source += [upto] * len(joiner)
        length += len(joiner)
        at = upto
    out.append(piece[at:])
    to_source += [*range(at, len(piece)), len(piece)]
    return Masked(piece, "".join(out), tuple(found), tuple(to_source))


# ---- restoring -----------------------------------------------------------------------------------------------------


class Anchors:
    """Where a span goes in a translation, by the alignment of the words around it (see the module's docstring)."""

    def __init__(self, source: str, target: str, pairs: list[Pair]):
        self.source, self.target = source, target
        pairs = [(t, s) for t, s in pairs if t[0] < t[1] and s[0] < s[1]]
        self.ends = sorted((s[1], t[1]) for t, s in pairs)  # by source end: the last one before a place
        self.starts = sorted((s[0], t[0]) for t, s in pairs)  # by source start: the first one after a place
        words = [i for i, c in enumerate(source) if c.isalnum()]
        self.first, self.last = (words[0], words[-1] + 1) if words else (len(source), 0)
        text = [i for i, c in enumerate(source) if not c.isspace()]
        self.first_text, self.last_text = (text[0], text[-1] + 1) if text else (len(source), 0)

    def place(self, left: int, right: int, forward: bool) -> int:
        """Where in the translation the span between source[:left] and source[right:] goes."""
        t = self.target
        if self.first >= left:  # no word before it: at the start
            return _opening(t) if self.first_text < left else 0
        if self.last <= right:  # no word after it: at the end
            return _closing(t) if self.last_text > right else len(t)
        if not self.ends:  # no alignment: its share of the way through
            x = round(len(t) * left / max(len(self.source), 1))
            return _word_start(t, x) if forward else _word_end(t, x)
        if forward:
            i = bisect_left(self.starts, (right, -1))
            return _word_start(t, self.starts[i][1]) if i < len(self.starts) else len(t)
        i = bisect_right(self.ends, (left, len(t) + 1)) - 1
        return _word_end(t, self.ends[i][1]) if i >= 0 else 0


def _quote(c: str) -> bool:
    return bool(c) and (c in "\"'«»„“”‚‘’" or unicodedata.category(c) in ("Pi", "Pf"))


def _opens(c: str, after: str) -> bool:
    """Punctuation a space does not follow: an opening bracket, or a quote with a word after it (`after`)."""
    if _quote(c):
        return _word(after)
    return bool(c) and (c in "([{¿¡" or unicodedata.category(c) == "Ps")


def _closes(c: str, after: str) -> bool:
    """Punctuation a space does not come before: a full stop, comma, closing bracket, or a quote with no word after
    it (`after`): which way a quote faces depends on the language („so“, »so«, “so”)."""
    if _quote(c):
        return not _word(after)
    return bool(c) and (c in ".,;:!?…%" or unicodedata.category(c) == "Pe")


def _opening(t: str) -> int:
    """After the translation's opening punctuation."""
    i = 0
    while i < len(t) and not t[i].isalnum() and not t[i].isspace():
        i += 1
    return i


def _closing(t: str) -> int:
    """Before the translation's closing punctuation."""
    j = len(t)
    while j > 0 and not t[j - 1].isalnum() and not t[j - 1].isspace():
        j -= 1
    return j


def _inside(t: str, x: int) -> bool:
    """Whether place x of t is inside a word (a hyphen or an apostrophe between two letters is part of it)."""

    def part(i: int) -> bool:
        return _word(t[i]) or t[i] in "-'’" and 0 < i < len(t) - 1 and _word(t[i - 1]) and _word(t[i + 1])

    return 0 < x < len(t) and part(x - 1) and part(x)


def _word_end(t: str, x: int) -> int:
    while _inside(t, x):
        x += 1
    return x


def _word_start(t: str, x: int) -> int:
    while _inside(t, x):
        x -= 1
    return x


@dataclass(frozen=True)
class Restored:
    """A translation with its groups put back, and what went where: (its place in the translation, the text)."""

    text: str
    insertions: tuple[tuple[int, str], ...] = ()

    def shift(self, x: int, end: bool = False) -> int:
        """A place in the translation as a place in `text`: after what went in there, or before it (`end`)."""
        return x + sum(len(s) for p, s in self.insertions if (p < x if end else p <= x))

    def span(self, span: Span) -> Span:
        return self.shift(span[0]), self.shift(span[1], end=True)

    def deltas(self, target: str, ends: list[int]) -> list[str]:
        """What each token adds to `text`, where token i ends at ends[i] of the translation `target`: a group goes
        with the token it follows (the first token takes those at the start, the last those at the end)."""
        out, k, at = [], 0, 0
        for i, e in enumerate(ends):
            last, parts = i == len(ends) - 1, []
            while k < len(self.insertions) and (self.insertions[k][0] <= e or last):
                p, s = self.insertions[k]
                parts += [target[at:p], s]
                at, k = max(at, p), k + 1
            parts.append(target[at:] if last else target[at:e])
            at = len(target) if last else max(at, e)
            out.append("".join(parts))
        return out
