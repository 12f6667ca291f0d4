"""HTML pages: one markup unit through app/html/, written back in the page's own encoding."""

from __future__ import annotations

import pytest

from app.files import FORMATS, FileLimits, FileTooLarge
from tests.files.conftest import identity, translated
from tests.files.texts import assert_german, refused_quickly

pytestmark = pytest.mark.anyio

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>A dog in the park</title>
<style>p { color: red; }</style></head>
<body>
<!-- a comment -->
<p>A man in a <b>red shirt</b> is walking his <a href="/dogs?a=1&amp;b=2">dog</a>.</p>
<script>var s = "A man is walking.";</script>
<p>Two women are sitting on a bench.</p>
</body></html>
"""
LATIN1 = PAGE.replace(
    '<meta charset="utf-8">', '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-1">'
)


@pytest.mark.parametrize(
    "data",
    [PAGE.encode(), b"\xef\xbb\xbf" + PAGE.encode(), "\ufeff<p>Café</p>".encode("utf-16-le"), LATIN1.encode("latin-1"),
     LATIN1.replace("A dog", "Caf\xe9 dog").encode("latin-1"), b"", b"  \n"],
)  # fmt: skip
async def test_identity_gives_the_page_back(data):
    assert await translated("html", data, identity) == data


async def test_the_text_is_translated_and_the_markup_kept(bundled):
    out = (await translated("html", PAGE.encode(), bundled)).decode()
    for kept in ['<a href="/dogs?a=1&amp;b=2">', "<b>", "</b>", "<!-- a comment -->", "<style>p { color: red; }</style>",
                 '<script>var s = "A man is walking.";</script>', '<meta charset="utf-8">', "<!DOCTYPE html>"]:  # fmt: skip
        assert out.count(kept) == 1, kept
    title = out.split("<title>")[1].split("</title>")[0]
    paragraphs = [p.split("</p>")[0] for p in out.split("<p>")[1:]]
    for text in (title, *paragraphs):
        assert_german(text)


async def test_a_page_is_written_in_its_own_encoding():
    async def german(units):
        return [u.text.replace("Two women are sitting", "Zwei Frauen sitzen für 5 €") for u in units]

    out = await translated("html", LATIN1.encode("latin-1"), german)
    assert "Zwei Frauen sitzen für 5 &#8364;" in out.decode("latin-1")  # ü in Latin-1, € as a reference
    out = await translated("html", "\ufeff<p>Two women are sitting.</p>".encode("utf-16-le"), german)
    assert out.decode("utf-16") == "<p>Zwei Frauen sitzen für 5 €.</p>"


@pytest.mark.parametrize(
    "data, message",
    [
        (b"<p>A <b>dog</p>\n", "cannot be read: </p> at 1:12 closes <p> .* while <b> .* is still open"),
        (b"<p>A dog\n<!-- never closed", "cannot be read: unterminated comment at 2:1"),
        (b"<p>Caf\xe9</p>", "not utf-8 \\(the default \\(it declares no charset\\)\\): byte 6 \\(line 1\\)"),
        (b'<meta charset="klingon"><p>A dog</p>', "charset 'klingon', which is not known"),
    ],
)
def test_malformed_pages_are_refused_saying_where(data, message):
    with pytest.raises(ValueError, match=message):
        FORMATS["html"].read(data, FileLimits())


def test_hostile_pages_are_refused_or_read_in_linear_time():
    page = b"<p>A dog.</p>" * 100_000
    assert isinstance(refused_quickly("html", page, FileLimits(max_chars=1_000_000)), FileTooLarge)
    assert "never closed" in str(refused_quickly("html", b"<div>" * 20_000))
    assert "unterminated" in str(refused_quickly("html", b"<p>A dog" + b"<a" * 100_000))


async def test_a_page_of_any_size_goes_as_a_unit_a_block(bundled):
    """Each block is a unit (the engine takes a request of limited size): a page of 300 paragraphs translates, and
    an attribute outside the blocks with it."""
    body = "".join(f"<p>A <b>dog</b> runs in the snow {i}.</p>\n" for i in range(300))
    page = f'<html><body><div title="Two men are sitting on a bench.">\n{body}</div></body></html>\n'
    extracted = FORMATS["html"].read(page.encode(), FileLimits())
    assert len(extracted.units) == 301 and max(len(u.text) for u in extracted.units) < 100
    out = (await translated("html", page.encode(), bundled)).decode()
    assert out.count("<b>Hund</b>") == 300 and 'title="Zwei Männer' in out and "dog" not in out
