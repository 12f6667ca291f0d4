"""Word documents: every paragraph's text translated in place, its runs' formats around the words aligned to theirs,
and everything else (tabs, breaks, drawings, fields, links, comments) where it was; and the runs codec they share
with PowerPoint and ODT (app/files/runs.py)."""

from __future__ import annotations

import io
from pathlib import Path

import docx
import pytest
from lxml import etree

from app.files import FORMATS, FileLimits, Unit
from app.files.runs import Point, encode
from tests.files import office
from tests.files.conftest import identity, translated

pytestmark = pytest.mark.anyio
TEMPLATE = Path(docx.__file__).parent / "templates" / "default.docx"
W = f"{{{office.W}}}"
_NS = f'xmlns:w="{office.W}"'
KEPT = ("p", "tbl", "tr", "tc", "hyperlink", "tab", "br", "drawing", "pict", "footnoteReference", "commentReference",
        "fldChar")  # fmt: skip


def round_trip(data: bytes) -> dict[str, bytes]:
    """The members of a document as python-docx writes it back unchanged."""
    out = io.BytesIO()
    docx.Document(io.BytesIO(data)).save(out)
    return office.members(out.getvalue())


def xml(data: bytes, name: str = "word/document.xml") -> etree._Element:
    return etree.fromstring(office.members(data)[name])


def count(root: etree._Element, *tags: str) -> list[int]:
    return [sum(1 for _ in root.iter(W + t)) for t in tags]


@pytest.fixture(scope="module")
async def german(bundled) -> bytes:
    """The sample document translated by the bundled model."""
    return await translated("docx", office.docx_sample(), bundled)


@pytest.mark.parametrize("sample", ["made", "template"])
async def test_identity_gives_the_document_back_as_python_docx_writes_it(sample):
    data = office.docx_sample() if sample == "made" else TEMPLATE.read_bytes()
    assert office.members(await translated("docx", data, identity)) == round_trip(data)


async def test_every_paragraph_is_translated_and_the_structure_kept(german):
    data, out = office.docx_sample(), german
    document = docx.Document(io.BytesIO(out))  # opens
    before, after = xml(data), xml(out)
    assert count(after, *KEPT) == count(before, *KEPT)
    assert count(after, "b", "i") == count(before, "b", "i")
    texts = [t.text for t in after.iter(W + "t")]
    assert not office.words(texts) & office.ENGLISH
    assert {"hund", "schnee", "männer", "bank", "kleid", "frau", "buch", "katze", "junge"} <= office.words(texts)
    bold = [r.text for p in document.paragraphs for r in p.runs if r.bold]
    italic = [r.text for p in document.paragraphs for r in p.runs if r.italic]
    assert bold == ["Hund"] and italic == ["Zwei Männer"]
    link = after.find(f".//{W}hyperlink")
    assert "Kleid" in "".join(link.itertext())
    assert document.part.rels[link.get(f"{{{office.R}}}id")].target_ref == "https://example.com/dress"
    tabbed = next(p for p in after.iter(W + "p") if p.find(f".//{W}tab") is not None)
    assert [c.tag for c in tabbed.iter(W + "t", W + "tab")] == [W + "t", W + "tab", W + "t"]  # the tab between
    pictured = next(p for p in after.iter(W + "p") if p.find(f".//{W}drawing") is not None)
    kinds = [c.tag for c in pictured.iter(W + "t", W + "drawing")]
    assert kinds == [W + "t", W + "drawing", W + "t"] and "Straße" in "".join(pictured.itertext())


async def test_headers_footers_footnotes_and_text_boxes_are_translated_comments_are_not(german):
    out = german
    document, parts = docx.Document(io.BytesIO(out)), office.members(out)
    section = document.sections[0]
    headers = [section.header, section.first_page_header, section.even_page_header, section.footer]
    assert [h.paragraphs[0].text.split()[:2] for h in headers] == [["Ein", "Hund"], ["Ein", "Mädchen"],
                                                                   ["Ein", "Junge"], ["Eine", "Frau"]]  # fmt: skip
    assert document.sections[1].header.paragraphs[0].text == "Eine Katze rennt."
    footer = xml(out, "word/footer1.xml")
    assert [i.text for i in footer.iter(W + "instrText")] == [" PAGE "] and count(footer, "fldChar") == [3]
    assert footer.findall(f".//{W}t")[-1].text == "1"  # the field's result, not a word
    notes = xml(out, "word/footnotes.xml")
    assert [r.findtext(W + "t") for r in notes.iter(W + "r") if r.find(f"{W}rPr/{W}b") is not None] == ["Eine Katze"]
    assert notes.find(f".//{W}footnoteRef") is not None and notes.find(f".//{W}separator") is not None
    box = next(xml(out).iter(W + "txbxContent"))
    assert "Frau" in "".join(box.itertext())
    assert parts["word/comments.xml"] == round_trip(office.docx_sample())["word/comments.xml"]


