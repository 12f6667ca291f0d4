"""Office files for the format tests, made with the formats' own libraries (ODT by hand, as lxml has no writer),
and hostile zip containers: a bomb, a lying header, entity declarations."""

from __future__ import annotations

import functools
import io
import re
import struct
import warnings
import zipfile
import zlib

import docx
import openpyxl
import pptx
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part
from docx.oxml import parse_xml
from openpyxl.cell.rich_text import CellRichText, TextBlock
from openpyxl.cell.text import InlineFont
from pptx.util import Inches

# English words of the samples that a German translation does not have
ENGLISH = {"dog", "snow", "men", "bench", "girl", "dress", "woman", "book", "boy", "bike", "cat", "street", "cooking"}
_WORD = re.compile(r"\w+")
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS = f'xmlns:w="{W}" xmlns:r="{R}"'


def words(texts) -> set[str]:
    return {w.lower() for t in texts for w in _WORD.findall(t)}


def png() -> bytes:
    """A 1x1 PNG image."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
        + chunk(b"IEND", b"")
    )


@functools.cache
def docx_sample() -> bytes:
    d = docx.Document()
    d.add_heading("A man is riding a bike.", level=1)
    p = d.add_paragraph("A ")
    p.add_run("dog").bold = True
    p.add_run(" runs in the snow.")
    p = d.add_paragraph()
    p.add_run("Two men").italic = True
    p.add_run(" are sitting on a bench.")
    p = d.add_paragraph("A girl ")
    rid = d.part.relate_to("https://example.com/dress", RT.HYPERLINK, is_external=True)
    p._p.append(parse_xml(
        f'<w:hyperlink {_NS} r:id="{rid}"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr>'
        "<w:t>in a red dress</w:t></w:r></w:hyperlink>"
    ))  # fmt: skip
    p.add_run(" is jumping.")
    d.add_paragraph("Note:\tA woman is reading a book.")  # a tab
    d.add_paragraph("A boy is playing.\nA girl is singing.")  # a line break
    p = d.add_paragraph("A cat sits ")
    p.add_run().add_picture(io.BytesIO(png()))
    p.add_run(" on the street.")
    p = d.add_paragraph("A dog catches a ball.")
    p.runs[0]._r.append(parse_xml(f'<w:footnoteReference {_NS} w:id="1"/>'))
    p = d.add_paragraph("In the box: ")
    p._p.append(parse_xml(
        f'<w:r {_NS} xmlns:v="urn:schemas-microsoft-com:vml"><w:pict><v:shape><v:textbox><w:txbxContent>'
        "<w:p><w:r><w:t>A woman sits in the snow.</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict></w:r>"
    ))  # fmt: skip
    d.add_comment(d.add_paragraph("A girl is eating.").runs, text="A dog wrote this comment.", author="A boy")
    table = d.add_table(rows=2, cols=2)
    for i, text in enumerate(["A man is cooking.", "Two dogs play.", "A girl is reading.", ""]):
        table.cell(i // 2, i % 2).text = text
    table.cell(1, 1).add_table(rows=1, cols=1).cell(0, 0).text = "A boy is swimming."
    d.add_page_break()
    d.add_paragraph("A man is sleeping.")
    section = d.sections[0]
    section.different_first_page_header_footer = True
    d.settings.odd_and_even_pages_header_footer = True
    section.header.paragraphs[0].text = "A dog is running."
    section.first_page_header.paragraphs[0].text = "A girl is running."
    section.even_page_header.paragraphs[0].text = "A boy is running."
    second = d.add_section()
    second.header.is_linked_to_previous = False
    second.header.paragraphs[0].text = "A cat is running."
    footer = section.footer.paragraphs[0]
    footer.add_run("A woman is running. ")
    for xml in ('<w:fldChar w:fldCharType="begin"/>', '<w:instrText xml:space="preserve"> PAGE </w:instrText>',
                '<w:fldChar w:fldCharType="separate"/>', "<w:t>1</w:t>", '<w:fldChar w:fldCharType="end"/>'):  # fmt: skip
        footer._p.append(parse_xml(f"<w:r {_NS}>{xml}</w:r>"))
    footnotes = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:footnotes {_NS}>'
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
        '<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> A </w:t></w:r>'
        "<w:r><w:rPr><w:b/></w:rPr><w:t>cat</w:t></w:r><w:r><w:t> is sleeping.</w:t></w:r></w:p></w:footnote>"
        "</w:footnotes>"
    )
    part = Part(PackURI("/word/footnotes.xml"), CT.WML_FOOTNOTES, footnotes.encode(), d.part.package)
    d.part.relate_to(part, RT.FOOTNOTES)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


@functools.cache
def pptx_sample() -> bytes:
    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "A man is riding a bike."
    body = slide.placeholders[1].text_frame
    p = body.paragraphs[0]
    p.add_run().text = "A "
    p.add_run().text = "dog"
    p.runs[-1].font.bold = True
    p.add_run().text = " runs in the snow."
    p = body.add_paragraph()
    p.add_run().text = "A girl "
    p.add_run().text = "in a red dress"
    p.runs[-1].hyperlink.address = "https://example.com/dress"
    p.add_run().text = " is jumping."
    body.add_paragraph().text = "A boy is playing.\vA girl is singing."  # a line break
    slide.notes_slide.notes_text_frame.text = "Two men are sitting on a bench."
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1)).text_frame.text = "A woman is reading a book."
    inner = group.shapes.add_group_shape()
    inner.shapes.add_textbox(Inches(1), Inches(2), Inches(3), Inches(1)).text_frame.text = "A cat is sleeping."
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(2)).table
    for i, text in enumerate(["A man is cooking.", "Two dogs play.", "A boy is swimming.", "42"]):
        table.cell(i // 2, i % 2).text = text
    box = slide.shapes.add_textbox(Inches(5), Inches(1), Inches(3), Inches(1)).text_frame
    box.text = "A dog catches a ball. "
    box.paragraphs[0]._p.append(box.paragraphs[0]._p.makeelement(
        "{http://schemas.openxmlformats.org/drawingml/2006/main}fld", {"id": "{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}",
        "type": "slidenum"}))  # fmt: skip
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


@functools.cache
def xlsx_sample() -> bytes:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Animals"
    ws["A1"] = "A dog runs in the snow."
    ws["A2"] = CellRichText(["A ", TextBlock(InlineFont(b=True), "dog"), " runs in the snow."])
    ws["A3"] = "=LEN(A1)"
    ws["A4"] = 42
    ws["A5"] = 3.5
    ws["B1"] = openpyxl.utils.datetime.from_excel(45000)
    ws["B2"] = True
    ws["B3"] = "A girl is jumping."
    ws["B4"] = "A girl is jumping."
    ws["B5"] = "2024-01-01"
    ws["C1"] = CellRichText([TextBlock(InlineFont(i=True), "Two men"), " are sitting on a bench."])
    ws["A1"].font = openpyxl.styles.Font(color="FF0000")
    ws.merge_cells("D1:E1")
    ws["D1"] = "A woman is reading a book."
    other = wb.create_sheet("The boy")
    other["A1"] = "A boy is playing."
    other["A2"] = "=Animals!A4*2"
    out = io.BytesIO()
    wb.save(out)
    return out.getvalue()


ODT_MEDIA_TYPE = b"application/vnd.oasis.opendocument.text"
_ODF = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
    'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" '
    'xmlns:xlink="http://www.w3.org/1999/xlink" office:version="1.3"'
)
ODT_CONTENT = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-content {_ODF}><office:automatic-styles>
<style:style style:name="T1" style:family="text"><style:text-properties fo:font-weight="bold"/></style:style>
<style:style style:name="T2" style:family="text"><style:text-properties fo:font-style="italic"/></style:style>
</office:automatic-styles><office:body><office:text>
<text:h text:outline-level="1">A man is riding a bike.</text:h>
<text:p text:style-name="Standard">A <text:span text:style-name="T1">dog</text:span> runs in the snow.</text:p>
<text:p><text:span text:style-name="T2">Two men</text:span> are sitting
   on a bench.</text:p>
<text:p>A girl <text:a xlink:type="simple" xlink:href="https://example.com/dress">in a red dress</text:a> is jumping.</text:p>
<text:p>Note:<text:tab/>A woman is reading a book.<text:line-break/>A boy is playing.<text:s text:c="2"/>A cat.</text:p>
<text:p><text:bookmark-start text:name="b1"/>A dog catches<text:soft-page-break/> a ball.<text:bookmark-end text:name="b1"/><text:note text:id="ftn1" text:note-class="footnote"><text:note-citation>1</text:note-citation><text:note-body><text:p>A cat is sleeping.</text:p></text:note-body></text:note></text:p>
<text:p><office:annotation><dc:creator>A boy</dc:creator><text:p>A dog wrote this comment.</text:p></office:annotation>A girl is eating.</text:p>
<table:table table:name="T"><table:table-row><table:table-cell><text:p>A man is cooking.</text:p></table:table-cell><table:table-cell><text:p>42</text:p></table:table-cell></table:table-row></table:table>
<text:list><text:list-item><text:p>Two dogs play.</text:p></text:list-item></text:list>
<text:p><draw:frame draw:name="f1"><draw:text-box><text:p>A woman sits in the snow.</text:p></draw:text-box></draw:frame></text:p>
</office:text></office:body></office:document-content>
"""
ODT_STYLES = f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-styles {_ODF}><office:master-styles><style:master-page style:name="Standard">
<style:header><text:p>A dog is running.</text:p></style:header>
<style:footer><text:p>A woman is running. <text:page-number text:select-page="current">1</text:page-number></text:p></style:footer>
</style:master-page></office:master-styles></office:document-styles>
"""
ODT_MANIFEST = """<?xml version="1.0" encoding="UTF-8"?>
<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">
<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>
<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>
<manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/>
</manifest:manifest>
"""


@functools.cache
def odt_sample(content: str = ODT_CONTENT, styles: str = ODT_STYLES, mimetype: bytes = ODT_MEDIA_TYPE) -> bytes:
    return zipped_members({"mimetype": mimetype, "content.xml": content.encode(), "styles.xml": styles.encode(),
                           "META-INF/manifest.xml": ODT_MANIFEST.encode()})  # fmt: skip


def zipped_members(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data, zipfile.ZIP_STORED if name == "mimetype" else zipfile.ZIP_DEFLATED)
    return out.getvalue()


def replaced(data: bytes, name: str, blob: bytes) -> bytes:
    """A container with one member's contents replaced (or added)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members[name] = blob
    return zipped_members(members)


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def infos(data: bytes) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.infolist()


