"""User text written into files a spreadsheet opens (CSV, XLSX) stays text, never a formula.

A workload or period named `=HYPERLINK("http://evil.example/","click")` must not become a live cell. CSV: a cell
that starts with = + - @ (or a tab / carriage return) gets a leading apostrophe, as OWASP's CSV-injection guidance
recommends; XLSX: every string cell is typed as a string (openpyxl would otherwise store "=..." as a formula).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A string that a spreadsheet would run as a formula, made inert with a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every text cell (and column name) of a table, made inert for spreadsheets; numbers untouched."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object:
            out[column] = out[column].map(csv_safe)
    out.columns = [csv_safe(str(c)) for c in out.columns]
    return out


def text_cells(workbook) -> None:
    """Type every string cell of every sheet as a string (openpyxl infers a formula from a leading '=')."""
    for sheet in workbook.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                if isinstance(cell.value, str):
                    cell.data_type = "s"
