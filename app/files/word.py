"""Word documents (DOCX) through python-docx: the text of every paragraph, a unit per stretch of its runs.

Translated: the paragraphs of the body (tables, nested tables, content controls and text boxes in them
included), of every header and footer (every section's first-page, even and default ones: each is a part of the
package) and of the footnotes and endnotes. python-docx reads the first three; it leaves footnotes and endnotes
unparsed, so they are parsed here with lxml (entities never resolved, nothing fetched) and their XML written back
into the part. Comments, the glossary and everything else are left as they are.

A paragraph (and each element holding a paragraph's runs of its own: a tracked insertion, a smart tag, an
inline content control, a simple field's result) is read as atoms, in order: each `w:t` of its runs is text,
and so is a run inside a link (`w:hyperlink`, whose target stays as it is). Points inside the sentence, which do
not cut it (app/files/runs.py's Point): a run's tabs (`w:tab`, `w:ptab`), soft line breaks (`w:br` but a page or
column break, `w:cr`) and footnote and endnote references. Kept where they are, and cutting the paragraph into
separate units: whatever else a run holds (page and column breaks, drawings, field characters and codes,
symbols) and whatever else the paragraph holds (its properties, a field, a deletion, a math zone). A stretch of
text atoms between them that has a letter, with the points between its texts, is a unit (app/files/runs.py): a
run's format is its `w:rPr` (without its language and proofing marks) and its link's attributes, links becoming
`<a>`.

Written back, only a paragraph with a unit whose translation differs from its text is rebuilt: its atoms go
back in order, each stretch translated replaced by the runs of its translation, each in a copy of the `w:rPr`
(and the link) of the first run of that format, or of the point's run it follows where that run has the format;
each point goes where the translation has it, in a copy of its own run. Spell-check marks and rendered page
breaks in a translated stretch are dropped (Word recomputes them); the bookmarks, comment and permission ranges
starting in it start before its translation, those ending in it end after it. Everything else keeps its element,
moved, never copied.
"""

from __future__ import annotations

import io
from copy import deepcopy
from dataclasses import dataclass, field

import docx
from docx.opc.constants import CONTENT_TYPE as CT
from lxml import etree

from app.files import FileError, FileLimits, Unit, said, zipped
from app.files.runs import Builder, Point, Runs, cuts, encode, rewritten
from app.segment import worded

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_R, _T, _RPR, _LINK = _W + "r", _W + "t", _W + "rPr", _W + "hyperlink"
_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
_FLOWS = [_W + n for n in ("p", "ins", "moveTo", "smartTag", "customXml", "sdtContent", "fldSimple", "dir", "bdo")]
_HINTS = {_W + "proofErr", _W + "lastRenderedPageBreak", _W + "softHyphen"}
_TABS = {_W + "tab", _W + "ptab"}
_ANCHORS = {_W + "footnoteReference", _W + "endnoteReference"}
_PAGE_BREAKS = {"page", "column"}  # w:br's types that are no line of a sentence: they cut the paragraph
_UNSEEN = {_W + "lang", _W + "noProof", _W + "rPrChange"}  # not a run's format: they do not cut a sentence
_PARTS = [CT.WML_DOCUMENT_MAIN, CT.WML_HEADER, CT.WML_FOOTER, CT.WML_FOOTNOTES, CT.WML_ENDNOTES]


@dataclass(eq=False)
class _Atom:
    kind: str  # "text", "kept", "hint" (dropped where translated), "start" or "end" (of a range), "point"
    chain: tuple  # the link and the run it is in, outer first
    item: etree._Element
    point: Point | None = None  # a point's, which stands for the atom in its stretch's unit


@dataclass(eq=False)
class _Stretch:
    flow: etree._Element
    atoms: list[_Atom]  # the flow's
    first: int  # its first and last text atom
    last: int
    runs: Runs
    chains: dict  # a format's chain: that of its first run

    @property
    def paragraph(self) -> etree._Element:
        """The flow it is in (what runs.rewritten groups stretches by)."""
        return self.flow


@dataclass
class WordFile:
    data: bytes
    limits: FileLimits
    document: object  # docx.Document
    xml_parts: list  # (part, root): the parts python-docx leaves as bytes
    stretches: list[_Stretch]
    units: list[Unit] = field(default_factory=list)
    written: bool = False

    def write(self, translations: list[str]) -> bytes:
        if self.written:  # the first write moved this document's elements: write a fresh one
            return read(self.data, self.limits).write(translations)
        self.written = True
        changed = rewritten(self.stretches, translations, self.units)
        for flow, stretches in changed.items():
            _rebuild(flow, next(iter(stretches.values()))[0].atoms, stretches)
        roots = {flow.getroottree().getroot() for flow in changed}
        for part, root in self.xml_parts:
            if root in roots:
                part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)  # its bytes
        out = io.BytesIO()
        self.document.save(out)
        return out.getvalue()


