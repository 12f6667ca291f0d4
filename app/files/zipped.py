"""Zip containers (DOCX, PPTX, XLSX, ODT), read and checked before any library sees them.

read() refuses, saying what is wrong:
- bytes that are not a zip (a truncated one among them: its directory is at the end), an encrypted member, a
  compression zipfile cannot read, a corrupt member (its CRC, its stream), two members of one name: FileError;
- more than `max_members` entries (as the zip's end record counts them, before zipfile reads their headers; then
  as read), members declaring more than `max_uncompressed` bytes together, a member larger than 1 MiB declaring
  more than `max_ratio` times its compressed size (a zip bomb): FileTooLarge, before anything is decompressed.
  Members are then decompressed in chunks, counted as they come: a header that lies about a size is caught by the
  same limits (and by zipfile, which stops at the declared size and checks the CRC), so no more than the limits is
  ever held;
- an XML member (one that starts with `<`, in UTF-8, UTF-16 or UTF-32) with a DOCTYPE or an ENTITY declaration
  (entity expansion, external entities), or in an encoding that could hide one: FileError. The one DOCTYPE let
  through is an SVG image's without declarations (`<!DOCTYPE svg PUBLIC ...>`), which no library here parses.

Nothing a member names is fetched or run: links, linked images and external relationships are left as written.
rezipped() writes a container anew in the order it came, `mimetype` first and stored (ODF asks for both).
"""

from __future__ import annotations

import codecs
import io
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass

from lxml import etree

from app.files import FileError, FileLimits, FileTooLarge, tagged

_CHUNK = 2**16
_RATIO_FLOOR = 2**20  # members smaller than this are not held to max_ratio: little XML files compress well
_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
           RuntimeError, KeyError, IndexError)  # fmt: skip
_DECLARATION = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_ENCODING = re.compile(rb"""\A\s*<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)""")
_READABLE = {"utf-8", "utf8", "us-ascii", "ascii", "iso-8859-1", "latin1", "latin-1", "windows-1252", "cp1252"}
_WIDE = [  # how a member in a wide encoding begins (a byte-order mark, else "<"), and that encoding
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (b"<\0\0\0", "utf-32-le"),
    (b"\0\0\0<", "utf-32-be"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
    (b"<\0", "utf-16-le"), (b"\0<", "utf-16-be"),
]  # fmt: skip


@dataclass(frozen=True)
class Container:
    kind: str  # what the file claims to be, for messages: "DOCX"
    infos: list[zipfile.ZipInfo]  # the members in the order they came
    members: dict[str, bytes]  # their contents, by name

    def xml(self, name: str) -> bytes:
        """A member the format cannot do without."""
        if name not in self.members:
            raise FileError(f"the {self.kind} file has no {name}: it is a zip container, but no {self.kind} file")
        return self.members[name]

    def office_main(self) -> str:
        """An Office Open XML package's main part, which its `_rels/.rels` names: there, or a FileError."""
        try:
            rels = etree.fromstring(self.xml("_rels/.rels"), etree.XMLParser(resolve_entities=False, no_network=True))
        except etree.XMLSyntaxError as e:
            raise FileError(f"the {self.kind} file's _rels/.rels is not well-formed XML: {e}") from None
        targets = [r.get("Target", "") for r in rels if r.get("Type", "").endswith("/officeDocument")]
        if not targets:
            raise FileError(f"the {self.kind} file's _rels/.rels names no main part: it is no {self.kind} file")
        main = targets[0].lstrip("/")
        self.xml(main)
        return main

    def rezipped(self, replaced: dict[str, bytes]) -> bytes:
        """The container with some members' contents replaced, in the same order, `mimetype` first and stored."""
        out = io.BytesIO()
        infos = sorted(self.infos, key=lambda i: i.filename != "mimetype")
        with zipfile.ZipFile(out, "w") as z:
            for info in infos:
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.external_attr, copy.comment = info.external_attr, info.comment
                stored = info.filename == "mimetype" or info.compress_type == zipfile.ZIP_STORED
                copy.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
                z.writestr(copy, replaced.get(info.filename, self.members[info.filename]))
        return out.getvalue()


def read(data: bytes, limits: FileLimits, kind: str) -> Container:
    """The members of a zip container, checked (see the module's docstring)."""
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))  # the end record, before zipfile reads them all
    if end >= 0 and len(data) >= end + 22 and (n := struct.unpack_from("<H", data, end + 10)[0]) > limits.max_members:
        raise FileTooLarge(f"the {kind} file has {n} zip entries; the limit is {limits.max_members}")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
    except _ERRORS as e:
        raise FileError(f"the {kind} file is not a readable zip container ({e}); a {kind} file is one") from None
    if len(infos) > limits.max_members:
        raise FileTooLarge(f"the {kind} file has {len(infos)} zip entries; the limit is {limits.max_members}")
    declared = sum(i.file_size for i in infos)
    if declared > limits.max_uncompressed:
        raise FileTooLarge(
            f"the {kind} file's members hold {declared} bytes uncompressed; the limit is {limits.max_uncompressed}"
        )
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise FileError(f"the {kind} file has two zip members named {info.filename!r}")
        seen.add(info.filename)
        if info.flag_bits & 0x1:
            raise FileError(f"the {kind} file is encrypted ({info.filename!r}); only files without a password are read")
        _ratio(kind, info.filename, info.file_size, info.compress_size, limits)
    members, total, tags = {}, 0, 0
    for info in infos:
        members[info.filename] = blob = _inflate(z, info, kind, limits, limits.max_uncompressed - total)
        total += len(blob)
        if _check_xml(kind, info.filename, blob):
            tags = tagged(blob, limits, f"{kind} file", tags)
    return Container(kind, infos, members)


