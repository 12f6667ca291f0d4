"""Hostile zip containers, in each office format: refused with a message saying what is wrong, quickly, and without
inflating more than a little of them."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from app.files import FORMATS, FileError, FileLimits, FileTooLarge, zipped
from tests.files import office

MAIN = {  # a format's sample and its main part
    "docx": (office.docx_sample, "word/document.xml"),
    "pptx": (office.pptx_sample, "ppt/presentation.xml"),
    "xlsx": (office.xlsx_sample, "xl/workbook.xml"),
    "odt": (office.odt_sample, "content.xml"),
}
formats = pytest.mark.parametrize("fmt", list(MAIN))


def refused(fmt: str, data: bytes, error: type[Exception], match: str, limits: FileLimits | None = None) -> int:
    """Read `data` as `fmt`, expecting `error`; the peak of memory allocated meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(error, match=match):
            FORMATS[fmt].read(data, limits or FileLimits())
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@formats
def test_a_zip_bomb_is_refused_before_it_is_inflated(fmt):
    sample, main = MAIN[fmt]
    peak = refused(fmt, office.bomb(sample(), main), FileTooLarge, rf"'{main}' expands \d+ times.*zip bomb.*100 times")
    assert peak < 2 * 2**20


@formats
def test_more_markup_than_a_parser_should_hold_is_refused_before_any_parser_reads_it(fmt):
    """A few MB of `<a/>` (each member under the 1 MiB that the ratio spares, so no zip bomb) took gigabytes: each
    element is a node the parser holds, and the memory stayed with the process."""
    sample, main = MAIN[fmt]
    data = sample()
    for i in range(5):  # 1.2 million tags in all
        data = office.replaced(data, f"extra{i}.xml", b"<x>" + b"<a/>" * 240_000 + b"</x>")
    peak = refused(fmt, data, FileTooLarge, f"the {fmt.upper()} file has more than 1000000 tags of markup")
    assert peak < 40 * 2**20
    FORMATS[fmt].read(office.replaced(sample(), "extra.xml", b"<x>" + b"<a/>" * 100_000 + b"</x>"), FileLimits())


@formats
def test_a_header_that_lies_about_a_size_is_caught_while_reading(fmt):
    sample, main = MAIN[fmt]
    peak = refused(fmt, office.lying(sample(), main), FileError, f"'{main}' is corrupt: Bad CRC-32")
    assert peak < 4 * 2**20


@formats
@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_entity_declarations_are_refused_before_any_parser_sees_them(fmt, encoding):
    sample, main = MAIN[fmt]
    laughs = office.replaced(sample(), main, office.laughs(encoding=encoding))
    refused(fmt, laughs, FileError, f"XML member '{main}' has a DOCTYPE or ENTITY declaration")


@formats
def test_bytes_that_are_no_zip_or_a_truncated_one_are_refused(fmt):
    sample, _ = MAIN[fmt]
    refused(fmt, b"%PDF-1.7 " * 100, FileError, f"the {fmt.upper()} file is not a readable zip container")
    refused(fmt, sample()[: len(sample()) // 2], FileError, "not a readable zip container")
    refused(fmt, b"", FileError, "not a readable zip container")


@formats
def test_a_zip_without_the_formats_parts_is_refused(fmt):
    sample, main = MAIN[fmt]
    refused(
        fmt, office.zipped_members({"notes.txt": b"A dog."}), FileError, f"it is a zip container, but no {fmt.upper()}"
    )
    without = {n: b for n, b in office.members(sample()).items() if n != main}
    refused(fmt, office.zipped_members(without), FileError, f"has no {main}: it is a zip container, but no")


@formats
def test_a_corrupt_member_is_refused(fmt):
    sample, main = MAIN[fmt]
    data = bytearray(sample())
    info = next(i for i in office.infos(bytes(data)) if i.filename == main)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start : start + 64] = b"\xff" * 64
    refused(fmt, bytes(data), FileError, f"'{main}' is corrupt")


@formats
def test_the_limits_on_entries_and_inflated_bytes_hold(fmt):
    sample, _ = MAIN[fmt]
    refused(fmt, sample(), FileTooLarge, "zip entries; the limit is 2", FileLimits(max_members=2))
    refused(fmt, sample(), FileTooLarge, "bytes uncompressed; the limit is 1000", FileLimits(max_uncompressed=1000))


def test_encrypted_members_and_odd_encodings_are_refused():
    data = bytearray(office.odt_sample())
    at = data.find(b"PK\x01\x02")
    struct.pack_into("<H", data, at + 8, struct.unpack_from("<H", data, at + 8)[0] | 1)  # the "encrypted" flag
    with pytest.raises(FileError, match="encrypted"):
        zipped.read(bytes(data), FileLimits(), "ODT")
    utf7 = b'<?xml version="1.0" encoding="UTF-7"?><x>+ADw-!DOCTYPE</x>'
    with pytest.raises(FileError, match="'a.xml' is encoded in UTF-7; only UTF-8"):
        zipped.read(office.zipped_members({"a.xml": utf7}), FileLimits(), "ODT")
    with pytest.raises(FileError, match="two zip members named 'a.xml'"):
        zipped.read(office.duplicated("a.xml"), FileLimits(), "ODT")


def test_an_svg_images_plain_doctype_is_let_through_and_only_that():
    plain = b'<?xml version="1.0"?><!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://x/svg11.dtd"><svg/>'
    container = zipped.read(office.zipped_members({"media/a.svg": plain}), FileLimits(), "DOCX")
    assert container.members["media/a.svg"] == plain
    for name, blob in [("media/a.svg", plain.replace(b'dtd">', b'dtd" [<!ENTITY a "b">]>')), ("a.xml", plain)]:
        with pytest.raises(FileError, match=f"'{name}' has a DOCTYPE"):
            zipped.read(office.zipped_members({name: blob}), FileLimits(), "DOCX")


def test_small_members_are_not_held_to_the_ratio():
    spaces = b"<a>" + b" " * 500_000 + b"</a>"  # compresses far more than a hundredfold, but is small
    assert zipped.read(office.zipped_members({"a.xml": spaces}), FileLimits(), "DOCX").members["a.xml"] == spaces


def test_entries_are_counted_as_read_too_when_the_end_record_understates_them():
    data = bytearray(office.odt_sample())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 1, 1)  # "one entry"
    with pytest.raises(FileTooLarge, match="has 4 zip entries; the limit is 2"):
        zipped.read(bytes(data), FileLimits(max_members=2), "ODT")
