"""Finding protected spans: the built-in kinds, literal terms and user patterns (RE2, within limits of count, length
and program size), leftmost first, the longest where several start at one place, never overlapping."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate

import re2

from app.engine.errors import InputTooLong, InvalidRequest
from app.protect.masking import Cut, cuts
from app.protect.restoring import Anchors, Pair, Span

MAX_TERMS = 256  # protect_terms a request
MAX_TERM_CHARS = 200
MAX_PATTERNS = 16  # protect_patterns a request
MAX_PATTERN_CHARS = 500
MAX_PROGRAM_SIZE = 5_000  # RE2's program size (instructions) of one pattern: [\pL\pN]{1,3} is 4,032
PATTERN_MEMORY = 1 << 20  # RE2's memory budget of one user pattern (its compiling and its DFA)
EMPTY_PROBES = ("", " ", "a", "A b", "0", "\n", "-", "a\nb")  # where a pattern that can match nothing shows it

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
    """Literal terms, each where it stands as whole words (not inside a longer word: a hyphen or an apostrophe
    between letters is inside one, as in app/protect/restoring.py), the longest first; a term's whitespace at its
    ends is not part of it."""

    def __init__(self, terms: tuple[str, ...]):
        self.regex = _terms_regex(tuple(dict.fromkeys(t.strip() for t in terms)))

    def next(self, t: _Text, at: int) -> Span | None:
        m = self.regex.search(t.text, at)
        return None if m is None else m.span()


@lru_cache(maxsize=64)
def _terms_regex(terms: tuple[str, ...]) -> re.Pattern:
    def bounded(term: str) -> str:  # a word boundary only where the term's own end is a word character
        return (
            ("(?<!\\w)(?<!\\w[-'’])" if re.match(r"\w", term) else "")
            + re.escape(term)
            + ("(?!\\w)(?![-'’]\\w)" if re.search(r"\w\Z", term) else "")
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

    def cuts(self, text: str, before: str = "") -> list[Cut]:
        """Where to cut the protected spans out of a text that keeps them aside rather than masking them (app.html's
        text runs, whose spans become kept elements; `before`: how the text before the run ends)."""
        return cuts(text, self.spans(text), before)

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


# what files and the compatible APIs keep verbatim, as DeepL does (a model given a URL writes words in its place)
ADDRESSES = protection(["urls", "emails"], None, None)
