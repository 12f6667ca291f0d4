"""OpenDocument text (ODT) through lxml: the paragraphs of content.xml and of styles.xml (headers, footers).

Both are parsed with entities never resolved, no DTD loaded and nothing fetched (and zipped.py refused any
DOCTYPE before). Translated: each `text:p` and `text:h`, in the body, tables, lists, sections, frames and text
boxes, footnotes and endnotes, and the master pages' headers and footers. Not translated: comments
(`office:annotation`), the deleted text of tracked changes, and everything that is not a paragraph's text.

A paragraph's text is its character data, each piece in the spans (`text:span`, by its `text:style-name`) and
links (`text:a`, whose `xlink:href` stays as it is) around it: its format, links becoming `<a>`; whitespace is
read as ODF renders it (a run of it is one space). Points inside the sentence, which do not cut it
(app/files/runs.py's Point): spaces, tabs and line breaks written as elements (`text:s`, `text:tab`,
`text:line-break`) and notes (`text:note`: its anchor; the note's own paragraphs are units of their own). Kept
where they are, and cutting the paragraph into separate units: fields, frames, and any other element that is not
a span or a link. A stretch of text between them that has a letter, with the points between its texts, is a unit
(app/files/runs.py).

Written back, a paragraph with a stretch whose translation differs from its text is rebuilt: its content goes
back in order, each stretch translated replaced by the text of its translation, each piece in copies of the spans
and links of the first text of that format (or of the point it follows, where they have that format), each point
(its element, moved) where the translation has it, in copies of its own spans and links. Soft page breaks in a translated stretch are dropped; bookmarks and
reference marks starting in it start before its translation, those ending in it end after it. The members come
back in the order they came, `mimetype` first and stored; those not rewritten come back byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lxml import etree

from app.files import FileError, FileLimits, Unit, zipped
from app.files.runs import Builder, Point, Runs, cuts, encode, rewritten
from app.segment import worded

_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_FLOWS = (_TEXT + "p", _TEXT + "h")
_WRAPPERS = {_TEXT + "span", _TEXT + "a"}
_UNREAD = {_OFFICE + "annotation", _TEXT + "tracked-changes"}  # comments, deleted text
_HINTS = {_TEXT + "soft-page-break"}
_INLINE = {_TEXT + "s": "space", _TEXT + "tab": "space", _TEXT + "line-break": "break", _TEXT + "note": "anchor"}
_POINTS = {"bookmark", "reference-mark", "alphabetical-index-mark", "toc-mark", "user-index-mark"}
_WHITESPACE = re.compile(r"[ \t\r\n]+")
_MEMBERS = ("content.xml", "styles.xml")
_MEDIA_TYPES = ("application/vnd.oasis.opendocument.text", "application/vnd.oasis.opendocument.text-template")


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


@dataclass(eq=False)
class _Atom:
    kind: str  # "text", "kept", "hint" (dropped where translated), "start" or "end" (of a range), "point"
    chain: tuple  # the spans and links it is in, outer first
    item: etree._Element | str
    point: Point | None = None  # a point's, which stands for the atom in its stretch's unit


@dataclass(eq=False)
class _Stretch:
    paragraph: etree._Element
    atoms: list[_Atom]  # the paragraph's
    first: int  # its first and last text
    last: int
    runs: Runs
    chains: dict  # a format's chain: that of its first text


@dataclass
class OdtFile:
    container: zipped.Container
    limits: FileLimits
    roots: dict[str, etree._Element]  # content.xml and styles.xml, parsed
    stretches: list[_Stretch]
    units: list[Unit] = field(default_factory=list)
    written: bool = False

    def write(self, translations: list[str]) -> bytes:
        if self.written:  # the first write moved this document's elements: write a fresh one
            return _parsed(self.container, self.limits).write(translations)
        self.written = True
        changed = rewritten(self.stretches, translations, self.units)
        for paragraph, stretches in changed.items():
            _rebuild(paragraph, next(iter(stretches.values()))[0].atoms, stretches)
        touched = {p.getroottree().getroot() for p in changed}
        replaced = {
            name: etree.tostring(root.getroottree(), xml_declaration=True, encoding="UTF-8")
            for name, root in self.roots.items()
            if root in touched
        }
        return self.container.rezipped(replaced)


def read(data: bytes, limits: FileLimits) -> OdtFile:
    return _parsed(zipped.read(data, limits, "ODT"), limits)


def _parsed(container: zipped.Container, limits: FileLimits) -> OdtFile:
    media_type = container.members.get("mimetype", _MEDIA_TYPES[0].encode()).decode(errors="replace").strip()
    if media_type not in _MEDIA_TYPES:
        raise FileError(f"the ODT file's mimetype is {media_type[:100]!r}; an ODT file's is {_MEDIA_TYPES[0]!r}")
    roots = {}
    for name in _MEMBERS:
        if name == "content.xml" or name in container.members:
            try:
                roots[name] = etree.fromstring(container.xml(name), _parser())
            except etree.XMLSyntaxError as e:
                raise FileError(f"the ODT file's {name} is not well-formed XML: {e}") from None
    if roots["content.xml"].tag != _OFFICE + "document-content":
        raise FileError(f"the ODT file's content.xml holds {roots['content.xml'].tag}, not office:document-content")
    stretches = []
    for root in roots.values():
        for paragraph in root.iter(*_FLOWS):
            if not any(a.tag in _UNREAD for a in paragraph.iterancestors()):
                stretches += _stretches(paragraph)
    return OdtFile(container, limits, roots, stretches, [s.runs.unit for s in stretches])


def _stretches(paragraph: etree._Element) -> list[_Stretch]:
    atoms = _atoms(paragraph, ())
    items = [a.item if a.kind == "text" else a.point or (None if a.kind == "kept" else "") for a in atoms]
    for i in cuts(items):
        atoms[i].kind, atoms[i].point = "kept", None
    out, first, last = [], None, None
    for i, a in enumerate([*atoms, _Atom("kept", (), paragraph)]):
        if a.kind == "text":
            first, last = i if first is None else first, i
        elif a.kind == "kept" and first is not None:
            texts = [t for t in atoms[first : last + 1] if t.kind == "text"]
            inside = [t.point if t.point else (_WHITESPACE.sub(" ", t.item), _format(t.chain))
                      for t in atoms[first : last + 1] if t.kind == "text" or t.point]  # fmt: skip
            runs = encode(inside, _link)
            if worded(runs.unit.text):
                chains: dict = {}
                for t in texts:
                    chains.setdefault(_format(t.chain), t.chain)
                out.append(_Stretch(paragraph, atoms, first, last, runs, chains))
            first = None
    return out


def _atoms(element: etree._Element, chain: tuple) -> list[_Atom]:
    out = [_Atom("text", chain, element.text)] if element.text else []
    for child in element:
        if child.tag in _WRAPPERS:
            out += _atoms(child, (*chain, child))
        elif child.tag in _INLINE:
            out.append(_Atom("point", chain, child, Point(child, _INLINE[child.tag])))
        else:
            out.append(_Atom(_kind(child), chain, child))
        if child.tail:
            out.append(_Atom("text", chain, child.tail))
    return out


def _kind(e: etree._Element) -> str:
    name = etree.QName(e).localname if isinstance(e.tag, str) and e.tag.startswith(_TEXT) else ""
    if e.tag in _HINTS:
        return "hint"
    if name in _POINTS or (name.endswith("-start") and name[: -len("-start")] in _POINTS):
        return "start"
    if name.endswith("-end") and name[: -len("-end")] in _POINTS:
        return "end"
    return "kept"


def _format(chain: tuple) -> tuple:
    return tuple((w.tag, tuple(sorted(w.attrib.items()))) for w in chain)


def _link(key: tuple) -> bool:
    return any(tag == _TEXT + "a" for tag, _ in key)


def _rebuild(paragraph: etree._Element, atoms: list[_Atom], stretches: dict[int, tuple[_Stretch, list]]) -> None:
    b, i = Builder(paragraph, lambda w: w.makeelement(w.tag, w.attrib)), 0
    while i < len(atoms):
        if i not in stretches:
            _put(b, atoms[i].chain, atoms[i].item)
            i += 1
            continue
        s, pieces = stretches[i]
        b.stretch(atoms[s.first : s.last + 1], pieces, s.chains, _format, b.text)  # after a point: in its spans
        i = s.last + 1
    b.done()


def _put(b: Builder, chain: tuple, item: etree._Element | str) -> None:
    if isinstance(item, str):
        b.text(chain, item)
    else:
        b.element(chain, item)