async def test_a_paragraphs_stretches_are_rebuilt_keeping_what_is_not_text():
    """Runs cut by spell-check split into one, and the text after a tab in it; proofing marks dropped, bookmarks
    around; an insertion, a field's result and a simple field are read on their own."""
    p = (
        f'<w:p {_NS}><w:pPr><w:jc w:val="center"/></w:pPr><w:r><w:rPr><w:lang w:val="en-GB"/></w:rPr>'
        '<w:t xml:space="preserve">a d</w:t></w:r><w:proofErr w:type="spellStart"/><w:bookmarkStart w:id="0" w:name="x"/>'
        '<w:r w:rsidR="00AB"><w:t>og runs</w:t></w:r><w:bookmarkEnd w:id="0"/><w:r><w:lastRenderedPageBreak/>'
        '<w:t xml:space="preserve"> fast </w:t><w:tab/><w:t>then</w:t></w:r>'
        '<w:ins w:id="1" w:author="x"><w:r><w:t xml:space="preserve"> stops</w:t></w:r></w:ins>'
        '<w:fldSimple w:instr=" REF x "><w:r><w:t>see above</w:t></w:r></w:fldSimple><w:r><w:t/></w:r></w:p>'
    )
    data = docx_with(p)
    extracted = FORMATS["docx"].read(data, FileLimits())
    assert [u.text for u in extracted.units] == ['a dog runs fast <img id="p0">then', "stops", "see above"]
    out = xml(extracted.write(await office.shout(extracted.units)))
    body = out.find(f"{W}body/{W}p")
    assert [etree.QName(c).localname for c in body] == ["pPr", "bookmarkStart", "r", "r", "bookmarkEnd", "ins",
                                                        "fldSimple", "r"]  # fmt: skip
    assert [[etree.QName(c).localname for c in r] for r in body.findall(W + "r")] == [
        ["rPr", "t"], ["tab", "t"], ["t"]]  # fmt: skip
    assert [t.text for t in body.iter(W + "t")] == ["A DOG RUNS FAST ", "THEN", " STOPS", "SEE ABOVE", None]
    assert body.find(f"{W}r/{W}rPr/{W}lang").get(W + "val") == "en-GB"


SENTENCES = [  # a paragraph's runs (w:r's content) with a point inside a sentence, and the sentence
    ('<w:t>A cat</w:t><w:tab/><w:t>sleeps on a couch.</w:t>', "A cat sleeps on a couch."),
    ('<w:t>A man is riding</w:t><w:br/><w:t>a bike in the snow.</w:t>', "A man is riding a bike in the snow."),
    (('<w:t>A dog</w:t></w:r><w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr><w:footnoteReference w:id="1"/>'
      '</w:r><w:r><w:t xml:space="preserve"> catches a ball in the park.</w:t>'), "A dog catches a ball in the park."),
]  # fmt: skip
POINTS = ("tab", "br", "footnoteReference")


def sentences_docx() -> bytes:
    return docx_with(*(f"<w:p {_NS}><w:r>{runs}</w:r></w:p>" for runs, _ in SENTENCES))


async def test_a_tab_a_line_break_and_a_footnote_reference_inside_a_sentence_leave_it_one_unit():
    extracted = FORMATS["docx"].read(sentences_docx(), FileLimits())
    assert [u.text for u in extracted.units] == [
        'A cat<img id="p0"> sleeps on a couch.', 'A man is riding<img id="p0"> a bike in the snow.',
        'A dog<img id="p0"> catches a ball in the park.']  # fmt: skip
    out = xml(extracted.write(await office.shout(extracted.units)))
    paragraphs = out.findall(f"{W}body/{W}p")
    for p, point, (_, sentence) in zip(paragraphs, POINTS, SENTENCES, strict=True):
        parts = [c.text if c.tag == W + "t" else etree.QName(c).localname for c in p.iter(W + "t", W + point)]
        assert parts[1] == point and len(parts) == 3  # the element back, once, between the sentence's words
        assert f"{parts[0]} {parts[2].strip()}" == sentence.upper()
    assert paragraphs[2].find(f"{W}r/{W}footnoteReference").get(W + "id") == "1"
    assert paragraphs[2].find(f"{W}r/{W}rPr/{W}vertAlign") is not None  # in its own superscript run


