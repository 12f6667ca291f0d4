"""Excel workbooks: text cells translated (rich text with its fonts around the words aligned to theirs); formulas,
numbers, dates, booleans and sheet names as they were."""

from __future__ import annotations

import io

import openpyxl
import pytest
from openpyxl.cell.rich_text import CellRichText, TextBlock

from app.files import FORMATS, FileError, FileLimits
from tests.files import office
from tests.files.conftest import identity, translated

pytestmark = pytest.mark.anyio
_STAMPED = {"docProps/core.xml"}  # openpyxl writes the time it saved


def cells(data: bytes) -> dict:
    """Every stored cell of every sheet: its value (rich text as its blocks), type, font and number format."""
    workbook = openpyxl.load_workbook(io.BytesIO(data), rich_text=True)
    return {
        (sheet.title, c.coordinate): (_plain(c.value), c.data_type, c.font.b, c.font.color, c.number_format)
        for sheet in workbook.worksheets
        for c in sheet._cells.values()
    }


def _plain(value):
    if isinstance(value, CellRichText):
        return [(b.text, b.font.b, b.font.i) if isinstance(b, TextBlock) else b for b in value]
    return value


def round_trip(data: bytes) -> dict[str, bytes]:
    out = io.BytesIO()
    openpyxl.load_workbook(io.BytesIO(data), rich_text=True).save(out)
    return {n: b for n, b in office.members(out.getvalue()).items() if n not in _STAMPED}


@pytest.fixture(scope="module")
async def german(bundled) -> bytes:
    """The sample workbook translated by the bundled model."""
    return await translated("xlsx", office.xlsx_sample(), bundled)


async def test_identity_gives_the_workbook_back_as_openpyxl_writes_it():
    data = office.xlsx_sample()
    out = await translated("xlsx", data, identity)
    assert cells(out) == cells(data)
    assert {n: b for n, b in office.members(out).items() if n not in _STAMPED} == round_trip(data)


async def test_text_cells_are_translated_and_nothing_else(german):
    before, after = cells(office.xlsx_sample()), cells(german)
    assert before.keys() == after.keys()
    changed = {k for k in before if before[k][0] != after[k][0]}
    assert changed == {("Animals", c) for c in ("A1", "A2", "B3", "B4", "C1", "D1")} | {("The boy", "A1")}
    assert all(before[k][1:] == after[k][1:] for k in before)  # types, fonts and formats
    assert after["Animals", "A3"][0] == "=LEN(A1)" and after["The boy", "A2"][0] == "=Animals!A4*2"
    assert [after["Animals", c][0] for c in ("A4", "A5", "B2", "B5")] == [42, 3.5, True, "2024-01-01"]
    texts = [str(v[0]) for v in after.values()]
    assert not office.words(texts) & office.ENGLISH
    assert {"hund", "schnee", "mädchen", "männer", "bank", "frau", "buch", "junge"} <= office.words(texts)
    assert openpyxl.load_workbook(io.BytesIO(german)).sheetnames == ["Animals", "The boy"]


async def test_rich_text_comes_back_with_its_fonts_around_the_words_aligned_to_theirs(german):
    after = cells(german)
    assert after["Animals", "A2"][0] == ["Ein ", ("Hund", True, False), " rennt im Schnee."]
    assert after["Animals", "C1"][0] == [("Zwei Männer", False, True), " sitzen auf einer Bank."]
    assert after["Animals", "B3"][0] == after["Animals", "B4"][0] == "Ein Mädchen springt."


def test_equal_texts_are_one_unit_and_a_sheets_far_corner_costs_nothing():
    units = [u.text for u in FORMATS["xlsx"].read(office.xlsx_sample(), FileLimits()).units]
    assert units.count("A girl is jumping.") == 1 and len(units) == 6
    wb = openpyxl.Workbook()
    wb.active["A1"], wb.active["XFD1048576"] = "A dog.", "A cat."  # a rectangle of 17 billion cells, two stored
    out = io.BytesIO()
    wb.save(out)
    assert [u.text for u in FORMATS["xlsx"].read(out.getvalue(), FileLimits()).units] == ["A dog.", "A cat."]


async def test_a_translation_that_looks_like_a_formula_stays_text():
    extracted = FORMATS["xlsx"].read(office.xlsx_sample(), FileLimits())

    async def formulas(units):
        return ["=1+1" for _ in units]

    out = cells(extracted.write(await formulas(extracted.units)))
    assert out["Animals", "A1"][:2] == ("=1+1", "s") and out["Animals", "A2"][:2] == ("=1+1", "s")


def test_without_defusedxml_workbooks_are_refused(monkeypatch):
    monkeypatch.setattr(openpyxl, "DEFUSEDXML", False)
    with pytest.raises(FileError, match="does not parse through defusedxml"):
        FORMATS["xlsx"].read(office.xlsx_sample(), FileLimits())
