"""WebVTT subtitles (.vtt): each cue's text translated; the header, NOTE, STYLE and REGION blocks, cue identifiers,
timing lines with their cue settings, blank lines and line endings come back as written, and so does any cue whose
translation is its own text.

A cue's text is translated as SubRip's is (app/files/subrip.py): its lines as one unit put back on as many lines,
a speaker's lines one unit with their dash kept ("- Where?" on any line; where two or more lines of the cue start
with a dash or a `<v Speaker>` tag, each of those starts a speaker, the dash or the voice tag kept). The cue's tags
(`<v Speaker>`, `<c.class>`, `<i>`, `<b>`, `<u>`, `<ruby>`, `<lang en>`) are inline codes, a start tag and its end
tag wrapping the words aligned to the ones they wrapped, and a timestamp tag (`<00:00:01.500>`), a ruby's annotation
with its text (`<rt>inu</rt>`, kept as written) or a tag without its pair a point after the word aligned to the one
before it; each comes back exactly once. Entities (`&amp;`, `&lt;`, `&nbsp;`) are read as their characters; a translation's "&", "<" and ">"
are written as `&amp;`, `&lt;` and `&gt;`.

webvtt-py writes a file of its own layout (it drops blank lines and line endings and moves comments), so the blocks
are read here by its rules (a block ends at an empty line, or where a line with "-->" cannot be its timing line) and
classified by its block classes: a cue by WebVTTCueBlock (a timing line first or after an identifier), anything
else as written. A block with "-->", or whose first or second line starts with a timestamp, that is not a cue (nor a
NOTE) is refused, its line named: a timing line that cannot be read. UTF-8 only.
"""

from __future__ import annotations

import html
import re

from webvtt.vtt import WebVTTCueBlock

from app.files import FileError, FileLimits, FileTooLarge
from app.files.subrip import Cue, Subtitles, decode, split_lines

# a ruby's annotation with its text (a point, kept as written: the reading of the words before it), a tag (group 1:
# its name), a timestamp
_CODES = re.compile(
    r"<rt\b[^<>\r\n]*>[^<\r\n]*(?:</rt\s*>)?|</?([A-Za-z]\w*+)[^<>\r\n]*>|<[0-9][^<>\r\n]*>", re.IGNORECASE
)
_TIMESTAMP = re.compile(r"\s*(?:[0-9]+:)?[0-9]{1,2}:[0-9]{1,2}[.,:][0-9]")  # what a timing line starts with
_SPEAKER = re.compile(r"[-‐‑–—]\s*|<v[\s.][^<>\r\n]*>\s*")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _blocks(rows: list[str]) -> list[list[int]]:
    """The rows of each block (webvtt-py's _iter_blocks_of_lines, with the rows' numbers)."""
    blocks, block, header = [], [], True
    for i, row in enumerate(rows):
        line = row.rstrip("\r\n")
        starts = block and "-->" in line and (header or len(block) > 1 or "-->" in rows[block[0]])
        if (not line or starts) and block:
            blocks.append(block)
            block, header = [], False
        if line:
            block.append(i)
    return blocks + ([block] if block else [])


def read(data: bytes, limits: FileLimits) -> Subtitles:
    text, bom = decode(data, "WebVTT")
    rows = split_lines(text)
    first = rows[0].rstrip("\r\n") if rows else ""
    if not (first.startswith("WEBVTT") and first[6:7] in ("", " ", "\t")):
        raise FileError(f"line 1 of the WebVTT file: a WebVTT file starts with 'WEBVTT'; found {first[:80]!r}")
    pieces, cues, raws, done = [], [], [], 0  # done: the rows written as pieces or cues
    for block in _blocks(rows)[1:]:
        lines = [rows[i].rstrip("\r\n") for i in block]
        if not WebVTTCueBlock.is_valid(lines):
            arrow = next((i for i in block if "-->" in rows[i]), None)
            if arrow is None:
                arrow = next((i for i in block[:2] if _TIMESTAMP.match(rows[i])), None)
            if arrow is not None and not lines[0].startswith("NOTE"):
                raise FileError(
                    f"line {arrow + 1} of the WebVTT file: a cue timing line that cannot be read; found "
                    f"{rows[arrow].rstrip()[:80]!r} (a cue's is like '00:00:01.000 --> 00:00:04.000 align:start')"
                )
            continue
        timing = block[0] if WebVTTCueBlock.CUE_TIMINGS_PATTERN.match(lines[0]) else block[1]
        if timing == block[-1]:
            continue  # a cue without text
        raw = "".join(rows[timing + 1 : block[-1] + 1])
        text_end = len(raw.rstrip("\r\n"))
        pieces.append("".join(rows[done : timing + 1]))
        raws.append(raw[:text_end])
        cue_lines = [r.rstrip("\r\n") for r in split_lines(raw[:text_end])]
        cues.append(Cue(cue_lines, _CODES, html.unescape, _escape, _SPEAKER))
        rows[block[-1]] = rows[block[-1]][len(rows[block[-1]].rstrip("\r\n")) :]  # its line ending, after the cue
        done = block[-1]
        if len(cues) > limits.max_units:
            raise FileTooLarge(f"the file has more than {limits.max_units} cues; the limit is {limits.max_units}")
    return Subtitles([*pieces, "".join(rows[done:])], cues, raws, bom=bom)
