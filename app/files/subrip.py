"""SubRip subtitles (.srt): each cue's text translated; indexes, timing lines, blank lines and line endings come back
as written, and so does any cue whose translation is its own text.

A cue's lines are one unit, joined by spaces (a sentence often runs over both lines of a cue; the engine splits
sentences), and the translation is put back on as many lines as the cue had, each break at the space nearest the
point where the source's line ended, in proportion (app/files/inline.py). A dialogue dash starts a speaker's line:
a dash and a space ("- Where?", "– Here."), on any line, one alone included; or, where two or more lines of the cue
start with a dash, one without the space too ("-Where?" / "-Here."), but never "-5 degrees" alone. Each speaker is a
unit of their own, from the line with their dash to the next speaker's (the lines before the first speaker's are one
too), put back on as many lines as theirs were, behind their dash as written. Formatting tags (`<i>`, `<b>`, `<u>`,
`<font color=..>`, any `<tag>`) and ASS overrides (`{\\an8}`) are inline codes: a start tag and its end tag wrap
the words aligned to the ones they wrapped; a tag without its pair (and `{\\..}`) is a point placed after the word
aligned to the one before it; a start tag never closed in its cue wraps the rest of it. Each comes back exactly once.

The srt library reads a file with one backtracking regular expression that takes time in the square of a line of
digits' length (8,000 digits: 1.6 s here, so a 20 MB upload would hang a worker), and its writer renumbers and
reformats; so the lines are read here with its grammar (an optional index, a timing line `00:00:01,000 -->
00:00:04,000` with "," or "." before the milliseconds, blank lines inside a cue where the next lines are not a cue, no
blank line needed at the end), in linear time, and srt parses the timestamps. UTF-8 only (a byte-order mark kept).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import srt

from app.files import FileError, FileLimits, FileTooLarge, Unit, one_each
from app.files.inline import Fragment, lines, tagged

_TS = r"[0-9]+[,.:，．。：][0-9]+[,.:，．。：][0-9]+(?:[,.:，．。：][0-9]*)?"  # as srt's, unambiguous
_TIMING = re.compile(rf"\s*({_TS}) *-[ -] *> *({_TS})(?: [^\r\n]*)?\s*\Z")
_TIMING_LIKE = re.compile(r"\s*[0-9]+[,.:][0-9]|.*-->")  # a line meant as a timing line
_INDEX = re.compile(r"\s*-?[0-9]+(?:\.[0-9]*)?\s*\Z")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|\Z)")
_SRT_CODES = re.compile(r"</?([A-Za-z][\w.-]*+)[^<>\r\n]*>|\{\\[^{}\r\n]*\}")
_DASH = re.compile(r"[-‐‑–—]\s*")  # a dialogue's dash, spaced or not ("-Where?" / "-Here.")
_SPOKEN = re.compile(r"[-‐‑–—]\s+")  # a dash and a space, as one speaker's line is written ("- Where?"), not "-5"


@dataclass
class Cue:
    """A cue's text (its lines without their endings) as units: one a speaker, a speaker's lines from the one that
    starts with their dash to the next speaker's (lines before the first speaker's are one of their own)."""

    lines: list[str]
    codes: re.Pattern = _SRT_CODES  # a tag (group 1: its name) or a point code
    decode: Callable[[str], str] = str  # the text between codes as the model reads it, and back
    encode: Callable[[str], str] = str
    speaker: re.Pattern = _DASH  # what starts a speaker's line where two or more lines of the cue start with one
    dash: re.Pattern = _SPOKEN  # what starts a speaker's line wherever it is
    fragments: list[Fragment] = field(default_factory=list)
    dashes: list[str] = field(default_factory=list)  # per speaker, what starts their first line, as written
    parts: list[list[str]] = field(default_factory=list)  # per speaker, their lines without it
    units: list[Unit] = field(default_factory=list)

    def __post_init__(self) -> None:
        dialogue = sum(bool(self.speaker.match(line.lstrip())) for line in self.lines) > 1
        for line in self.lines:
            m = (self.speaker if dialogue else self.dash).match(line.lstrip())
            if m or not self.parts:
                dash = line[: len(line) - len(line.lstrip()) + m.end()] if m else ""
                self.dashes.append(dash)
                self.parts.append([line[len(dash) :]])
            else:
                self.parts[-1].append(line)
        self.fragments = [self.fragment(lines_) for lines_ in self.parts]
        self.units = [f.unit() for f in self.fragments]

    def fragment(self, lines_: list[str]) -> Fragment:
        return tagged(" ".join(line.strip() for line in lines_), self.codes, self.decode)

    def render(self, translations: list[str]) -> list[str]:
        """The cue's lines with these translations of its units: each speaker's on as many lines as theirs were."""
        out: list[str] = []
        for dash, lines_, f, t in zip(self.dashes, self.parts, self.fragments, translations):
            parts = self._parts(f, t, lines_)
            out += [dash + parts[0], *parts[1:]]
        return out

    def _parts(self, f: Fragment, translation: str, lines_: list[str]) -> list[str]:
        parts: list[tuple[str, bool]] = []
        for kind, x in f.back(translation):
            text = self.encode(x) if kind == "text" else x.end if kind == "close" else x.start
            parts.append((text.replace("\r", " ").replace("\n", " "), kind == "text"))
        return lines(parts, [len(line.strip()) or 1 for line in lines_])


@dataclass
class Subtitles:
    """A subtitle file as the text between its cues' texts, and the cues (each with its text as written)."""

    pieces: list[str]  # text, cue, text, ..., cue, text
    cues: list[Cue]
    raws: list[str]  # per cue, its text as written
    units: list[Unit] = field(default_factory=list)
    bom: str = ""

    def __post_init__(self) -> None:
        self.units = [u for c in self.cues for u in c.units]

    def write(self, translations: list[str]) -> bytes:
        one_each(self.units, translations)
        out, at = [self.bom, self.pieces[0]], 0
        for cue, raw, between in zip(self.cues, self.raws, self.pieces[1:]):
            mine, at = translations[at : at + len(cue.fragments)], at + len(cue.fragments)
            if all(t == u.text for t, u in zip(mine, cue.units)):
                out.append(raw)
            else:
                ending = re.search(r"\r\n|\r|\n", raw)
                out.append((ending[0] if ending else "\n").join(cue.render(mine)))
            out.append(between)
        return "".join(out).encode()