def duplicated(name: str) -> bytes:
    """A zip with two members of one name."""
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w") as z:
        warnings.simplefilter("ignore")
        z.writestr(name, b"<a/>")
        z.writestr(name, b"<b/>")
    return out.getvalue()


def bomb(data: bytes, name: str, size: int = 50 * 2**20) -> bytes:
    """A container whose member `name` is `size` zeros, compressed (a thousandfold), made a MiB at a time."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for n in source.namelist():
            if n != name:
                z.writestr(n, source.read(n))
        with z.open(name, "w") as f:
            for _ in range(size // 2**20):
                f.write(bytes(2**20))
    return out.getvalue()


def lying(data: bytes, name: str, declared: int = 1000) -> bytes:
    """A bomb whose headers (local and central) say member `name` is only `declared` bytes uncompressed."""
    out = bytearray(bomb(data, name))
    with zipfile.ZipFile(io.BytesIO(bytes(out))) as z:
        info = z.getinfo(name)
    local = info.header_offset
    struct.pack_into("<I", out, local + 22, declared)  # the local header's uncompressed size
    at = out.find(b"PK\x01\x02")
    while at >= 0:  # the central directory's entry for it
        if out[at + 46 : at + 46 + struct.unpack_from("<H", out, at + 28)[0]] == name.encode():
            struct.pack_into("<I", out, at + 24, declared)
        at = out.find(b"PK\x01\x02", at + 4)
    return bytes(out)


def laughs(root: str = "w:document", encoding: str = "utf-8") -> bytes:
    """The billion laughs: entities ten deep, ten times each."""
    entities = '<!ENTITY lol0 "lol">' + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
    xml = f'<?xml version="1.0" encoding="{encoding}"?><!DOCTYPE x [{entities}]><{root} {_NS}>&lol9;</{root}>'
    return xml.encode(encoding)


_PIECE = re.compile(r"(<[^>]*>|&[^;\s]*;)")


async def shout(units) -> list[str]:
    """A translator that upper-cases each unit's text and keeps its tags and entities as written."""
    return ["".join(p if _PIECE.fullmatch(p) else p.upper() for p in _PIECE.split(u.text)) for u in units]
