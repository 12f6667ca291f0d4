"""The glossary store (app/glossaries.py): glossaries survive a restart and a crash loses none that was acknowledged;
DeepL's TSV and CSV are read as DeepL reads them, and what it refuses is refused with a message that says where."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import glossaries as g
from app.glossaries import GlossaryStore, parse

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def lines(*pairs: tuple[str, str]) -> list[tuple[str, str, str]]:
    return [(f"entry {i}", s, t) for i, (s, t) in enumerate(pairs, 1)]


async def test_a_glossary_is_stored_listed_read_and_deleted_and_a_restarted_store_still_has_it(tmp_path):
    store = GlossaryStore(tmp_path / "new" / "dir")  # made on the first write
    assert await store.list() == []
    bikes = await store.create("bikes", "en", "de", lines(("bike", "Velo"), ("city bike", "Stadtrad"), ("e", "f")))
    dogs = await store.create("dogs", "en", "fr", parse("dog\tchien\n\r\ncat\tchat\r\n", "tsv", "en", "fr"))
    assert (bikes.entry_count, dogs.entry_count) == (3, 2)
    assert bikes.info() == {
        "glossary_id": bikes.glossary_id, "name": "bikes", "ready": True, "source_lang": "en", "target_lang": "de",
        "creation_time": bikes.creation_time, "entry_count": 3,
    }  # fmt: skip
    assert time.strptime(bikes.creation_time, "%Y-%m-%dT%H:%M:%S.%f%z")  # DeepL's clients parse it so

    restarted = GlossaryStore(tmp_path / "new" / "dir")
    assert [x.name for x in await restarted.list()] == ["bikes", "dogs"]  # oldest first, without entries
    assert (await restarted.get(bikes.glossary_id)).entries == (("bike", "Velo"), ("city bike", "Stadtrad"), ("e", "f"))
    assert (await restarted.get(dogs.glossary_id.upper(), entries=False)).entries == ()
    assert (await restarted.get(dogs.glossary_id)).tsv() == "dog\tchien\ncat\tchat"

    await restarted.delete(bikes.glossary_id)
    assert [x.name for x in await store.list()] == ["dogs"]
    for call in (store.get, store.delete):
        with pytest.raises(g.UnknownGlossary, match=f"there is no glossary {bikes.glossary_id}"):
            await call(bikes.glossary_id)
    for bad in ("../../etc/passwd", "x", ""):
        with pytest.raises(g.UnknownGlossary, match="a glossary id is a UUID"):
            await store.get(bad)


async def test_an_acknowledged_glossary_was_synced_to_the_disk_and_renamed_into_place_first(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(a, b):
        events.append(("replace", str(a), str(b)))
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    store = GlossaryStore(tmp_path)
    glossary = await store.create("x", "en", "de", lines(("a", "b")))
    final = str(tmp_path / f"{glossary.glossary_id}.glossary")
    (_, temporary), renamed, synced = events
    assert renamed == ("replace", temporary, final) and Path(temporary).parent == tmp_path
    assert synced == ("fsync", str(tmp_path))  # the rename itself is durable
    events.clear()
    await store.delete(glossary.glossary_id)
    assert events == [("fsync", str(tmp_path))]


CRASH = """
import asyncio, os, sys
from app.glossaries import GlossaryStore
os.replace = lambda *a: os._exit(9)  # the process dies after writing and syncing the file, before it is in place
asyncio.run(GlossaryStore(sys.argv[1]).create("cut short", "en", "de", [("line 1", "a", "b")]))
"""


async def test_a_crash_in_the_middle_of_a_write_loses_nothing_acknowledged_and_its_leftover_is_ignored(tmp_path):
    store = GlossaryStore(tmp_path)
    kept = await store.create("kept", "en", "de", lines(("a", "b")))
    crash = [sys.executable, "-c", CRASH, str(tmp_path)]
    crashed = await asyncio.to_thread(subprocess.run, crash, cwd=ROOT, check=False, timeout=120)
    assert crashed.returncode == 9
    (leftover,) = tmp_path.glob(".*.tmp")
    assert leftover.read_text().endswith("a\tb\n")  # written whole, never acknowledged
    assert [x.glossary_id for x in await GlossaryStore(tmp_path).list()] == [kept.glossary_id]
    with pytest.raises(g.UnknownGlossary):
        await store.get(leftover.name.split(".")[1])
    assert (await store.get(kept.glossary_id)).entries == (("a", "b"),)

    await store.create("after", "en", "de", lines(("c", "d")))
    assert leftover.exists(), "a temporary file may be another server's write in progress"
    old = time.time() - g.STALE_S - 60
    os.utime(leftover, (old, old))
    await store.create("later", "en", "de", lines(("e", "f")))
    assert not leftover.exists()
    assert [x.name for x in await store.list()] == ["kept", "after", "later"]


async def test_a_file_that_is_not_a_glossary_is_skipped_and_a_damaged_one_reported(tmp_path):
    store = GlossaryStore(tmp_path)
    good = await store.create("good", "en", "de", lines(("a", "b")))
    (tmp_path / "notes.glossary").write_text("mine")
    damaged = tmp_path / "0b7e3b1e-0000-4000-8000-000000000000.glossary"
    damaged.write_text("{not json\n")
    assert [x.glossary_id for x in await store.list()] == [good.glossary_id]
    with pytest.raises(g.StoreFailed, match="cannot be read"):
        await store.get(damaged.name.removesuffix(".glossary"))


async def test_a_directory_that_cannot_be_written_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(g.StoreFailed, match=r"could not be stored in .*file/glossaries \(NMT_GLOSSARY_DIR\)"):
        await GlossaryStore(tmp_path / "file" / "glossaries").create("x", "en", "de", lines(("a", "b")))


async def test_the_limits_on_entries_terms_names_and_glossaries(tmp_path, monkeypatch):
    store = GlossaryStore(tmp_path)
    many = lines(*((f"term {i}", f"Begriff {i}") for i in range(g.MAX_ENTRIES + 1)))
    with pytest.raises(g.GlossaryTooLarge, match=f"more than {g.MAX_ENTRIES} entries; the limit is {g.MAX_ENTRIES}"):
        await store.create("x", "en", "de", many)
    assert (await store.create("x", "en", "de", many[:-1])).entry_count == g.MAX_ENTRIES
    long = "é" * 513  # 1026 bytes
    with pytest.raises(g.InvalidGlossary, match="entry 1's target term has 1026 bytes .UTF-8.; the limit is 1024"):
        await store.create("x", "en", "de", lines(("a", long)))
    with pytest.raises(g.InvalidGlossary, match="name has 1026 bytes"):
        await store.create(long, "en", "de", lines(("a", "b")))
    with pytest.raises(g.InvalidGlossary, match="name is empty"):
        await store.create(" ", "en", "de", lines(("a", "b")))
    with pytest.raises(g.InvalidGlossary, match="source_lang 'e n' is not a language code"):
        await store.create("x", "e n", "de", lines(("a", "b")))
    monkeypatch.setattr(g, "MAX_GLOSSARIES", 2)
    await store.create("second", "en", "de", lines(("a", "b")))
    with pytest.raises(g.TooManyGlossaries, match="at most 2 glossaries and has that many; delete one first"):
        await store.create("third", "en", "de", lines(("a", "b")))
    assert len(await store.list()) == 2


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([("a", "b"), ("a ", "c")], "entry 2 repeats the source term 'a' of entry 1; each source term may have one"),
        ([("a", " ")], "entry 1 has an empty target term; every entry needs both terms"),
        ([("a\u2028b", "c")], "entry 1's source term 'a.*b' holds the control character U\\+2028"),
        ([("a", "b\x85c")], "holds the control character U\\+0085"),
        ([], "the glossary has no entries"),
    ],
)
def test_entries_are_checked_as_deepl_checks_them(entries, message):
    with pytest.raises(g.InvalidGlossary, match=message):
        g.checked(lines(*entries))


def test_tsv_and_csv_as_deepl_reads_them():
    assert parse("\ufeffa\tb\n\n  \nc d\t e f \r\n", "tsv", "en", "de") == [
        ("line 1", "a", "b"),
        ("line 4", "c d", " e f "),
    ]
    csv = 'a,b\r\n"x, y","the ""z"""\nc,d,EN,de\n\n'
    assert [(s, t) for _, s, t in parse(csv, "csv", "en", "de")] == [("a", "b"), ("x, y", 'the "z"'), ("c", "d")]
    assert g.checked(parse("c d\t e f ", "tsv", "en", "de")) == (("c d", "e f"),)


