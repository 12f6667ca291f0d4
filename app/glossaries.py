"""Stored glossaries: (source term, target term) pairs kept under NMT_GLOSSARY_DIR, in DeepL's shape (an id, a name,
a language pair, the creation time, the entries in order), for /glossaries and DeepL's /v2/glossaries.

A glossary is one file, `<id>.glossary`: a line of JSON (all but the entries, so that a listing reads one line a
glossary), then a `source<TAB>target` line an entry. Terms hold no tab, line break or other control character
(DeepL's rule), so each line is one entry. A glossary is written whole under a temporary name, flushed to the disk
(fsync), renamed over its own name and the directory synced before the answer: it is either all there or not at
all, and once acknowledged a crash does not lose it. A delete is an unlink, synced the same way. A temporary file a
crash left is never read as a glossary (its name starts with a dot); a later write removes it once it is an hour
old. Every call reads the directory afresh, so servers that share it (NMT_WORKERS, replicas on one volume) see each
other's glossaries; the file work runs on a thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import os
import re
import time
import unicodedata
import uuid
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from app.durable import sync_directory
from app.languages import UnknownLanguage, same, short
from app.text import Engine

log = logging.getLogger("nmt_serve")
MAX_GLOSSARIES = 1000  # stored at once (DeepL's per account)
MAX_ENTRIES = 10_000  # per glossary, and in a request's inline glossary
MAX_TERM_BYTES = 1024  # a term's UTF-8 bytes (DeepL's), and a glossary name's
SUFFIX = ".glossary"
STALE_S = 3600  # a temporary file this old is a crash's leftover
ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
LANGUAGE = re.compile(r"^[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*$")
CONTROL = re.compile("[\x00-\x1f\x80-\x9f\u2028\u2029]")  # C0, C1, Unicode line and paragraph separators
LINE = re.compile(r"\r\n?|\n")
Format = Literal["tsv", "csv"]


class GlossaryError(Exception):
    """A glossary request that cannot be done: its HTTP status, a stable kind, and what was wrong."""

    status, kind = 422, "validation_error"


class InvalidGlossary(GlossaryError):
    """Entries, a name or languages that DeepL's rules refuse."""


class GlossaryTooLarge(GlossaryError):
    status, kind = 413, "glossary_too_large"


class TooManyGlossaries(GlossaryError):
    kind = "too_many_glossaries"


class UnknownGlossary(GlossaryError):
    status, kind = 404, "not_found"


class StoreFailed(GlossaryError):
    """The directory cannot be written or a glossary file read (not the request's fault)."""

    status, kind = 500, "storage_error"


@dataclass(frozen=True)
class Glossary:
    glossary_id: str
    name: str
    source_lang: str
    target_lang: str
    creation_time: str  # ISO 8601 in UTC to the millisecond, as DeepL's: 2026-11-28T20:55:19.329Z
    entry_count: int
    entries: tuple[tuple[str, str], ...] = ()  # empty where only the glossary's line of JSON was read

    def header(self) -> dict:
        """Everything but the entries: the line of JSON a glossary file starts with."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "entries"}

    def info(self) -> dict:
        """DeepL's description of a glossary (its GlossaryInfo): the header, and `ready` (always, here)."""
        return {**self.header(), "ready": True}

    def tsv(self) -> str:
        return "\n".join(f"{s}\t{t}" for s, t in self.entries)


# ---- entries -------------------------------------------------------------------------------------------------


def parse(text: str, format: Format, source_lang: str, target_lang: str) -> list[tuple[str, str, str]]:
    """(where, source, target) for each entry of DeepL's TSV (`source<TAB>target` a line) or CSV (`source,target`,
    or `source,target,source language,target language`, quoted as CSV quotes); blank lines and a byte order mark
    (as spreadsheets write) are left out."""
    out, text = [], text.removeprefix("\ufeff")
    if format == "tsv":
        for n, line in enumerate(LINE.split(text), 1):
            if not line.strip():
                continue
            tabs = line.count("\t")
            if tabs != 1:
                what = "no tab between its source and target terms" if not tabs else f"{tabs} tabs"
                raise InvalidGlossary(f"line {n} has {what}; TSV entries are one `source<TAB>target` pair a line")
            source, target = line.split("\t")
            out.append((f"line {n}", source, target))
        return out
    reader, read = csv.reader(io.StringIO(text, newline=""), strict=True), 0
    try:
        for row in reader:
            n, read = read + 1, reader.line_num  # where the row begins (a quoted term may hold line breaks)
            if not row or not "".join(row).strip():
                continue
            if len(row) not in (2, 4):
                raise InvalidGlossary(
                    f"line {n} has {len(row)} fields; CSV entries are `source,target` or `source,target,source "
                    "language,target language` a line (quote a term that holds a comma)"
                )
            if len(row) == 4 and not (same(row[2], source_lang) and same(row[3], target_lang)):
                raise InvalidGlossary(
                    f"line {n} names the languages {row[2].strip()!r}, {row[3].strip()!r}; this glossary's are "
                    f"{source_lang!r}, {target_lang!r}"
                )
            out.append((f"line {n}", row[0], row[1]))
    except csv.Error as e:
        raise InvalidGlossary(f"the CSV cannot be read at line {reader.line_num}: {e}") from None
    return out


