"""Excel workbooks (XLSX) through openpyxl, which parses them through defusedxml (refused otherwise).

Translated: the text cells of every worksheet, those whose value is a string with a letter in it; a rich-text
cell as one unit of its runs (app/files/runs.py; a run's format is its font, a plain run none). Not translated:
formulas, numbers, dates, booleans, errors, sheet names, comments, headers and footers, charts. Equal texts are one
unit (a workbook's shared strings are mostly repeated labels), translated once and written into each cell.

Cells are read from the sheets' stored cells, not by rows: iterating rows would create every empty cell of a
sheet's rectangle, which a file may make as large as Excel's. Written back, only a cell whose unit was translated
into something else changes: a plain cell gets the translated text (a string, even if it begins with "="), a
rich-text cell the runs of its translation, each with the font of the first run of that format. The workbook is
saved by openpyxl, so what openpyxl does not keep (shapes, some drawings, a formula's cached result: Excel and
LibreOffice compute it again on opening, a reader of the file alone such as pandas finds the cell empty) is lost as
in any openpyxl round trip.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import openpyxl
from openpyxl.cell.rich_text import CellRichText, TextBlock

from app.files import FileError, FileLimits, Unit, one_each, said, zipped
from app.files.runs import Runs, encode
from app.segment import worded


@dataclass
class ExcelFile:
    data: bytes
    limits: FileLimits
    workbook: object  # openpyxl.Workbook
    cells: list  # (cell, its unit's number, its runs)
    units: list[Unit] = field(default_factory=list)
    written: bool = False

    def write(self, translations: list[str]) -> bytes:
        one_each(self.units, translations)
        if self.written:  # the first write changed this workbook's cells: write a fresh one
            return read(self.data, self.limits).write(translations)
        self.written = True
        for cell, i, runs in self.cells:
            if translations[i] != self.units[i].text:
                _put(cell, runs, translations[i])
        out = io.BytesIO()
        self.workbook.save(out)
        return out.getvalue()


def read(data: bytes, limits: FileLimits) -> ExcelFile:
    if not openpyxl.DEFUSEDXML:
        raise FileError("XLSX files are refused here: this server's openpyxl does not parse through defusedxml")
    zipped.read(data, limits, "XLSX").office_main()
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), rich_text=True)
    except Exception as e:  # noqa: BLE001 - openpyxl's and defusedxml's own, on a file that is no workbook
        raise FileError(f"the XLSX file cannot be read as an Excel workbook: {said(e)}") from None
    units: list[Unit] = []
    numbers: dict[Unit, int] = {}
    cells = []
    for sheet in workbook.worksheets:
        for cell in sheet._cells.values():  # the stored cells only (see the module's docstring)
            runs = _runs(cell)
            if runs is not None and worded(runs.unit.text):
                if runs.unit not in numbers:
                    numbers[runs.unit] = len(units)
                    units.append(runs.unit)
                cells.append((cell, numbers[runs.unit], runs))
    return ExcelFile(data, limits, workbook, cells, units)


def _runs(cell) -> Runs | None:
    """A text cell's runs: (text, font), a plain string's font None."""
    if cell.data_type != "s":
        return None
    if isinstance(cell.value, CellRichText):
        return encode([(b, None) if isinstance(b, str) else (b.text, b.font) for b in cell.value])
    if isinstance(cell.value, str):
        return encode([(cell.value, None)])
    return None


def _put(cell, runs: Runs, translation: str) -> None:
    pieces = runs.decode(translation)
    if isinstance(cell.value, CellRichText):
        cell.value = CellRichText([t if font is None else TextBlock(font, t) for t, font in pieces])
    else:
        cell.value = "".join(t for t, _ in pieces)
    cell.data_type = "s"  # text that begins with "=" stays text
