"""Plain text files: paragraphs translated, what lies between them kept as written."""

from __future__ import annotations

import pytest

from app.files import FORMATS, FileError, FileLimits, FileTooLarge, detect
from tests.files.conftest import identity, translated

pytestmark = pytest.mark.anyio
SAMPLES = ["", "One line", "\ufeffA dog runs.\n\n  Two men sit.\r\n\r\n\nA boy.\n", "\n\n\nA b.\nC d.\n\n \n"]


@pytest.mark.parametrize("text", SAMPLES)
async def test_identity_gives_the_file_back(text):
    assert await translated("txt", text.encode(), identity) == text.encode()


async def test_paragraphs_are_translated_and_the_blank_lines_kept(bundled):
    out = (await translated("txt", b"A dog runs in the snow.\n\n\nTwo men are sitting on a bench.\n", bundled)).decode()
    first, second = out.split("\n\n\n")
    assert "Hund" in first and "Männer" in second and second.endswith("\n") and not second.endswith("\n\n")


async def test_paragraphs_without_a_letter_come_back_as_written(bundled):
    """Numbers, dates, prices and symbols: a model given one writes words in its place ("42" came back "Zwei 24.")."""
    kept = ["42", "1,299.00", "2024-01-01", "♪♪", "--", "3.", "★ 4/5"]
    text = "\n\n".join([*kept, "A dog runs in the snow."]) + "\n"
    out = (await translated("txt", text.encode(), bundled)).decode().split("\n\n")
    assert out[:-1] == kept and "Hund" in out[-1]
    srt = "1\n00:00:01,000 --> 00:00:02,000\n♪♪\n\n2\n00:00:03,000 --> 00:00:04,000\nA dog runs.\n"
    cues = (await translated("srt", srt.encode(), bundled)).decode().split("\n\n")
    assert cues[0].endswith("\n♪♪") and "Hund" in cues[1]


def test_bad_files_are_refused_saying_why():
    with pytest.raises(FileError, match="not UTF-8"):
        FORMATS["txt"].read(b"caf\xe9", FileLimits())
    with pytest.raises(FileTooLarge, match="limit is 4"):
        FORMATS["txt"].read(b"hello", FileLimits(max_bytes=4))
    with pytest.raises(FileTooLarge, match="segments to translate; the limit is 1"):
        FORMATS["txt"].read(b"a\n\nb", FileLimits(max_units=1))


def test_the_format_comes_from_the_name_or_the_extension():
    assert detect("Report.DOCX").name == "docx" and detect(None, "po").name == "po"
    with pytest.raises(ValueError, match="extensions known are .txt"):
        detect("archive.zip")