def _ratio(kind: str, name: str, size: int, packed: int, limits: FileLimits) -> None:
    if size > _RATIO_FLOOR and size > limits.max_ratio * max(packed, 1):
        raise FileTooLarge(
            f"the {kind} file's member {name!r} expands {size // max(packed, 1)} times, from {packed} to {size} bytes: "
            f"a zip bomb; the limit is {limits.max_ratio} times"
        )


def _inflate(z: zipfile.ZipFile, info: zipfile.ZipInfo, kind: str, limits: FileLimits, left: int) -> bytes:
    """A member's bytes, decompressed a chunk at a time and held to the limits as they come."""
    chunks, size = [], 0
    try:
        with z.open(info) as f:
            while chunk := f.read(_CHUNK):
                size += len(chunk)
                if size > info.file_size:
                    raise FileError(f"the {kind} file's member {info.filename!r} holds more than its header says")
                if size > left:
                    raise FileTooLarge(
                        f"the {kind} file's members hold more than {limits.max_uncompressed} bytes uncompressed; "
                        f"the limit is {limits.max_uncompressed}"
                    )
                _ratio(kind, info.filename, size, info.compress_size, limits)
                chunks.append(chunk)
    except _ERRORS as e:
        raise FileError(f"the {kind} file's member {info.filename!r} is corrupt: {e}") from None
    return b"".join(chunks)


def searchable(blob: bytes, what: str) -> bytes | None:
    """XML's bytes as a search for declarations reads them (UTF-16 and UTF-32 as UTF-8), None where `blob` is no
    XML; a FileError saying `what` is in another encoding, which could hide one ("<!DOCTYPE" in UTF-7)."""
    head = blob[:4]
    wide = next((codec for start, codec in _WIDE if head.startswith(start)), None)
    if wide is not None:
        return blob.decode(wide, errors="replace").encode("utf-8", errors="replace")
    if not blob.lstrip().startswith((b"<", codecs.BOM_UTF8)):
        return None
    declared = _ENCODING.match(blob.removeprefix(codecs.BOM_UTF8))
    if declared and declared[1].decode().lower() not in _READABLE:
        raise FileError(f"{what} is encoded in {declared[1].decode()}; only UTF-8, UTF-16, UTF-32 and Latin-1 are read")
    return blob


def _check_xml(kind: str, name: str, blob: bytes) -> bool:
    """Whether a member is XML; refuse one that declares a DOCTYPE or entities, or whose encoding could hide one."""
    text = searchable(blob, f"the {kind} file's XML member {name!r}")
    if text is None:
        return False  # not XML: an image, the ODF mimetype
    found = _DECLARATION.search(text)
    if found is None:
        return True
    if name.lower().endswith(".svg") and b"<!ENTITY" not in text.upper():
        end = text.find(b">", found.start())
        if end > 0 and b"[" not in text[found.start() : end]:
            return True
    raise FileError(
        f"the {kind} file's XML member {name!r} has a DOCTYPE or ENTITY declaration; "
        "office files have none, and none is read (entity expansion)"
    )
