"""Request traces (CSV or JSONL): one request per line with an arrival time, input tokens and output tokens.

`load_trace` reads a file into a `Trace` (arrays sorted by arrival). Column names are found among common
spellings (the Azure LLM inference trace's `TIMESTAMP, ContextTokens, GeneratedTokens`, OpenAI-style
`usage.prompt_tokens`, ...) unless given. Timestamps are datetimes or numbers (in `time_unit`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from planner.errors import PlannerInputError
from planner.loading import short_repr

MAX_SPAN_S = 400 * 86400  # a trace longer than about a year is an outlier timestamp or a wrong time unit
TIME_COLUMNS = ("timestamp", "time", "arrival_time", "arrival_s", "arrival", "ts", "created", "start_time", "request_time")
INPUT_COLUMNS = ("input_tokens", "contexttokens", "context_tokens", "prompt_tokens", "isl", "isl_tokens",
                 "input_length", "num_input_tokens", "usage.prompt_tokens", "prompt_len")  # fmt: skip
OUTPUT_COLUMNS = ("output_tokens", "generatedtokens", "generated_tokens", "completion_tokens", "osl", "osl_tokens",
                  "output_length", "num_output_tokens", "usage.completion_tokens", "output_len")  # fmt: skip
TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True, eq=False)
class Trace:
    """Requests sorted by arrival. `arrival_s` is absolute (epoch seconds for datetimes, the file's numbers
    otherwise), so that periods can be aligned to the clock."""

    path: str
    arrival_s: np.ndarray
    isl_tokens: np.ndarray
    osl_tokens: np.ndarray
    columns: tuple[str, str, str]
    clock: str  # 'datetime' (timestamps were dates) or 'numeric'
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def requests(self) -> int:
        return int(self.arrival_s.size)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.requests else 0.0


def _read_table(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson", ".json"):
            records = []
            with open(path, encoding="utf-8-sig") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise PlannerInputError(str(path), f"line {number}", f"not a JSON object: {exc.msg}") from None
                    if not isinstance(records[-1], dict):
                        raise PlannerInputError(str(path), f"line {number}", "expected one JSON object per line")
            return pd.json_normalize(records)
        if suffix in (".csv", ".tsv", ".txt"):
            return pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False,
                               encoding="utf-8-sig")  # a byte-order mark (Excel's CSV) is not part of a column name
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read the trace: {exc}") from None
    raise PlannerInputError(str(path), "", f"unknown trace type '{suffix}'; allowed: .csv, .tsv, .jsonl, .ndjson")


def _find_column(frame: pd.DataFrame, given: str | None, aliases: tuple[str, ...], what: str, path: Path) -> str:
    if given is not None:
        if given not in frame.columns:
            raise PlannerInputError(str(path), given, f"no such column; the trace has: {', '.join(map(str, frame.columns))}")
        return given
    lowered = {str(c).strip().lower(): c for c in frame.columns}
    for alias in aliases:
        if alias in lowered:
            return lowered[alias]
    raise PlannerInputError(
        str(path), what,
        f"no {what} column found; looked for {', '.join(aliases)} (case-insensitive). "
        f"The trace has: {', '.join(map(str, frame.columns))}. Name it with --{what.replace(' ', '-')}-column",
    )  # fmt: skip


def _token_counts(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    raw = frame[column]
    numbers = pd.to_numeric(raw.astype(str).str.replace(",", "", regex=False).str.strip(), errors="coerce")
    bad = numbers.isna() | (numbers < 0) | (numbers != np.floor(numbers))
    if bad.any():
        index = int(np.flatnonzero(bad.to_numpy())[0])
        raise PlannerInputError(
            str(path), f"{column} (request {index + 1})", f"token count must be a whole number >= 0 (got {short_repr(raw.iloc[index])})"
        )
    return numbers.to_numpy(dtype=np.int64)


def _arrivals(frame: pd.DataFrame, column: str, time_unit: str, path: Path) -> tuple[np.ndarray, str]:
    raw = frame[column]
    numbers = pd.to_numeric(raw.astype(str).str.strip(), errors="coerce")
    if numbers.notna().all():
        values = numbers.to_numpy(dtype=float) * TIME_UNITS_S[time_unit]
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise PlannerInputError(str(path), f"{column} (request {bad[0] + 1})", f"not a finite time: {short_repr(raw.iloc[bad[0]])}")
        return values, "numeric"
    stamps = pd.to_datetime(raw.astype(str).str.strip(), errors="coerce", utc=True, format="mixed")
    if stamps.isna().any():
        index = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise PlannerInputError(
            str(path), f"{column} (request {index + 1})",
            f"not a timestamp (a date-time such as 2023-11-16 18:15:46.68, or a number of {time_unit}): {short_repr(raw.iloc[index])}",
        )  # fmt: skip
    epoch = pd.Timestamp("1970-01-01", tz="UTC")
    return ((stamps - epoch) / pd.Timedelta(seconds=1)).to_numpy(dtype=float), "datetime"


def load_trace(
    path: Path | str, time_column: str | None = None, input_column: str | None = None,
    output_column: str | None = None, time_unit: str = "s",
) -> Trace:
    """Read a request trace; any problem raises PlannerInputError naming the file, the column and the request."""
    path = Path(path)
    if not path.is_file():
        raise PlannerInputError(str(path), "", "trace file not found")
    if time_unit not in TIME_UNITS_S:
        raise PlannerInputError("--time-unit", "time_unit", f"unknown unit '{time_unit}'; allowed: {', '.join(TIME_UNITS_S)}")
    frame = _read_table(path)
    if frame.empty:
        raise PlannerInputError(str(path), "", "the trace holds no requests")
    columns = (
        _find_column(frame, time_column, TIME_COLUMNS, "time", path),
        _find_column(frame, input_column, INPUT_COLUMNS, "input", path),
        _find_column(frame, output_column, OUTPUT_COLUMNS, "output", path),
    )
    arrival_s, clock = _arrivals(frame, columns[0], time_unit, path)
    isl = _token_counts(frame, columns[1], path)
    osl = _token_counts(frame, columns[2], path)
    order = np.argsort(arrival_s, kind="stable")
    span = float(arrival_s[order[-1]] - arrival_s[order[0]])
    if span > MAX_SPAN_S:
        raise PlannerInputError(
            str(path), f"{columns[0]} (request {order[-1] + 1})",
            f"the trace spans {span:,.0f} s, more than {MAX_SPAN_S / 86400:,.0f} days: an outlier timestamp "
            f"({arrival_s[order[-1]]:g} s), or the wrong --time-unit?",
        )  # fmt: skip
    notes = []
    if (order != np.arange(order.size)).any():
        notes.append("requests were not in arrival order; sorted")
    return Trace(str(path), arrival_s[order], isl[order], osl[order], columns, clock, tuple(notes))
