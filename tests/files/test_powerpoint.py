"""PowerPoint presentations: the text of every shape (groups, tables, placeholders) and of the notes translated in
place, runs' formats around the words aligned to theirs, breaks and fields where they were."""

from __future__ import annotations

import io
from pathlib import Path

import pptx
import pytest
from lxml import etree
from pptx.enum.shapes import MSO_SHAPE_TYPE

from app.files import FORMATS, FileLimits, Unit
from tests.files import office
from tests.files.conftest import identity, translated

pytestmark = pytest.mark.anyio
TEMPLATE = Path(pptx.__file__).parent / "templates" / "default.pptx"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def round_trip(data: bytes) -> dict[str, bytes]:
    """The members of a presentation as python-pptx writes it back unchanged."""
    out = io.BytesIO()
    pptx.Presentation(io.BytesIO(data)).save(out)
    return office.members(out.getvalue())


def flattened(shapes) -> list:
    """Every shape, those in groups too, in order."""
    out = []
    for s in shapes:
        out.append(s)
        if s.shape_type == MSO_SHAPE_TYPE.GROUP:
            out += flattened(s.shapes)
    return out


def outline(prs) -> list:
    """A presentation's structure: per slide its shapes' kinds, paragraphs, runs, bold runs, breaks and fields."""
    out = []
    for slide in prs.slides:
        roots = [slide.element] + ([slide.notes_slide.element] if slide.has_notes_slide else [])
        counts = [sum(1 for r in roots for _ in r.iter(A + t)) for t in ("p", "r", "br", "fld", "tbl", "tc")]
        bold = [r.get("b") == "1" for r in slide.element.iter(A + "rPr")]
        out.append(([s.shape_type for s in flattened(slide.shapes)], counts, bold))
    return out


@pytest.fixture(scope="module")
async def german(bundled) -> bytes:
    """The sample presentation translated by the bundled model."""
    return await translated("pptx", office.pptx_sample(), bundled)


@pytest.mark.parametrize("sample", ["made", "template"])
async def test_identity_gives_the_presentation_back_as_python_pptx_writes_it(sample):
    data = office.pptx_sample() if sample == "made" else TEMPLATE.read_bytes()
    assert office.members(await translated("pptx", data, identity)) == round_trip(data)


async def test_every_shape_and_the_notes_are_translated_and_the_structure_kept(german):
    before, after = pptx.Presentation(io.BytesIO(office.pptx_sample())), pptx.Presentation(io.BytesIO(german))
    assert outline(after) == outline(before)
    texts = [t.text for slide in after.slides for t in slide.element.iter(A + "t")]
    notes = [t.text for slide in after.slides if slide.has_notes_slide for t in slide.notes_slide.element.iter(A + "t")]
    assert not office.words(texts + notes) & office.ENGLISH
    assert {"hund", "schnee", "kleid", "junge", "mädchen", "frau", "katze", "mann", "hunde"} <= office.words(texts)
    assert {"männer", "bank"} <= office.words(notes)
    assert "42" in texts


async def test_bold_runs_and_links_come_back_around_the_words_aligned_to_theirs(german):
    slide = pptx.Presentation(io.BytesIO(german)).slides[0]
    body = slide.placeholders[1].text_frame.paragraphs
    assert [(r.text, r.font.bold) for r in body[0].runs] == [
        ("Ein ", None),
        ("Hund", True),
        (" rennt im Schnee.", None),
    ]
    linked = [r for r in body[1].runs if r.hyperlink.address]
    assert [r.hyperlink.address for r in linked] == ["https://example.com/dress"] and "Kleid" in linked[0].text
    lines = [c.tag for c in body[2]._p if c.tag != A + "pPr"]
    assert lines == [A + "r", A + "br", A + "r"] and "Junge" in body[2].text and "Mädchen" in body[2].text
    box = pptx.Presentation(io.BytesIO(german)).slides[1].shapes[-1].text_frame.paragraphs[0]._p
    assert [etree.QName(c).localname for c in box] == ["r", "fld"] and box.find(A + "fld").get("type") == "slidenum"


async def test_write_can_be_called_again():
    extracted = FORMATS["pptx"].read(office.pptx_sample(), FileLimits())
    shouted = await office.shout(extracted.units)
    assert office.members(extracted.write(shouted)) == office.members(extracted.write(shouted))


def broken_pptx() -> bytes:
    """A slide whose title is a sentence with a line break (a vertical tab) inside it, in a bold run and a plain one."""
    prs = pptx.Presentation()
    title = prs.slides.add_slide(prs.slide_layouts[5]).shapes.title.text_frame.paragraphs[0]
    title.text = "A cat\vsleeps"  # a paragraph's vertical tab is a line break (a run's is no character of XML)
    for run in title.runs:
        run.font.bold = True
    title.add_run().text = " on a couch."
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


async def test_a_line_break_inside_a_sentence_leaves_it_one_unit_and_comes_back_in_it():
    extracted = FORMATS["pptx"].read(broken_pptx(), FileLimits())
    assert [u.text for u in extracted.units] == ['<span id="r0">A cat<img id="p0"> sleeps</span> on a couch.']
    title = pptx.Presentation(io.BytesIO(extracted.write(await office.shout(extracted.units)))).slides[0].shapes.title
    p = title.text_frame.paragraphs[0]
    assert [etree.QName(c).localname for c in p._p if c.tag != A + "pPr"] == ["r", "br", "r", "r"]
    assert [(r.text, r.font.bold) for r in p.runs] == [("A CAT", True), ("SLEEPS", True), (" ON A COUCH.", None)]


async def test_the_sentence_around_a_line_break_is_translated_whole(bundled):
    out = await translated("pptx", broken_pptx(), bundled)
    p = pptx.Presentation(io.BytesIO(out)).slides[0].shapes.title.text_frame.paragraphs[0]
    whole = await bundled([Unit("A cat sleeps on a couch.")])
    assert p.text.count("\v") == 1 and p.text.replace("\v", " ") == whole[0]
