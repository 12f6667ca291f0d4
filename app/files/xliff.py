"""XLIFF 1.2 and 2.0/2.1 (.xlf, .xliff): each trans-unit's (1.2) or segment's (2.x) source translated into its
target, through lxml.

Translated: units without a target yet (an empty `<target/>` counts as none), or all where the caller asks to
overwrite (`reader(overwrite=True)`), except those with translate="no" on them or on a group or file around them.
The source's text is one unit with the built-in placeholder kinds kept verbatim (app/protect/); its inline codes
are inline tags of the unit (app/files/inline.py), each copied into the target exactly once as it was written,
attributes and content included:
- elements around text, `<g>` and `<mrk>` (1.2), `<pc>` and `<mrk>` (2.x): they wrap the target's words aligned to
  the ones they wrapped;
- a `<bpt>`/`<ept>` (1.2) or `<sc/>`/`<ec/>` (2.x) pair in the same element, matched by id (rid, startRef): the
  pair goes around the words aligned to those between them, the start before the end;
- `<x/>`, `<bx/>`, `<ex/>`, `<ph>`, `<it>`, a lone `<bpt>`/`<ept>`/`<sc/>`/`<ec/>` (1.2, 2.x `<ph/>`), `<cp/>`,
  comments and any other element: a point after the word aligned to the one before it;
- `<mrk mtype="protected">` (1.2) and `<mrk translate="no">` (2.x): kept as written, in place of the translation of
  their text (which the model reads).

A target gets, in 1.2, state="needs-review-translation" and state-qualifier="mt-suggestion" (machine translation
for review, as a PO entry's fuzzy), and in 2.x its segment state="translated" (2.x has no state for review). The
file's target-language (1.2) or the root's trgLang (2.x) is set where the caller names the language and the file
has none. A new target goes after the source (after seg-source in 1.2). A 1.2 unit segmented by a CAT tool (a
`<seg-source>` of `<mrk mtype="seg">` segments) has each segment translated on its own, and its target mirrors the
seg-source: the same `<mrk mtype="seg" mid="…">` around each segment's translation, what lies between them as
written, as Okapi and Trados read it back. A unit whose translation is its source's text is left as it was. A file none of whose units changed comes
back byte for byte; otherwise what precedes the root element as written, and the root as lxml writes it.

Read with a parser that resolves no entities and fetches nothing; a DOCTYPE or ENTITY declaration is refused before
parsing (XLIFF has no DTD), and so is XML that is not well-formed, its line and column named.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

from lxml import etree

from app.files import FileError, FileLimits, FileTooLarge, Unit, unchanged
from app.files.inline import Fragment
from app.files.zipped import searchable

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
                          strip_cdata=False, huge_tree=False)  # fmt: skip
_DECLARATIONS = re.compile(rb"<!(?:DOCTYPE|ENTITY)")
_PROLOG = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|<\?.*?\?>|<!--.*?-->)*", re.DOTALL)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # what XML 1.0 cannot hold
_XML = "{http://www.w3.org/XML/1998/namespace}"
_WRAP = {"1": {"g", "mrk"}, "2": {"pc", "mrk"}}  # elements around text
_PAIRS = {"1": ("bpt", "ept"), "2": ("sc", "ec")}


def _name(el) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def _kept(el, version: str) -> bool:
    if _name(el) != "mrk":
        return False
    return el.get("mtype") == "protected" if version == "1" else el.get("translate") == "no"


@dataclass
class _Place:
    holder: object  # the trans-unit (1.2) or segment (2.x) that gets the state
    source: object
    target: object | None
    after: object  # what a new target follows
    segmented: object | None = None  # 1.2's seg-source, where it holds segments


def _segments(el, ns: str) -> list:
    """The segments (1.2's `<mrk mtype="seg">`) in a seg-source or a target that mirrors one, in document order (none
    inside another)."""
    return [m for m in el.iter(f"{ns}mrk") if m.get("mtype") == "seg" and not any(
        a.get("mtype") == "seg" for a in m.iterancestors(f"{ns}mrk"))]  # fmt: skip


def _places(root, version: str, ns: str) -> Iterator[_Place]:
    """Every source to translate (with translate="no" on no element around it), in document order."""
    unit_tag = f"{ns}trans-unit" if version == "1" else f"{ns}unit"
    for unit in root.iter(unit_tag):
        if next((a.get("translate") for a in [unit, *unit.iterancestors()] if a.get("translate")), "yes") == "no":
            continue
        for holder in [unit] if version == "1" else unit.findall(f"{ns}segment"):
            source = holder.find(f"{ns}source")
            if source is None:
                continue
            after = holder.find(f"{ns}seg-source") if version == "1" else None
            segmented = after if after is not None and _segments(after, ns) else None
            yield _Place(holder, source, holder.find(f"{ns}target"), source if after is None else after, segmented)


def _pair_id(el, version: str, start: bool) -> str | None:
    """What matches a pair's start to its end: 1.2's rid (else id) on both, 2.x's sc id and ec startRef."""
    if version == "1":
        return el.get("rid") or el.get("id")
    return el.get("id") if start else el.get("startRef")


