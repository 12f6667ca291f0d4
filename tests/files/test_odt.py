"""OpenDocument text: paragraphs, headings, headers and footers translated in place, spans and links around the
words aligned to theirs, spaces, tabs, breaks, notes and fields where they were; comments as they were."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from lxml import etree

from app.files import FORMATS, FileError, FileLimits, Unit, odt
from tests.files import office
from tests.files.conftest import identity, translated

pytestmark = pytest.mark.anyio
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
TAGS = ("p", "h", "span", "a", "s", "tab", "line-break", "note", "bookmark-start", "bookmark-end", "page-number")


def xml(data: bytes, name: str = "content.xml") -> etree._Element:
    return etree.fromstring(office.members(data)[name])


def count(root: etree._Element) -> list[int]:
    return [sum(1 for _ in root.iter(TEXT + t)) for t in TAGS]


def texts(root: etree._Element) -> list[str]:
    """The text of every paragraph, the comments left out."""
    for comment in root.iter(OFFICE + "annotation"):
        comment.clear(keep_tail=True)
    return ["".join(p.itertext()) for p in root.iter(TEXT + "p", TEXT + "h")]


@pytest.fixture(scope="module")
async def german(bundled) -> bytes:
    """The sample document translated by the bundled model."""
    return await translated("odt", office.odt_sample(), bundled)


def docutils_odt(name: str) -> bytes:
    """An ODT of docutils' odt writer: the styles file it ships (LibreOffice's, with thumbnails and folders), or one
    it writes from reStructuredText."""
    docutils = pytest.importorskip("docutils.core")
    if name == "styles.odt":
        return (Path(docutils.__file__).parent / "writers" / "odf_odt" / "styles.odt").read_bytes()
    return docutils.publish_string(RST, writer="odt")


RST = """A title
=======

A dog runs in the *snow*. Two **men** are sitting on a bench.

