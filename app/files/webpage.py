"""HTML pages (.html, .htm): a unit per block of text and per translated attribute outside one (app.html's
HtmlDocument.parts), so that a page of any size translates in requests of the engine's size: each block's flow as
written is a markup unit, which /translate's HTML path translates as it would in the page (its inline tags placed by
alignment), each attribute (title, alt, ...) a plain one; the rest (tags as written, comments, doctype, entities,
scripts, styles, code, elements with translate="no") comes back byte for byte.

The page's encoding is its byte-order mark's (UTF-8, UTF-16), else the charset its first 4096 bytes declare
(`<meta charset="..">` or `<meta http-equiv="Content-Type" content="..; charset=..">`), else UTF-8; the translated
page is written in it again, the mark kept, a character it cannot hold as an HTML character reference (`&#8364;`).
A page the parser cannot read back as written (an unterminated tag or comment, crossing or unclosed elements) is
refused here, saying what and where, before anything is translated.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

from app.files import FileError, FileLimits, FileTooLarge, Unit, unchanged
from app.html import MalformedHtml, Part, parse

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_META = re.compile(rb"<meta\s[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)


@dataclass
class Page:
    bom: bytes
    encoding: str
    data: bytes
    parts: list[str | Part]
    units: list[Unit] = field(default_factory=list)

    def write(self, translations: list[str]) -> bytes:
        if unchanged(self.units, translations):
            return self.data
        done = iter(translations)
        page = "".join(p if isinstance(p, str) else p.put(next(done)) for p in self.parts)
        return self.bom + page.encode(self.encoding, errors="xmlcharrefreplace")


def _encoding(data: bytes) -> tuple[bytes, str, str]:
    """The byte-order mark, the encoding, and where it was found."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return bom, name, "its byte-order mark"
    if m := _META.search(data, 0, 4096):
        name = m[1].decode("ascii").lower()
        try:
            return b"", codecs.lookup(name).name, f"its <meta> charset {name!r}"
        except LookupError:
            raise FileError(f"the page declares the charset {name!r}, which is not known") from None
    return b"", "utf-8", "the default (it declares no charset)"


def read(data: bytes, limits: FileLimits) -> Page:
    bom, encoding, said = _encoding(data)
    try:
        page = data[len(bom) :].decode(encoding)
    except UnicodeDecodeError as e:
        at = e.start + len(bom)
        line = data.count(b"\n", 0, at) + 1
        raise FileError(
            f"the page is not {encoding} ({said}): byte {at} (line {line}) is {data[at : at + 1]!r}"
        ) from None
    if "\x00" in page:
        raise FileError("the page holds NUL characters: it is a binary file, not HTML")
    if len(page) > limits.max_chars:  # the page is the unit: refused before parsing (~2 us a character)
        raise FileTooLarge(f"the file has {len(page)} characters to translate; the limit is {limits.max_chars}")
    try:
        parts = parse(page).parts()
    except MalformedHtml as e:
        raise FileError(f"the HTML page cannot be read: {e}") from None
    units = [Unit(p.text, markup=p.markup) for p in parts if isinstance(p, Part)]
    return Page(bom, encoding, data, parts, units)
