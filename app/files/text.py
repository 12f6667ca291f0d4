"""Plain text (UTF-8, a byte-order mark kept): one unit per paragraph, paragraphs being runs of lines between blank
lines; the lines of a paragraph are translated together (the engine splits them into sentences), and everything
between paragraphs (blank lines, line endings) comes back as written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.files import FileError, FileLimits, Unit

_BLANK = re.compile(r"(?:\r\n|\r|\n)[ \t]*(?:\r\n|\r|\n)(?:[ \t]*(?:\r\n|\r|\n))*")
_BOM = "\ufeff"


@dataclass
class TextFile:
    pieces: list[str]  # between, unit, between, unit, ..., between
    units: list[Unit] = field(default_factory=list)

    def write(self, translations: list[str]) -> bytes:
        out = list(self.pieces)
        out[1::2] = translations
        return "".join(out).encode()


def read(data: bytes, limits: FileLimits) -> TextFile:
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise FileError(f"the text file is not UTF-8: byte {e.start} is {data[e.start : e.start + 1]!r}") from None
    if "\x00" in text:
        raise FileError("the text file holds NUL characters: it is a binary file, not text")
    pieces = [_BOM] if text.startswith(_BOM) else [""]
    text = text.removeprefix(_BOM)
    at = 0
    for blank in [*_BLANK.finditer(text), None]:
        end = len(text) if blank is None else blank.start()
        body = text[at:end]
        lead = len(body) - len(body.lstrip())
        trail = len(body.rstrip())
        if body.strip():
            pieces[-1] += body[:lead]
            pieces += [body[lead:trail], body[trail:]]
        else:
            pieces[-1] += body
        if blank is not None:
            pieces[-1] += blank.group()
            at = blank.end()
    return TextFile(pieces, [Unit(p) for p in pieces[1::2]])