@pytest.mark.parametrize(
    ("text", "format", "message"),
    [
        ("a\tb\nc d\n", "tsv", "line 2 has no tab between its source and target terms; TSV entries are one"),
        ("a\tb\tc\n", "tsv", "line 1 has 2 tabs"),
        ("a,b,c\n", "csv", "line 1 has 3 fields; CSV entries are `source,target` or `source,target,source language"),
        ("a,b\nc,d,en,fr\n", "csv", "line 2 names the languages 'en', 'fr'; this glossary's are 'en', 'de'"),
        ('a,"b\n', "csv", "the CSV cannot be read at line 1: unexpected end of data"),
    ],
)
def test_bad_tsv_and_csv_say_which_line_is_wrong_and_how(text, format, message):
    with pytest.raises(g.InvalidGlossary, match=message):
        parse(text, format, "en", "de")


async def test_the_file_is_a_line_of_json_then_a_line_an_entry(tmp_path):
    glossary = await GlossaryStore(tmp_path).create("x", "en", "de", lines(("a b", "c"), ("d", "e")))
    header, *entries = (tmp_path / f"{glossary.glossary_id}.glossary").read_text().split("\n")
    assert json.loads(header) == glossary.header() and entries == ["a b\tc", "d\te", ""]


def test_merged_terms_keep_the_first_target_of_a_source_term():
    assert g.terms([("Bike", "Rad")], [("Bike", "Velo"), ("bike", "Velo")]) == (("Bike", "Rad"), ("bike", "Velo"))
    assert g.terms([("Bike", "Rad")], [("bike", "Velo")], ignore_case=True) == (("Bike", "Rad"),)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [("en", "EN", True), ("en-GB", "en", True), ("eng", "en", True), ("pt_BR", "PT", True), ("de", "en", False)],
)
def test_language_codes_compare_by_language(a, b, same):
    assert g.same(a, b) is same
