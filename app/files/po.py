"""Gettext catalogues (.po, .pot): each entry's msgid translated into its msgstr, read and written by polib.

Translated: the entries with no translation yet (every msgstr empty), or all of them but the header and obsolete
ones where the caller asks to overwrite (`reader(overwrite=True)`; `read` keeps existing translations, fuzzy ones
included). Each msgid is one unit with the built-in placeholder kinds kept verbatim (`%s`, `%(name)s`, `%1$d`,
`{count}`, `{{ x }}`: app/protect/), whatever the entry's python-format or c-format flag says; its leading and
trailing whitespace (a "\\n" at either end, which msgfmt checks) stays out of the unit and is put back as written. A
msgid with HTML tags (what the `tags` protect kind finds: `<strong>`, `<a href="%(url)s">`, `<br/>`; not "a < b") is
a markup unit (app/files/inline.py): each tag an inline code that comes back exactly once as written, attributes and
all, a start and its end tag around the words aligned to the ones they wrapped, and its entities (`&amp;`) read as
their characters and written back as they were. A msgid without tags is plain text. A plural entry is two units,
msgid and msgid_plural, and fills every msgstr[n] the header's Plural-Forms asks for (nplurals; two where it has
none): the singular's translation for the form that plural= gives n = 1 where it fits (the form is for 1 alone, or
the singular has the plural's format specifications: Russian's form for 1, 21, 31 needs the %d msgfmt checks for),
the plural's for the others. Each entry given a translation is marked fuzzy, as translate-toolkit's pretranslate
marks machine translations: a reviewer clears the flag (msgfmt leaves fuzzy entries out of the .mo until then). An
entry whose translation is its msgid is left as it was (gettext shows the msgid for an empty msgstr, so nothing is
lost).

Kept: the header (its Language is set where the caller names the target language and the header has none),
comments, references, flags, contexts, obsolete (#~) entries and translated entries. A file none of whose units
changed comes back byte for byte; otherwise as polib writes it (its line wrapping at 78 columns; CRLF line ends
kept), in the charset the header names (UTF-8 where that cannot hold the translation; the header then says so).

Refused, the line named: bytes the header's charset cannot decode, a string that is not closed or holds an unknown
escape, a line that is neither a comment nor a keyword nor a string, a msgid without a msgstr, and what polib
itself cannot parse. polib reads a string that names an existing file as that file: text of one line (which a path
would be) never reaches it, as a PO file has at least a msgid line and a msgstr line.
"""

from __future__ import annotations

import codecs
import gettext
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import polib

from app.files import FileError, FileLimits, FileTooLarge, Unit, unchanged
from app.files.inline import Fragment, tagged
from app.html.reader import VOID

_CHARSET = re.compile(rb"charset=([\w.:-]+)")
_STRING = r'"(?:[^"\\\r\n]|\\[ntrvbfa"\\?\']|\\[0-7]{1,3}|\\x[0-9A-Fa-f]+)*+"'  # possessive: linear time
_KEYWORD = re.compile(rf"(msgctxt|msgid|msgid_plural|msgstr(?:\[[0-9]+\])?)[ \t]+{_STRING}\s*\Z")
_BAD_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*+\\[^ntrvbfa\"\\?'0-7x]")
_WORDS = {"msgctxt", "msgid", "msgid_plural", "msgstr"}
_CONTINUATION = re.compile(rf"{_STRING}\s*\Z")
_FORMAT = re.compile(r"%(?:\([^)]*\))?[-+ #0-9.*]*[a-zA-Z]|\{[^{}]*\}")  # printf's and Python's, roughly
_TAG = re.compile(  # what the `tags` protect kind finds (app/protect/spans.py), its name captured; not "a < b"
    r"</?([A-Za-z][\w:.\-]*)(?:\s+[\w:.\-]+\s*=\s*(?:\"[^\"<>]*\"|'[^'<>]*'))*\s*/?>"
)
_ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);")
_NPLURALS = re.compile(r"nplurals\s*=\s*([0-9]+)")
MAX_PLURALS = 6  # Arabic's six: no language gettext knows has more
_PLURAL = re.compile(r"plural\s*=\s*([^;]+)")


@dataclass
class _Job:
    index: int  # the entry's place in the catalogue
    edges: list[tuple[str, str]]  # per unit: the whitespace before and after it in its msgid
    markup: list[_Markup | None] = field(default_factory=list)  # per unit: its tags, where it has any