def _fill(f: Fragment, el, version: str) -> None:
    """el's content into the fragment: its text, and its children as codes."""
    if el.text:
        f.text(el.text)
    start, end = _PAIRS[version]
    children = list(el)  # lxml finds a child by its number by walking to it
    stack, pairs = [], {}  # a start's place among the children -> its end's
    for i, child in enumerate(children):
        if _name(child) == start and _pair_id(child, version, True):
            stack.append(i)
        elif (
            _name(child) == end
            and stack
            and _pair_id(children[stack[-1]], version, True) == _pair_id(child, version, False)
        ):
            pairs[stack.pop()] = i
    ends = set(pairs.values())
    for i, child in enumerate(children):
        name = _name(child)
        if i in pairs:
            f.open(child, children[pairs[i]])
        elif i in ends:
            f.close()
        elif name in _WRAP[version] and not _kept(child, version):
            f.open(child, None)
            _fill(f, child, version)
            f.close()
        elif _kept(child, version):
            f.kept(child, "".join(child.itertext()))
        else:
            f.empty(child)
        if child.tail:
            f.text(child.tail)


def _build(target, pieces: list) -> None:
    stack = [[target, None]]  # per element open: it, and its last child so far (lxml counts children by walking)
    for kind, x in pieces:
        parent, last = stack[-1]
        x = _NOT_XML.sub("", x) if kind == "text" else x
        if kind == "text" and last is None:
            parent.text = (parent.text or "") + x
        elif kind == "text":
            last.tail = (last.tail or "") + x
        elif kind == "close" and x.end is None:
            stack.pop()
        else:
            if kind == "open" and x.end is None:  # an element around text: its start tag, its content to come
                el = parent.makeelement(x.start.tag, x.start.attrib)
            else:  # a point, a kept element, or one of a pair: a copy
                el = copy.deepcopy(x.end if kind == "close" else x.start)
                el.tail = None
            parent.append(el)
            stack[-1][1] = el
            if kind == "open" and x.end is None:
                stack.append([el, None])


def _parse(data: bytes):
    text = searchable(data, "the XLIFF file") or data  # a UTF-16 file's declarations too
    if m := _DECLARATIONS.search(text):
        line = text.count(b"\n", 0, m.start()) + 1
        raise FileError(f"line {line} of the XLIFF file: a DOCTYPE or ENTITY declaration; XLIFF has none, and they "
                        "are refused (entities could expand without bound or fetch files)")  # fmt: skip
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as e:
        where = "" if "line" in e.msg else f" (line {e.lineno}, column {e.offset})"
        raise FileError(f"the XLIFF file is not well-formed XML: {e.msg}{where}") from None
    if _name(root) != "xliff":
        raise FileError(f"the file is not XLIFF: its root element is <{_name(root) or root.tag}>, not <xliff>")
    version = (root.get("version") or "").strip()
    if version[:2] not in ("1.", "2."):
        raise FileError(f"XLIFF version {version!r} is not supported; the versions are 1.2, 2.0 and 2.1")
    ns = f"{{{etree.QName(root).namespace}}}" if etree.QName(root).namespace else ""
    return root, version[0], ns


