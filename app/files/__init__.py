"""Files to translate (/files, LibreTranslate's /translate_file, DeepL's /v2/document): each format reads a file into
units of text and writes the file back with their translations, through the format's own maintained library.

A format is a module of this package with a FORMAT (its names, extensions and media type) and a function
`read(data: bytes, limits: FileLimits) -> Extracted`. Extracted holds the units to translate, in reading order, and
writes the file with one translation per unit; given each unit's own text back, it writes a file equal to the input
(byte for byte, or after the library's own round trip). Reading never executes or fetches anything a file holds.

A unit is plain text, or (`markup`) an HTML fragment whose inline tags stand for the formatting runs of a
paragraph (bold, italic, links, a format's inline codes): it is translated as one sentence by /translate's HTML path
(app/html/) and the tags come back around the words aligned to the ones they wrapped. `placeholders` asks for the
built-in placeholder kinds to be kept verbatim (app/protect/): PO and XLIFF strings.

Formats are imported only when a file of theirs arrives, so the server imports none of their libraries to start.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

from app.engine.errors import InputTooLong, InvalidRequest


class FileError(InvalidRequest):
    """The file is malformed, hostile or not of the format it claims: a 422 saying what is wrong."""


class FileTooLarge(InputTooLong):
    """The file breaks a size limit (bytes, uncompressed bytes, units or characters): a 413 saying which."""


@dataclass(frozen=True)
class FileLimits:
    max_bytes: int = 20 * 2**20  # the upload
    max_uncompressed: int = 200 * 2**20  # the members of a zip container (DOCX, PPTX, XLSX, ODT), together
    max_ratio: int = 100  # a zip member's uncompressed over compressed size: above it, a zip bomb
    max_members: int = 10_000  # entries of a zip container
    # tags of markup ("<"s) in a file's XML or HTML (a zip container's members together): each element costs its
    # parser hundreds of bytes, so that a few MB of "<a/>" would take gigabytes
    max_tags: int = 1_000_000
    max_units: int = 100_000  # units to translate
    max_chars: int = 5_000_000  # characters of those units, together


@dataclass(frozen=True)
class Unit:
    text: str
    markup: bool = False  # an HTML fragment: inline tags stand for runs (app/html/place.py places them)
    placeholders: bool = False  # keep the built-in placeholder kinds verbatim (app/protect/)


class Extracted(Protocol):
    units: list[Unit]

    def write(self, translations: list[str]) -> bytes:
        """The file with each unit's translation in place of its text (one per unit, in order)."""
        ...


@dataclass(frozen=True)
class Format:
    name: str  # as an API names it: "docx"
    extensions: tuple[str, ...]  # the first is what a translated file's name gets
    media_type: str
    module: str  # app.files.<module>, imported on first use

    def read(self, data: bytes, limits: FileLimits, language: str | None = None) -> Extracted:
        """The file's units; `language`, the target's, goes into the file where it says its language (PO, XLIFF)."""
        if len(data) > limits.max_bytes:
            raise FileTooLarge(f"the file has {len(data)} bytes; the limit is {limits.max_bytes}")
        if self.module in MARKUP:
            tagged(data, limits, "file")
        reader: Callable[..., Extracted] = importlib.import_module(f"app.files.{self.module}").read
        says = "language" in inspect.signature(reader).parameters
        extracted = reader(data, limits, language=language) if says else reader(data, limits)
        check(extracted.units, limits)
        return extracted


_OOXML = "application/vnd.openxmlformats-officedocument"
FORMATS = {f.name: f for f in (
    Format("txt", (".txt",), "text/plain", "text"),
    Format("html", (".html", ".htm"), "text/html", "webpage"),
    Format("docx", (".docx",), f"{_OOXML}.wordprocessingml.document", "word"),
    Format("pptx", (".pptx",), f"{_OOXML}.presentationml.presentation", "powerpoint"),
    Format("xlsx", (".xlsx",), f"{_OOXML}.spreadsheetml.sheet", "excel"),
    Format("odt", (".odt",), "application/vnd.oasis.opendocument.text", "odt"),
    Format("srt", (".srt",), "application/x-subrip", "subrip"),
    Format("vtt", (".vtt",), "text/vtt", "webvtt"),
    Format("po", (".po", ".pot"), "text/x-gettext-translation", "po"),
    Format("xliff", (".xlf", ".xliff"), "application/xliff+xml", "xliff"),
    Format("md", (".md", ".markdown"), "text/markdown", "markdown"),
)}  # fmt: skip


MARKUP = {"webpage", "xliff"}  # the formats read as a tree of elements (those in zip containers: app/files/zipped.py)


def tagged(data: bytes, limits: FileLimits, what: str, before: int = 0) -> int:
    """The tags of markup in `data` (its "<"s) and `before` them; a FileTooLarge past max_tags."""
    tags = before + data.count(b"<")
    if tags > limits.max_tags:
        raise FileTooLarge(
            f"the {what} has more than {limits.max_tags} tags of markup; the limit is {limits.max_tags} (each element "
            "is a tree node to hold)"
        )
    return tags


_OBJECT = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def said(error: Exception) -> str:
    """What a library's error says of an upload, without the addresses of this process's objects in it (python-pptx:
    "Package not found at '<_io.BytesIO object at 0x7fa6...>'")."""
    return _OBJECT.sub("upload", str(error))


def one_each(units: list[Unit], translations: list[str]) -> None:
    """A ValueError unless there is one translation a unit (what Extracted.write takes)."""
    if len(translations) != len(units):
        raise ValueError(f"{len(units)} units, {len(translations)} translations")


def unchanged(units: list[Unit], translations: list[str]) -> bool:
    """Whether each unit's translation is its own text: a format then gives the file back as it came."""
    one_each(units, translations)
    return all(t == u.text for t, u in zip(translations, units, strict=True))


def check(units: list[Unit], limits: FileLimits) -> None:
    if len(units) > limits.max_units:
        raise FileTooLarge(f"the file has {len(units)} segments to translate; the limit is {limits.max_units}")
    chars = sum(len(u.text) for u in units)
    if chars > limits.max_chars:
        raise FileTooLarge(f"the file has {chars} characters to translate; the limit is {limits.max_chars}")


def detect(filename: str | None, name: str | None = None) -> Format:
    """The format a request names (`name`), else the one its file name's extension says."""
    if name is not None:
        if name.lower() not in FORMATS:
            raise InvalidRequest(f"unknown file format {name!r}; the formats are {', '.join(sorted(FORMATS))}")
        return FORMATS[name.lower()]
    suffix = PurePath(filename or "").suffix.lower()
    for f in FORMATS.values():
        if suffix in f.extensions:
            return f
    known = ", ".join(e for f in FORMATS.values() for e in f.extensions)
    raise InvalidRequest(f"cannot tell the format of {filename!r} from its name; the extensions known are {known}")