def decode(data: bytes, what: str) -> tuple[str, str]:
    """The file's text (UTF-8) without its byte-order mark, and the mark."""
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise FileError(
            f"the {what} file is not UTF-8: byte {e.start} (line {line}) is {data[e.start : e.start + 1]!r}"
        ) from None
    if "\x00" in text:
        raise FileError(f"the {what} file holds NUL characters: it is a binary file, not text")
    return text.removeprefix("\ufeff"), "\ufeff" if text.startswith("\ufeff") else ""


def split_lines(text: str) -> list[str]:
    """The text's lines, each with its line ending."""
    return [m[0] for m in _LINE.finditer(text) if m[0]]


def read(data: bytes, limits: FileLimits) -> Subtitles:
    text, bom = decode(data, "SubRip")
    rows = split_lines(text)
    blank = [not r.strip() for r in rows]

    def starts_cue(i: int) -> int | None:
        """The timing line of a cue that starts at line i (an index line, then it, or it), else None."""
        if i < len(rows) and _TIMING.match(rows[i]):
            return i
        if i + 1 < len(rows) and _INDEX.match(rows[i]) and _TIMING.match(rows[i + 1]):
            return i + 1
        return None

    def refuse(i: int, what: str) -> FileError:
        return FileError(f"line {i + 1} of the SubRip file: {what}; found {rows[i].rstrip()[:80]!r}")

    def timing_at(i: int) -> int | None:
        """A line that looks like a timing line but is not one, at i or after an index line at i."""
        if _TIMING_LIKE.match(rows[i]):
            return i
        return i + 1 if _INDEX.match(rows[i]) and i + 1 < len(rows) and _TIMING_LIKE.match(rows[i + 1]) else None

    pieces, cues, raws, fixed, i = [], [], [], [], 0
    while i < len(rows):
        if blank[i]:
            fixed.append(rows[i])
            i += 1
            continue
        timing = starts_cue(i)
        if timing is None:
            bad = timing_at(i)
            what = "a timing line that cannot be read" if bad is not None else "expected a cue: an index line, then"
            raise refuse(i if bad is None else bad, f"{what} a timing line like '00:00:01,000 --> 00:00:04,000'")
        for ts in _TIMING.match(rows[timing]).groups():
            try:
                srt.srt_timestamp_to_timedelta(ts)
            except ValueError:
                raise refuse(
                    timing, f"the timestamp {ts!r} cannot be read (hours:minutes:seconds,milliseconds)"
                ) from None
        fixed += rows[i : timing + 1]
        j = end = timing + 1  # the cue's text is rows[timing + 1 : end]
        while j < len(rows):
            if blank[j]:
                k = j
                while k < len(rows) and blank[k]:
                    k += 1
                if k == len(rows) or starts_cue(k) is not None:
                    break
                if (bad := timing_at(k)) is not None:
                    raise refuse(
                        bad, "a timing line that cannot be read (a cue's is like '00:00:01,000 --> 00:00:04,000')"
                    )
                j = k
            elif j > timing + 1 and starts_cue(j) is not None:
                break  # the next cue, without a blank line before it
            j += 1
            end = j
        if end > timing + 1:
            raw = "".join(rows[timing + 1 : end])
            text_end = len(raw.rstrip("\r\n"))
            pieces.append("".join(fixed))
            raws.append(raw[:text_end])
            cues.append(Cue([r.rstrip("\r\n") for r in split_lines(raw[:text_end])]))
            fixed = [raw[text_end:]]
            if len(cues) > limits.max_units:
                raise FileTooLarge(f"the file has more than {limits.max_units} cues; the limit is {limits.max_units}")
        i = end
    return Subtitles([*pieces, "".join(fixed)], cues, raws, bom=bom)