@dataclass
class _Markup:
    """A msgid with HTML tags: its tags as inline codes, its entities read as characters and written back as they
    were written (`&amp;`, `&nbsp;`), a translation's other characters as they come."""

    fragment: Fragment
    entities: dict[str, str]  # a character -> the entity the msgid wrote it as

    @classmethod
    def of(cls, text: str) -> _Markup:
        entities = {}
        for m in _ENTITY.finditer(text):
            if len(c := html.unescape(m[0])) == 1:
                entities.setdefault(c, m[0])
        decode = partial(_ENTITY.sub, lambda m: m[0] if len(c := html.unescape(m[0])) != 1 else c)
        return cls(tagged(text, _TAG, decode, VOID), entities)

    def render(self, translation: str) -> str:
        out = []
        for kind, x in self.fragment.back(translation):
            if kind == "text":
                out.append("".join(self.entities.get(c, c) for c in x))
            else:
                out.append(x.end if kind == "close" else x.start)
        return "".join(out)


@dataclass
class Catalogue:
    data: bytes
    text: str
    charset: str
    jobs: list[_Job]
    units: list[Unit] = field(default_factory=list)
    language: str | None = None

    def write(self, translations: list[str]) -> bytes:
        if unchanged(self.units, translations):
            return self.data
        po = polib.pofile(self.text, wrapwidth=78)  # a fresh one: write may be called again
        nplurals, numbers = _plural_forms(po.metadata.get("Plural-Forms", ""))
        at = 0
        for job in self.jobs:
            mine, units = translations[at : at + len(job.edges)], self.units[at : at + len(job.edges)]
            at += len(job.edges)
            if all(t == u.text for t, u in zip(mine, units)):
                continue
            mine = [m.render(t) if m else t for t, m in zip(mine, job.markup)]
            done = [lead + t.strip() + trail for t, (lead, trail) in zip(mine, job.edges)]
            entry = po[job.index]
            if entry.msgid_plural:
                forms = max(nplurals, len(entry.msgstr_plural))
                singular = [_fits(numbers.get(n, set()), entry.msgid, entry.msgid_plural) for n in range(forms)]
                entry.msgstr_plural = {n: done[0] if singular[n] else done[1] for n in range(forms)}
            else:
                entry.msgstr = done[0]
            if "fuzzy" not in entry.flags:
                entry.flags.insert(0, "fuzzy")
        if self.language and not po.metadata.get("Language", "").strip():
            po.metadata["Language"] = self.language
        crlf = "\r\n" in self.text  # polib writes "\n"
        try:
            return str(po).replace("\n", "\r\n" if crlf else "\n").encode(self.charset)
        except UnicodeEncodeError:
            content = po.metadata.get("Content-Type", "text/plain; charset=UTF-8")
            po.metadata["Content-Type"] = re.sub(r"charset=[\w.:-]+", "charset=UTF-8", content)
            return str(po).replace("\n", "\r\n" if crlf else "\n").encode()


def _plural_forms(header: str) -> tuple[int, dict[int, set[int]]]:
    """How many plural forms the header's Plural-Forms asks for (at most MAX_PLURALS), and the numbers (below 1000)
    each is for."""
    n = _NPLURALS.search(header)
    expression = _PLURAL.search(header)
    shown = repr(header) if len(header) <= 200 else f"{header[:200]!r}… ({len(header)} characters)"
    if n and (len(n[1]) > 2 or int(n[1]) > MAX_PLURALS):
        raise FileError(
            f"the header's Plural-Forms asks for nplurals={n[1][:20]}{'…' * (len(n[1]) > 20)}; languages have at "
            f"most {MAX_PLURALS} plural forms"
        )
    try:
        plural = gettext.c2py(expression[1].strip() if expression else "n != 1")
        numbers: dict[int, set[int]] = {}
        for k in range(1000):
            numbers.setdefault(plural(k), set()).add(k)
        return (int(n[1]) if n else 2), numbers
    except (ValueError, SyntaxError, TypeError, ZeroDivisionError, RecursionError):
        raise FileError(f"the header's Plural-Forms cannot be read: {shown} (e.g. nplurals=2; plural=(n != 1);)")