* A girl is jumping.
* A boy is playing [#]_.

.. [#] A cat is sleeping.
"""


@pytest.mark.parametrize("sample", ["made", "styles.odt", "written"])
async def test_identity_gives_every_member_back_byte_for_byte_mimetype_first_and_stored(sample):
    data = office.odt_sample() if sample == "made" else docutils_odt(sample)
    out = await translated("odt", data, identity)
    assert office.members(out) == office.members(data)
    assert [i.filename for i in office.infos(out)] == [i.filename for i in office.infos(data)]
    first = office.infos(out)[0]
    assert first.filename == "mimetype" and first.compress_type == 0


async def test_a_document_docutils_wrote_is_translated_in_place():
    data = docutils_odt("written")
    out = await translated("odt", data, office.shout)
    assert count(xml(out)) == count(xml(data))
    assert texts(xml(out)) == [t.upper() for t in texts(xml(data))]
    emphasis = next(s for s in xml(out).iter(TEXT + "span") if s.get(TEXT + "style-name") == "rststyle-emphasis")
    assert emphasis.text == "SNOW"


async def test_paragraphs_headers_and_footers_are_translated_and_the_structure_kept(german):
    data = office.odt_sample()
    for name in ("content.xml", "styles.xml"):
        assert count(xml(german, name)) == count(xml(data, name))
    content, styles = texts(xml(german)), texts(xml(german, "styles.xml"))
    assert not office.words(content + styles) & office.ENGLISH
    assert {"hund", "schnee", "männer", "bank", "kleid", "frau", "buch", "junge", "katze"} <= office.words(content)
    assert styles[0].startswith("Ein Hund") and styles[1].startswith("Eine Frau") and styles[1].endswith(" 1")
    comment = next(xml(german).iter(OFFICE + "annotation"))
    assert "".join(comment.itertext()) == "A boyA dog wrote this comment."
    assert office.members(german)["META-INF/manifest.xml"] == office.members(data)["META-INF/manifest.xml"]


async def test_spans_and_links_come_back_around_the_words_aligned_to_theirs(german):
    root = xml(german)
    spans = {s.get(TEXT + "style-name"): s.text for s in root.iter(TEXT + "span")}
    assert spans == {"T1": "Hund", "T2": "Zwei Männer"}
    link = next(root.iter(TEXT + "a"))
    assert link.get("{http://www.w3.org/1999/xlink}href") == "https://example.com/dress" and "Kleid" in link.text
    mixed = next(p for p in root.iter(TEXT + "p") if p.find(TEXT + "tab") is not None)
    assert [etree.QName(c).localname for c in mixed] == ["tab", "line-break", "s"]
    assert mixed.find(TEXT + "s").get(TEXT + "c") == "2" and "Frau" in mixed.find(TEXT + "tab").tail
    marked = next(p for p in root.iter(TEXT + "p") if p.find(TEXT + "note") is not None)
    assert [etree.QName(c).localname for c in marked] == ["bookmark-start", "bookmark-end", "note"]  # no soft break
    assert "Hund" in marked.find(TEXT + "bookmark-start").tail


async def test_bad_content_is_refused_saying_why():
    with pytest.raises(FileError, match="mimetype is 'application/vnd.oasis.opendocument.spreadsheet'"):
        FORMATS["odt"].read(office.odt_sample(mimetype=b"application/vnd.oasis.opendocument.spreadsheet"), FileLimits())
    with pytest.raises(FileError, match="content.xml is not well-formed XML"):
        FORMATS["odt"].read(office.odt_sample(content="<office:document-content>"), FileLimits())
    with pytest.raises(FileError, match="content.xml holds .*document-styles, not office:document-content"):
        FORMATS["odt"].read(office.odt_sample(content=office.ODT_STYLES), FileLimits())


def test_the_parser_expands_no_entity_even_past_the_container_check():
    with contextlib.suppress(etree.XMLSyntaxError):  # libxml2 may also refuse it ("entity amplification")
        root = etree.fromstring(office.laughs("x"), odt._parser())
        assert len("".join(root.itertext())) < 100


async def test_write_can_be_called_again():
    extracted = FORMATS["odt"].read(office.odt_sample(), FileLimits())
    shouted = await office.shout(extracted.units)
    assert office.members(extracted.write(shouted)) == office.members(extracted.write(shouted))


SENTENCES = [  # a paragraph's content with a point inside a sentence, and the sentence
    ("A cat<text:tab/>sleeps on a couch.", "A cat sleeps on a couch."),
    ('A man<text:s text:c="3"/>is riding a bike.', "A man is riding a bike."),
    ("A man is riding<text:line-break/>a bike in the snow.", "A man is riding a bike in the snow."),
    (('A <text:span text:style-name="T1">dog<text:note text:id="n1" text:note-class="footnote"><text:note-citation>1'
      "</text:note-citation><text:note-body><text:p>A girl is eating.</text:p></text:note-body></text:note></text:span>"
      " catches a ball."), "A dog catches a ball."),
]  # fmt: skip
POINTS = ("tab", "s", "line-break", "note")


def sentences_odt() -> bytes:
    body = "".join(f"<text:p>{content}</text:p>" for content, _ in SENTENCES)
    return office.odt_sample(office.ODT_CONTENT.replace(
        '<text:h text:outline-level="1">A man is riding a bike.</text:h>', body))  # fmt: skip


def outer(root: etree._Element) -> list[etree._Element]:
    """The body's first paragraphs, those of SENTENCES."""
    return root.find(f"{OFFICE}body/{OFFICE}text").findall(TEXT + "p")[: len(SENTENCES)]


def parts(p: etree._Element) -> list[str]:
    """A paragraph's text and points in order, a point by its name (the note's own text left out)."""
    out = [p.text or ""]
    for c in p.iterdescendants():
        if c.tag in {TEXT + t for t in POINTS}:
            out.append(etree.QName(c).localname)
        if not any(a.tag == TEXT + "note" for a in c.iterancestors()):
            out += [c.text or ""] if c.tag == TEXT + "span" else []
            out += [c.tail or ""]
    return [x for x in out if x]


async def test_a_tab_spaces_a_line_break_and_a_note_inside_a_sentence_leave_it_one_unit():
    extracted = FORMATS["odt"].read(sentences_odt(), FileLimits())
    assert [u.text for u in extracted.units][:5] == [
        'A cat<img id="p0"> sleeps on a couch.', 'A man<img id="p0"> is riding a bike.',
        'A man is riding<img id="p0"> a bike in the snow.', 'A <span id="r1">dog</span><img id="p0"> catches a ball.',
        "A girl is eating."]  # fmt: skip
    out = xml(extracted.write(await office.shout(extracted.units)))
    for p, point, (_, sentence) in zip(outer(out), POINTS, SENTENCES, strict=True):
        got = parts(p)
        assert got.count(point) == 1 and " ".join(x.strip() for x in got if x != point) == sentence.upper()
    spaces, noted = outer(out)[1].find(TEXT + "s"), outer(out)[3]
    assert spaces.get(TEXT + "c") == "3"
    assert [etree.QName(c).localname for c in noted.find(TEXT + "span")] == ["note"]  # in its span, after DOG
    assert noted.find(TEXT + "span").text == "DOG"
    assert "".join(noted.find(f".//{TEXT}note-body").itertext()) == "A GIRL IS EATING."


async def test_the_sentence_around_a_tab_spaces_a_line_break_or_a_note_is_translated_whole(bundled):
    out = xml(await translated("odt", sentences_odt(), bundled))
    whole = await bundled([Unit(sentence) for _, sentence in SENTENCES])
    for p, point, german in zip(outer(out), POINTS, whole, strict=True):
        got = parts(p)
        assert got.count(point) == 1 and " ".join(x.strip() for x in got if x != point) == german