def read(data: bytes, limits: FileLimits) -> WordFile:
    zipped.read(data, limits, "DOCX").office_main()
    try:
        document = docx.Document(io.BytesIO(data))
        parts = [p for p in document.part.package.iter_parts() if p.content_type in _PARTS]
        parts.sort(key=lambda p: (_PARTS.index(p.content_type), str(p.partname)))
        roots, xml_parts = [], []
        for part in parts:
            if hasattr(part, "element"):
                roots.append(part.element)
            else:
                parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)  # one a thread
                xml_parts.append((part, etree.fromstring(part.blob, parser)))
                roots.append(xml_parts[-1][1])
    except Exception as e:  # noqa: BLE001 - python-docx's and lxml's own, on a file that is no Word document
        raise FileError(f"the DOCX file cannot be read as a Word document: {said(e)}") from None
    stretches = [s for root in roots for flow in root.iter(*_FLOWS) for s in _stretches(flow)]
    return WordFile(data, limits, document, xml_parts, stretches, [s.runs.unit for s in stretches])


def _stretches(flow: etree._Element) -> list[_Stretch]:
    atoms = _atoms(flow)
    items = [a.item.text or "" if a.kind == "text" else a.point or (None if a.kind == "kept" else "") for a in atoms]
    for i in cuts(items):
        atoms[i].kind, atoms[i].point = "kept", None
    out, first, last = [], None, None
    for i, a in enumerate([*atoms, _Atom("kept", (), flow)]):
        if a.kind == "text":
            first, last = i if first is None else first, i
        elif a.kind == "kept" and first is not None:
            texts = [t for t in atoms[first : last + 1] if t.kind == "text"]
            inside = [t.point if t.point else (t.item.text or "", _format(t.chain)) for t in atoms[first : last + 1]
                      if t.kind == "text" or t.point]  # fmt: skip
            runs = encode(inside, lambda key: key[1] is not None)
            if worded(runs.unit.text):
                chains: dict = {}
                for t in texts:
                    chains.setdefault(_format(t.chain), t.chain)
                out.append(_Stretch(flow, atoms, first, last, runs, chains))
            first = None
    return out


def _atoms(flow: etree._Element) -> list[_Atom]:
    out = []
    for child in flow:
        if child.tag == _R:
            out += _run(child, ())
        elif child.tag == _LINK and len(child):
            for c in child:
                out += _run(c, (child,)) if c.tag == _R else [_Atom(_kind(c), (child,), c)]
        else:
            out.append(_Atom(_kind(child), (), child))
    return out


def _run(run: etree._Element, chain: tuple) -> list[_Atom]:
    content = [c for c in run if c.tag != _RPR]
    if not content:
        return [_Atom("hint", chain, run)]  # an empty run
    chain += (run,)
    return [_in_run(chain, c) for c in content]


def _in_run(chain: tuple, c: etree._Element) -> _Atom:
    if c.tag == _T:
        return _Atom("text", chain, c)
    if c.tag in _HINTS:
        return _Atom("hint", chain, c)
    kind = "space" if c.tag in _TABS else "anchor" if c.tag in _ANCHORS else None
    if c.tag == _W + "cr" or c.tag == _W + "br" and c.get(_W + "type") not in _PAGE_BREAKS:
        kind = "break"
    return _Atom("kept", chain, c) if kind is None else _Atom("point", chain, c, Point(c, kind))


def _kind(e: etree._Element) -> str:
    name = etree.QName(e).localname if isinstance(e.tag, str) and e.tag.startswith(_W) else ""
    if e.tag in _HINTS:
        return "hint"
    if name in ("bookmarkStart", "permStart") or name.endswith("RangeStart"):
        return "start"
    if name in ("bookmarkEnd", "permEnd") or name.endswith("RangeEnd"):
        return "end"
    return "kept"


def _format(chain: tuple) -> tuple:
    """A text run's format: its properties but those that are not formatting, and its link's attributes."""
    rpr = chain[-1].find(_RPR)
    props = () if rpr is None else tuple((c.tag, tuple(sorted(c.attrib.items()))) for c in rpr if c.tag not in _UNSEEN)
    return props, tuple(sorted(chain[0].attrib.items())) if len(chain) == 2 else None


def _rebuild(flow: etree._Element, atoms: list[_Atom], stretches: dict[int, tuple[_Stretch, list]]) -> None:
    b, i = Builder(flow, _copy), 0

    def put(chain: tuple, text: str) -> None:  # a run's text is a <w:t> of its own
        t = flow.makeelement(_T, {_SPACE: "preserve"})
        t.text = text
        b.element(chain, t)

    while i < len(atoms):
        if i not in stretches:
            b.element(atoms[i].chain, atoms[i].item)
            i += 1
            continue
        s, pieces = stretches[i]
        b.stretch(atoms[s.first : s.last + 1], pieces, s.chains, _format, put)  # after a point: in its run
        i = s.last + 1
    b.done()


def _copy(source: etree._Element) -> etree._Element:
    """An empty copy of a link or a run (a run's with its properties)."""
    copy = source.makeelement(source.tag, source.attrib)
    rpr = source.find(_RPR) if source.tag == _R else None
    if rpr is not None:
        copy.append(deepcopy(rpr))
    return copy