def _fits(form: set[int], singular: str, plural: str) -> bool:
    """Whether a plural form takes the singular's translation: it is for n = 1 alone, or for 1 and others and the
    singular has the plural's format specifications (msgfmt checks a form for other numbers has them)."""
    return 1 in form and (form == {1} or sorted(_FORMAT.findall(singular)) == sorted(_FORMAT.findall(plural)))


def _decode(data: bytes) -> tuple[str, str]:
    m = _CHARSET.search(data)
    charset = m[1].decode() if m and m[1].upper() != b"CHARSET" else "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise FileError(f"the PO header names the charset {charset!r}, which is not known") from None
    try:
        text = data.decode(charset)
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise FileError(f"line {line} of the PO file is not {charset} (its header's charset): byte {e.start}") from None
    if "\x00" in text:
        raise FileError("the PO file holds NUL characters: it is a binary file (an .mo?), not a PO file")
    return text, charset


def _check(text: str) -> None:
    """Refuse what polib would read past: an unterminated string, an unknown line, a msgid without a msgstr."""
    pending = None  # the line of a msgid not yet followed by its msgstr
    for n, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        s = line.strip()
        obsolete = s.startswith("#~")
        s = s[2:].strip() if obsolete else s
        if not s or (s.startswith("#") and not obsolete) or (obsolete and s.startswith("|")):
            continue
        keyword = _KEYWORD.match(s)
        if not (keyword or _CONTINUATION.match(s)):
            if escape := _BAD_ESCAPE.search(s):
                what = f'an unknown escape {escape[0][-2:]!r} (those known: \\n \\t \\" \\\\ ...)'
            elif s.startswith('"') or s.split(" ")[0] in _WORDS or s.split(" ")[0].startswith("msgstr["):
                what = 'a string that is not closed (strings are in "double quotes")'
            else:
                what = "a line that is not a comment (#), a keyword (msgid, msgstr, ...) or a string"
            raise FileError(f"line {n} of the PO file: {what}: {line[:80]!r}")
        word = keyword[1] if keyword else ""
        if word == "msgid" and pending is not None:
            raise FileError(f"line {pending} of the PO file: a msgid without a msgstr after it")
        if word == "msgid":
            pending = n
        elif word.startswith("msgstr"):
            pending = None
    if pending is not None:
        raise FileError(f"line {pending} of the PO file: a msgid without a msgstr after it")


def read(data: bytes, limits: FileLimits, overwrite: bool = False, language: str | None = None) -> Catalogue:
    """The entries to translate: those without a translation, or (overwrite) all but the header and obsolete ones."""
    text, charset = _decode(data)
    if not text.strip():
        return Catalogue(data, text, charset, [])
    if "\n" not in text.strip():
        raise FileError("the PO file has one line; a PO file has at least a msgid line and a msgstr line")
    _check(text)
    try:
        po = polib.pofile(text, wrapwidth=78)
    except (OSError, ValueError, KeyError, IndexError) as e:  # polib's syntax errors are OSErrors
        raise FileError(f"the PO file cannot be read: {e}") from None
    _plural_forms(po.metadata.get("Plural-Forms", ""))
    jobs, units = [], []
    for i, entry in enumerate(po):
        if entry.obsolete or not entry.msgid.strip():
            continue
        if not overwrite and (entry.msgstr.strip() or any(s.strip() for s in entry.msgstr_plural.values())):
            continue
        job = _Job(i, [])
        for source in [entry.msgid, entry.msgid_plural] if entry.msgid_plural else [entry.msgid]:
            core = source.strip()
            job.edges.append((source[: len(source) - len(source.lstrip())], source[len(source.rstrip()) :]))
            markup = _Markup.of(core) if _TAG.search(core) else None
            job.markup.append(markup)
            units.append(markup.fragment.unit(placeholders=True) if markup else Unit(core, placeholders=True))
        jobs.append(job)
        if len(units) > limits.max_units:
            raise FileTooLarge(f"the file has more than {limits.max_units} strings to translate; the limit is "
                               f"{limits.max_units}")  # fmt: skip
    return Catalogue(data, text, charset, jobs, units, language)


def reader(overwrite: bool = False, language: str | None = None) -> Callable[[bytes, FileLimits], Catalogue]:
    """read, translating existing translations too (overwrite), and naming the target language in the header."""
    return partial(read, overwrite=overwrite, language=language)