@dataclass
class XliffFile:
    data: bytes
    version: str  # "1" or "2"
    chosen: list[tuple[int, int | None]]  # what is translated: a place's number in _places' order, and its segment's
    fragments: list[Fragment]
    units: list[Unit] = field(default_factory=list)
    language: str | None = None

    def write(self, translations: list[str]) -> bytes:
        if unchanged(self.units, translations):
            return self.data
        root, version, ns = _parse(self.data)  # a fresh tree: write may be called again
        places = list(_places(root, version, ns))
        by_place: dict[int, list[tuple[int | None, Fragment, str]]] = {}
        for (i, segment), f, unit, t in zip(self.chosen, self.fragments, self.units, translations):
            if t != unit.text:
                by_place.setdefault(i, []).append((segment, f, t))
        for i, translated in by_place.items():
            p = places[i]
            target = p.target
            if target is None:
                target = p.source.makeelement(f"{ns}target", {})
                before = p.after.getprevious()
                indent = p.holder.text if before is None else before.tail
                p.after.addnext(target)
                target.tail = p.after.tail
                p.after.tail = indent if indent and not indent.strip() else p.after.tail
            else:
                target.text = None
                for child in list(target):
                    target.remove(child)
            if p.source.get(f"{_XML}space") and target.get(f"{_XML}space") is None:
                target.set(f"{_XML}space", p.source.get(f"{_XML}space"))
            if p.segmented is None:
                ((_, f, t),) = translated
                _build(target, f.back(t))
            else:  # the seg-source's segments and what is between them, each translated segment's content replaced
                target.text = p.segmented.text
                for child in p.segmented:
                    target.append(copy.deepcopy(child))
                segments = _segments(target, ns)
                for segment, f, t in translated:
                    mrk = segments[segment]
                    mrk.text = None
                    for child in list(mrk):
                        mrk.remove(child)
                    _build(mrk, f.back(t))
            if version == "1":
                target.set("state", "needs-review-translation")
                target.set("state-qualifier", "mt-suggestion")
            else:
                p.holder.set("state", "translated")
        if self.language:
            for el, attribute in ([(e, "target-language") for e in root.iter(f"{ns}file")] if version == "1"
                                  else [(root, "trgLang")]):  # fmt: skip
                if not el.get(attribute):
                    el.set(attribute, self.language)
        encoding = root.getroottree().docinfo.encoding or "UTF-8"
        if self.data.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00", b"<\x00")):  # UTF-16 or -32: as lxml writes it
            return etree.tostring(root.getroottree(), encoding=encoding, xml_declaration=True)
        prolog = _PROLOG.match(self.data).group()  # the declaration, comments and whitespace before the root
        after = [etree.tostring(s, encoding=encoding, with_tail=False) for s in root.itersiblings()]
        body = etree.tostring(root, encoding=encoding, xml_declaration=False, with_tail=False)
        return prolog + body + b"\n".join([b"", *after]) + self.data[len(self.data.rstrip()) :]


def read(data: bytes, limits: FileLimits, overwrite: bool = False, language: str | None = None) -> XliffFile:
    """The sources to translate: those without a target, or (overwrite) all but those marked translate="no"."""
    root, version, ns = _parse(data)
    chosen, fragments = [], []
    for i, p in enumerate(_places(root, version, ns)):
        if p.target is not None and not overwrite and (p.target.text or len(p.target)):
            continue
        for segment, el in [(None, p.source)] if p.segmented is None else enumerate(_segments(p.segmented, ns)):
            f = Fragment()
            _fill(f, el, version)
            if f.visible.strip():
                chosen.append((i, segment))
                fragments.append(f)
        if len(fragments) > limits.max_units:
            raise FileTooLarge(f"the file has more than {limits.max_units} segments to translate; the limit is "
                               f"{limits.max_units}")  # fmt: skip
    units = [f.unit(placeholders=True) for f in fragments]
    return XliffFile(data, version, chosen, fragments, units, language)


def reader(overwrite: bool = False, language: str | None = None) -> Callable[[bytes, FileLimits], XliffFile]:
    """read, translating over existing targets too (overwrite), and naming the target language where none is."""
    return partial(read, overwrite=overwrite, language=language)