async def test_the_sentence_around_a_tab_line_break_or_footnote_reference_is_translated_whole(bundled):
    out = xml(await translated("docx", sentences_docx(), bundled))
    whole = await bundled([Unit(sentence) for _, sentence in SENTENCES])
    for p, point, german in zip(out.findall(f"{W}body/{W}p"), POINTS, whole, strict=True):
        parts = [c.text if c.tag == W + "t" else etree.QName(c).localname for c in p.iter(W + "t", W + point)]
        assert parts.count(point) == 1 and " ".join(t.strip() for t in parts if t != point) == german


async def test_a_tab_after_a_sentences_end_or_a_number_keeps_the_parts_apart():
    p = f"<w:p {_NS}><w:r><w:t>1.</w:t><w:tab/><w:t>Note:</w:t><w:tab/><w:t>A dog runs.</w:t></w:r></w:p>"
    extracted = FORMATS["docx"].read(docx_with(p), FileLimits())
    assert [u.text for u in extracted.units] == ['Note:<br id="p0">A dog runs.']  # "1." is not translated
    out = xml(extracted.write(await office.shout(extracted.units))).find(f"{W}body/{W}p")
    assert [c.text or etree.QName(c).localname for c in out.iter(W + "t", W + "tab")] == [
        "1.", "tab", "NOTE:", "tab", "A DOG RUNS."]  # fmt: skip


async def test_write_can_be_called_again():
    extracted = FORMATS["docx"].read(office.docx_sample(), FileLimits())
    shouted = await office.shout(extracted.units)
    assert office.members(extracted.write(shouted)) == office.members(extracted.write(shouted))


# the runs codec (app/files/runs.py)


def test_runs_become_one_unit_with_the_dominant_format_bare():
    runs = encode([("A ", "plain"), ("d", "bold"), ("og", "bold"), (" ", "italic"), ("runs <fast> & ", "plain"),
                   ("here", "link")], link=lambda k: k == "link")  # fmt: skip
    assert runs.unit == Unit('A <span id="r1">dog </span>runs &lt;fast&gt; &amp; <a id="h3">here</a>', markup=True)
    assert runs.decode('Ein <span id="r1">Hund</span> läuft &amp; <a id="h3">hier</a> <b>x</b>') == [
        ("Ein ", "plain"), ("Hund", "bold"), (" läuft & ", "plain"), ("hier", "link"), (" x", "plain")]  # fmt: skip


def test_one_format_is_plain_text_and_the_ends_whitespace_comes_back():
    runs = encode([("  A dog", "b"), (" runs.\t", "b")])
    assert runs.unit == Unit("A dog runs.")
    assert runs.decode("Ein Hund läuft.") == [("  Ein Hund läuft.\t", "b")]
    assert encode([(" ", "b")]).unit.text == "" and encode([]).unit.text == ""


def test_decoding_is_lenient_with_what_it_does_not_know():
    runs = encode([("a", 1), ("b", 2), ("c", 1)])
    assert runs.unit.text == 'a<span id="r1">b</span>c'
    assert runs.decode('<span id="r9">x</span><span>y</span></a><span id="r1">z\x01</span>') == [("xy", 1), ("z", 2)]


def test_points_come_back_once_each_in_the_translations_order_spaced_as_their_source():
    tab, anchor, line = Point("tab"), Point("ref", "anchor"), Point("br", "break")
    runs = encode([("A cat", 1), tab, ("sleeps", 1), anchor, (" here", 2), line, ("too.", 1)])
    assert runs.unit == Unit('A cat<img id="p0"> sleeps<img id="p1"><span id="r1"> here</span><img id="p2"> too.',
                             markup=True)  # fmt: skip
    assert runs.decode('Eine Katze <img id="p0"> schläft <img id="p1"><img id="p0"> hier') == [
        ("Eine Katze", 1), tab, ("schläft", 1), anchor, (" hier", 1), line]  # fmt: skip
    ended = encode([("A dog runs.", 1), line, ("A cat.", 1)])
    assert ended.unit.text == 'A dog runs.<br id="p0">A cat.'
    assert ended.decode("Ein Hund rennt. Eine Katze.") == [("Ein Hund rennt. Eine Katze.", 1), line]


def docx_with(*paragraphs: str) -> bytes:
    d = docx.Document()
    for i, paragraph in enumerate(paragraphs):
        d.element.body.insert(i, etree.fromstring(paragraph))
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()