def checked(entries: Iterable[tuple[str, str, str]]) -> tuple[tuple[str, str], ...]:
    """The entries, each term without the whitespace at its ends, checked as DeepL checks them: at least one, no
    empty term, no control character or line break in one, at most MAX_TERM_BYTES bytes a term, no source term twice,
    and at most MAX_ENTRIES."""
    out: dict[str, str] = {}
    where_of: dict[str, tuple[str, str]] = {}  # a source term as it matches (app/terms.py): its entry and as written
    for where, source, target in entries:
        source, target = term(where, "source", source), term(where, "target", target)
        if (same := " ".join(unicodedata.normalize("NFC", source).split())) in where_of:
            first, written = where_of[same]
            also = "" if written == source else f" ({source!r}: the same words in another Unicode form or spacing)"
            raise InvalidGlossary(
                f"{where} repeats the source term {written!r} of {first}{also}; each source term may have one "
                "target term"
            )
        out[source], where_of[same] = target, (where, source)
        if len(out) > MAX_ENTRIES:
            raise GlossaryTooLarge(f"the glossary has more than {MAX_ENTRIES} entries; the limit is {MAX_ENTRIES}")
    if not out:
        raise InvalidGlossary("the glossary has no entries; send at least one source term with its target term")
    return tuple(out.items())


def term(where: str, side: str, text: str) -> str:
    text = text.strip()
    if not text:
        raise InvalidGlossary(f"{where} has an empty {side} term; every entry needs both terms")
    if bad := CONTROL.search(text):
        raise InvalidGlossary(
            f"{where}'s {side} term {short(text)} holds the control character U+{ord(bad.group()):04X}; terms may "
            "not hold tabs, line breaks or other control characters"
        )
    if (size := len(text.encode())) > MAX_TERM_BYTES:
        raise InvalidGlossary(
            f"{where}'s {side} term has {size} bytes (UTF-8); the limit is {MAX_TERM_BYTES} bytes a term"
        )
    return text


def named(name: str) -> str:
    """A glossary's name: not blank, at most MAX_TERM_BYTES bytes."""
    if not name.strip():
        raise InvalidGlossary("the glossary's name is empty; name it")
    if (size := len(name.encode())) > MAX_TERM_BYTES:
        raise InvalidGlossary(f"the glossary's name has {size} bytes (UTF-8); the limit is {MAX_TERM_BYTES}")
    return name


def language(code: str, side: str) -> str:
    """A language code as a glossary keeps it (`en`, `de`, `deu_Latn`, `zh-Hant`), checked for its shape."""
    code = code.strip()
    if not LANGUAGE.match(code) or len(code) > 32 or code.lower() == "auto":  # a glossary is of one language pair
        raise InvalidGlossary(f"{side}_lang {short(code)} is not a language code (such as en, de or deu_Latn)")
    return code


# ---- languages -----------------------------------------------------------------------------------------------


def fits(glossary: Glossary, engine: Engine, source: str | None, target: str | None) -> bool:
    """Whether the glossary's languages are the ones `engine` translates this request between: a pair model's, or the
    request's `source` and `target` as a many-to-many model resolves them."""
    if engine.codes is None:
        langs = engine.languages
        return same(glossary.source_lang, langs["source"]) and same(glossary.target_lang, langs["target"])
    try:
        resolve = engine.codes.resolve
        return (
            source is not None and target is not None
            and resolve(glossary.source_lang) == resolve(source) and resolve(glossary.target_lang) == resolve(target)
        )  # fmt: skip
    except UnknownLanguage:
        return False


