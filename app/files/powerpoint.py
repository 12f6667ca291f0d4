"""PowerPoint presentations (PPTX) through python-pptx: the text of every shape of every slide, and of its notes.

Translated: each paragraph (`a:p`) on every slide, in the text frames of its shapes, placeholders, groups (at any
depth) and table cells, and on the slide's notes page. Masters, layouts, charts, SmartArt and comments are parts
of their own and left as they are.

A paragraph's runs (`a:r`) are its text; its line breaks (`a:br`, a text's vertical tab) are points inside the
sentence, which do not cut it (app/files/runs.py's Point); kept where they are, and cutting the paragraph into
separate units: its fields (`a:fld`: slide numbers, dates) and its properties. A stretch of runs between them that
has a letter, with the line breaks between its runs, is a unit (app/files/runs.py); a run's format is its `a:rPr`
without its language and proofing marks, a click link (`a:hlinkClick`, whose target stays as it is) among them,
such runs becoming `<a>`.

Written back, a paragraph with a stretch whose translation differs from its text is rebuilt: each stretch
translated becomes the runs of its translation, each with a copy of the `a:rPr` of the first run of that format,
and its line breaks (their elements, moved) where the translation has them; fields and the rest stay in their
places.
"""

from __future__ import annotations

import io
from copy import deepcopy
from dataclasses import dataclass, field

import pptx
from lxml import etree

from app.files import FileError, FileLimits, Unit, said, zipped
from app.files.runs import Builder, Point, Runs, cuts, encode, rewritten
from app.segment import worded

_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_P, _R, _T, _RPR, _BR = _A + "p", _A + "r", _A + "t", _A + "rPr", _A + "br"
_LINKS = {_A + "hlinkClick"}
_UNSEEN = {"lang", "altLang", "dirty", "err", "smtClean", "smtId", "noProof", "bmk"}  # not a run's format


@dataclass(eq=False)
class _Stretch:
    paragraph: etree._Element
    children: list  # the paragraph's, in order
    first: int  # its first and last run among them
    last: int
    runs: Runs
    chains: dict  # a format's run: its first


@dataclass
class PowerPointFile:
    data: bytes
    limits: FileLimits
    presentation: object  # pptx.Presentation
    stretches: list[_Stretch]
    units: list[Unit] = field(default_factory=list)
    written: bool = False

    def write(self, translations: list[str]) -> bytes:
        if self.written:  # the first write moved this presentation's elements: write a fresh one
            return read(self.data, self.limits).write(translations)
        self.written = True
        changed = rewritten(self.stretches, translations, self.units)
        for paragraph, stretches in changed.items():
            _rebuild(paragraph, stretches)
        out = io.BytesIO()
        self.presentation.save(out)
        return out.getvalue()


def read(data: bytes, limits: FileLimits) -> PowerPointFile:
    zipped.read(data, limits, "PPTX").office_main()
    try:
        presentation = pptx.Presentation(io.BytesIO(data))
        roots = []
        listed = presentation.element.sldIdLst is not None  # .slides would add an empty list to a file without one
        for slide in presentation.slides if listed else ():
            roots.append(slide.element)
            if slide.has_notes_slide:
                roots.append(slide.notes_slide.element)
    except Exception as e:  # noqa: BLE001 - python-pptx's and lxml's own, on a file that is no presentation
        raise FileError(f"the PPTX file cannot be read as a PowerPoint presentation: {said(e)}") from None
    stretches = [s for root in roots for paragraph in root.iter(_P) for s in _stretches(paragraph)]
    return PowerPointFile(data, limits, presentation, stretches, [s.runs.unit for s in stretches])


def _stretches(paragraph: etree._Element) -> list[_Stretch]:
    children, out, first, last = list(paragraph), [], None, None
    items = [_text(c) if c.tag == _R else Point(c, "break") if c.tag == _BR else None for c in children]
    cut = cuts(items)
    for i, c in enumerate([*children, paragraph]):
        if c.tag == _R and c.find(_T) is not None:
            first, last = i if first is None else first, i
        elif (c.tag != _BR or i in cut) and first is not None:
            inside = children[first : last + 1]
            text_runs = [r for r in inside if r.tag == _R]
            runs = encode(
                [(r.find(_T).text or "", _format(r)) if r.tag == _R else Point(r, "break") for r in inside],
                lambda key: key[2],
            )
            if worded(runs.unit.text):
                chains: dict = {}
                for r in text_runs:
                    chains.setdefault(_format(r), (r,))
                out.append(_Stretch(paragraph, children, first, last, runs, chains))
            first = None
    return out


def _text(run: etree._Element) -> str | None:
    """A run's text; None for a run without one (it cuts the paragraph)."""
    t = run.find(_T)
    return None if t is None else t.text or ""


def _format(run: etree._Element) -> tuple:
    """A run's format (its properties but language and proofing marks) and whether it is a link."""
    rpr = run.find(_RPR)
    if rpr is None:
        return (), (), False
    attributes = tuple(sorted((k, v) for k, v in rpr.attrib.items() if k not in _UNSEEN))
    return attributes, tuple(etree.tostring(c) for c in rpr), any(c.tag in _LINKS for c in rpr)


def _rebuild(paragraph: etree._Element, stretches: dict[int, tuple[_Stretch, list]]) -> None:
    children = next(iter(stretches.values()))[0].children
    b, i = Builder(paragraph, _copy), 0
    while i < len(children):
        if i not in stretches:
            run = children[i].tag == _R and children[i].find(_T) is not None
            b.element((children[i],) if run else (), children[i].find(_T) if run else children[i])
            i += 1
            continue
        s, pieces = stretches[i]
        for piece in pieces:
            if isinstance(piece, Point):
                b.element((), piece.item)
                continue
            text, key = piece
            t = paragraph.makeelement(_T)
            t.text = text
            b.element(s.chains[key], t, fresh=True)  # a run holds one text
        i = s.last + 1
    b.done()


def _copy(run: etree._Element) -> etree._Element:
    copy = run.makeelement(run.tag, run.attrib)
    rpr = run.find(_RPR)
    if rpr is not None:
        copy.append(deepcopy(rpr))
    return copy
