"""User text written into files a spreadsheet opens (CSV, XLSX) stays text, never a formula.

A workload or period named `=HYPERLINK("http://evil.example/","click")` must not become a live cell. CSV: a cell
that starts with = + - @ (or a tab / carriage return) gets a leading apostrophe, as OWASP's CSV-injection guidance
recommends, and a carriage return inside a cell becomes a newline (quoted; a bare CR would start a new row);
XLSX: every string cell is typed as a string (openpyxl would otherwise store "=..." as a formula).

Every CSV the planner writes from user or catalog text (BOM, sensitivity grid, sweep table, benchmark tables of
`ingest` and `tables build`) goes through `csv_safe_frame`, which escapes every cell of every column that is not
numeric, whatever its dtype: object, pandas 3's `str` (StringDtype), category.
"""

from __future__ import annotations

import numbers
from typing import Any

import pandas as pd
from pandas.api import types as pd_types

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A string that a spreadsheet would run as a formula, made inert with a leading apostrophe."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def _csv_safe_cell(value: Any) -> Any:
    """A cell of a text column as CSV writes it: numbers and missing values as they are, anything else as its
    text, made inert (an object whose text starts with '=' is as live as the string). A carriage return becomes
    a newline: Python's csv writer leaves a field holding a bare CR unquoted, which a spreadsheet reads as a
    line break, so that `x\r=HYPERLINK(...)` would start a cell of a new row; a newline gets the field quoted."""
    if value is None or isinstance(value, numbers.Number):
        return value
    if not isinstance(value, str) and pd.api.types.is_scalar(value) and pd.isna(value):
        return value
    text = csv_safe(value if isinstance(value, str) else str(value))
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _is_text_column(series: pd.Series) -> bool:
    """Any column whose cells may be text: not numbers, booleans, dates or durations."""
    dtype = series.dtype
    return not (pd_types.is_numeric_dtype(dtype) or pd_types.is_bool_dtype(dtype)
                or pd_types.is_datetime64_any_dtype(dtype) or pd_types.is_timedelta64_dtype(dtype))  # fmt: skip


def csv_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every text cell (and column name) of a table, made inert for spreadsheets; numbers untouched."""
    out = frame.copy()
    for position in range(frame.shape[1]):  # by position: a frame may repeat a column name
        series = frame.iloc[:, position]
        if _is_text_column(series):
            # a list, not Series.map: map infers float64 from whole numbers mixed with fractions (a count of 2 as 2.0)
            out.isetitem(position, pd.Series([_csv_safe_cell(v) for v in series], index=series.index, dtype=object))
    out.columns = [csv_safe(str(c)) for c in out.columns]
    return out


def text_cells(workbook) -> None:
    """Type every string cell of every sheet as a string (openpyxl infers a formula from a leading '=')."""
    for sheet in workbook.worksheets:
        for row in sheet.iter_rows():
            for cell in row:
                if isinstance(cell.value, str):
                    cell.data_type = "s"