def terms(*glossaries: Iterable[tuple[str, str]], ignore_case: bool = False) -> tuple[tuple[str, str], ...]:
    """The entries of several glossaries as one, in order: a source term's first target term counts (with
    `ignore_case`, source terms that differ only in case are one term)."""
    out: dict[str, tuple[str, str]] = {}
    for entries in glossaries:
        for source, target in entries:
            out.setdefault(source.casefold() if ignore_case else source, (source, target))
    return tuple(out.values())


# ---- the store -------------------------------------------------------------------------------------------------


class GlossaryStore:
    """The glossaries in one directory (made on the first write); each method runs its file work on a thread."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    async def create(self, name: str, source_lang: str, target_lang: str, entries: Iterable) -> Glossary:
        """A new glossary of checked entries ((where, source, target) triples, as parse() gives), stored."""
        glossary = Glossary(
            str(uuid.uuid4()), named(name), language(source_lang, "source"), language(target_lang, "target"),
            datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"), 0, checked(entries),
        )  # fmt: skip
        glossary = replace(glossary, entry_count=len(glossary.entries))
        await asyncio.to_thread(self._write, glossary)
        return glossary

    async def list(self) -> list[Glossary]:
        """Every glossary (without its entries), oldest first."""
        return await asyncio.to_thread(self._list)

    async def get(self, glossary_id: str, entries: bool = True) -> Glossary:
        """One glossary, with its entries unless `entries` is false; UnknownGlossary (404) if there is none."""
        return await asyncio.to_thread(self._read, self._path(glossary_id), entries)

    async def delete(self, glossary_id: str) -> None:
        await asyncio.to_thread(self._delete, self._path(glossary_id))

    def _path(self, glossary_id: str) -> Path:
        if not ID.match(glossary_id.lower()):
            raise UnknownGlossary(f"there is no glossary {short(glossary_id)}: a glossary id is a UUID")
        return self.directory / f"{glossary_id.lower()}{SUFFIX}"

    def _write(self, glossary: Glossary) -> None:
        if len(self._list()) >= MAX_GLOSSARIES:
            raise TooManyGlossaries(
                f"this server keeps at most {MAX_GLOSSARIES} glossaries and has that many; delete one first"
            )
        final = self.directory / f"{glossary.glossary_id}{SUFFIX}"
        temporary = self.directory / f".{glossary.glossary_id}.{os.getpid()}.tmp"
        header = json.dumps(glossary.header(), ensure_ascii=False)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._sweep()
            with open(temporary, "x", encoding="utf-8", newline="\n") as f:
                f.write(header + "\n")
                f.writelines(f"{s}\t{t}\n" for s, t in glossary.entries)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, final)
            self._sync()
        except OSError as e:
            with suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise StoreFailed(
                f"the glossary could not be stored in {self.directory} (NMT_GLOSSARY_DIR): {e.strerror or e}"
            ) from e

    def _list(self) -> list[Glossary]:
        if not self.directory.is_dir():
            return []
        out = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            if not ID.match(path.name.removesuffix(SUFFIX)):
                continue
            try:
                out.append(self._read(path, entries=False))
            except UnknownGlossary:  # deleted since the listing
                continue
            except StoreFailed as e:
                log.warning("%s", e)
        return sorted(out, key=lambda g: (g.creation_time, g.glossary_id))

    def _read(self, path: Path, entries: bool) -> Glossary:
        try:
            with open(path, encoding="utf-8", newline="\n") as f:
                glossary = Glossary(**json.loads(f.readline()))
                if entries:
                    glossary = replace(glossary, entries=tuple(tuple(line[:-1].split("\t")) for line in f))
        except FileNotFoundError:
            raise UnknownGlossary(f"there is no glossary {path.name.removesuffix(SUFFIX)}") from None
        except (OSError, ValueError, TypeError) as e:
            raise StoreFailed(f"the glossary file {path} cannot be read: {e}") from e
        return glossary

    def _delete(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            raise UnknownGlossary(f"there is no glossary {path.name.removesuffix(SUFFIX)}") from None
        except OSError as e:
            raise StoreFailed(f"the glossary could not be deleted from {self.directory}: {e.strerror or e}") from e
        self._sync()

    def _sync(self) -> None:
        sync_directory(self.directory)

    def _sweep(self) -> None:
        """Remove the temporary files that writes cut short by a crash left, once they are STALE_S old."""
        for path in self.directory.glob(".*.tmp"):
            try:
                if time.time() - path.stat().st_mtime > STALE_S:
                    path.unlink()
            except OSError:
                continue
