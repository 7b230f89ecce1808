"""Request traces (CSV or JSONL): one request per line with an arrival time, input tokens and output tokens.

`load_trace` reads a file into a `Trace` (arrays sorted by arrival). Column names are found among common
spellings (the Azure LLM inference trace's `TIMESTAMP, ContextTokens, GeneratedTokens`, OpenAI-style
`usage.prompt_tokens`, ...) unless given. Timestamps are datetimes or numbers (in `time_unit`).

A trace is read from a regular file of at most `planner.loading.MAX_TRACE_BYTES` (CSV; `MAX_TRACE_JSONL_BYTES` for
JSONL), numeric columns parsed as numbers by the CSV reader (a fraction of the memory of text), each JSONL line nested
at most `MAX_JSON_DEPTH` deep; a token count is a whole number of at most `MAX_TOKENS_PER_REQUEST` (never wrapped
to a small one); a trace has at least two distinct arrival times (one instant has no rate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from planner.errors import PlannerInputError
from planner.loading import MAX_TRACE_BYTES, MAX_TRACE_JSONL_BYTES, open_bounded, parse_json, short_repr

MAX_TOKENS_PER_REQUEST = 10_000_000  # ten times the longest context of any model today; scenarios allow 1e8
HASH_COLUMNS = ("hash_ids", "block_hashes", "prefix_hashes")  # a list of the prompt's block hashes per request
MAX_SPAN_S = 400 * 86400  # a trace longer than about a year is an outlier timestamp or a wrong time unit
TIME_COLUMNS = ("timestamp", "time", "arrival_time", "arrival_s", "arrival", "ts", "created", "start_time", "request_time")
INPUT_COLUMNS = ("input_tokens", "contexttokens", "context_tokens", "prompt_tokens", "isl", "isl_tokens",
                 "input_length", "num_input_tokens", "usage.prompt_tokens", "prompt_len")  # fmt: skip
OUTPUT_COLUMNS = ("output_tokens", "generatedtokens", "generated_tokens", "completion_tokens", "osl", "osl_tokens",
                  "output_length", "num_output_tokens", "usage.completion_tokens", "output_len")  # fmt: skip
TIME_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
TIME_UNIT_CHOICES = ("auto", *TIME_UNITS_S)
# what a request trace read in the right unit looks like: a minute to 400 days of traffic at 0.01 to 1e5 requests/s
PLAUSIBLE_SPAN_S = (60.0, MAX_SPAN_S)
PLAUSIBLE_RATE_RPS = (0.01, 1e5)


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
    # prompt tokens each request finds in a prefix cache, from the trace's block hashes (`prefix_hits`); None: the
    # trace names no prompt blocks
    cached_tokens: np.ndarray | None = None

    @property
    def requests(self) -> int:
        return int(self.arrival_s.size)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.requests else 0.0


TRACE_WHAT = "a request trace (CSV, TSV or JSONL)"


def _read_table(path: Path) -> pd.DataFrame:
    """The trace as a table (CSV: numbers where a whole column is numeric, else text; JSONL: JSON values), read through
    `open_bounded`: a regular file within its bound, a byte-order mark (Excel's CSV) not part of a column's name."""
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".txt"):
        raise PlannerInputError(str(path), "", f"unknown trace type '{suffix}'; allowed: .csv, .tsv, .jsonl, .ndjson")
    table = suffix in (".csv", ".tsv", ".txt")
    try:
        with open_bounded(path, TRACE_WHAT, MAX_TRACE_BYTES if table else MAX_TRACE_JSONL_BYTES) as handle:
            if table:
                return pd.read_csv(handle, sep="\t" if suffix == ".tsv" else ",", keep_default_na=False)
            records = []
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    records.append(parse_json(line, str(path), f"line {number}"))
                except ValueError as exc:  # json.JSONDecodeError
                    raise PlannerInputError(str(path), f"line {number}", f"not a JSON object: {getattr(exc, 'msg', exc)}") from None
                if not isinstance(records[-1], dict):
                    raise PlannerInputError(str(path), f"line {number}", "expected one JSON object per line")
            return pd.json_normalize(records)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise PlannerInputError(str(path), "", f"cannot read the trace: {short_repr(str(exc))}") from None


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


def _numbers(raw: pd.Series, thousands: bool = False) -> pd.Series:
    """A column as floats (NaN where a cell is no number): as read when the reader parsed it as numbers, else from its
    text (stripped; `thousands`: '1,234' is 1234). True/False are not numbers."""
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        return raw.astype(float)
    text = raw.astype(str)
    if thousands:
        text = text.str.replace(",", "", regex=False)
    return pd.to_numeric(text.str.strip(), errors="coerce").astype(float)


def _token_counts(frame: pd.DataFrame, column: str, path: Path) -> np.ndarray:
    """A column of token counts: whole numbers in [0, MAX_TOKENS_PER_REQUEST], checked as floats before the int64
    conversion (1e20 would wrap to a small or negative count)."""
    raw = frame[column]
    numbers = _numbers(raw, thousands=True)
    bad = numbers.isna() | (numbers < 0) | (numbers != np.floor(numbers)) | (numbers > MAX_TOKENS_PER_REQUEST)
    if bad.any():
        index = int(np.flatnonzero(bad.to_numpy())[0])
        raise PlannerInputError(
            str(path), f"{column} (request {index + 1})",
            f"token count must be a whole number >= 0 and <= {MAX_TOKENS_PER_REQUEST:,} (got {short_repr(raw.iloc[index])})",
        )  # fmt: skip
    return numbers.to_numpy(dtype=np.int64)


def _reading(values: np.ndarray, unit: str) -> tuple[float, float]:
    """(span s, mean requests/s) of numeric timestamps read in `unit`."""
    span = float(values.max() - values.min()) * TIME_UNITS_S[unit]
    return span, (values.size - 1) / span if span > 0 else float("inf")


def _plausible(span_s: float, rate_rps: float) -> bool:
    return PLAUSIBLE_SPAN_S[0] <= span_s <= PLAUSIBLE_SPAN_S[1] and PLAUSIBLE_RATE_RPS[0] <= rate_rps <= PLAUSIBLE_RATE_RPS[1]


def _numeric_unit(values: np.ndarray, column: str, path: Path) -> str:
    """`--time-unit auto`: seconds when the trace read in seconds looks like traffic (a minute to 400 days at 0.01
    to 1e5 requests/s). When it does not but another unit does, no guess: the error gives both readings and asks
    for --time-unit (Mooncake's trace, in milliseconds, read as seconds spans 11.8 days at 0.0039 requests/s).
    When no unit does, seconds, and the span check says what is wrong (an outlier timestamp)."""
    span, rate = _reading(values, "s")
    if values.size < 3 or _plausible(span, rate):
        return "s"
    others = [(unit, *_reading(values, unit)) for unit in TIME_UNITS_S if unit != "s"]
    plausible = [(unit, unit_span, unit_rate) for unit, unit_span, unit_rate in others if _plausible(unit_span, unit_rate)]
    if not plausible:
        return "s"
    readings = "; ".join(f"in {unit} {_span_words(unit_span)} at {unit_rate:.3g} requests/s" for unit, unit_span, unit_rate in plausible)
    raise PlannerInputError(
        str(path), column,
        f"unit of the numeric timestamps not clear: read as seconds the trace spans {_span_words(span)} at {rate:.3g} "
        f"requests/s, not like traffic; {readings}. Give --time-unit s|ms|us|ns",
    )  # fmt: skip


def _span_words(span_s: float) -> str:
    if span_s >= 2 * 86400:
        return f"{span_s / 86400:,.1f} days"
    if span_s >= 2 * 3600:
        return f"{span_s / 3600:,.1f} h"
    if span_s >= 120:
        return f"{span_s / 60:,.1f} min"
    return f"{span_s:.3g} s"


def _arrivals(frame: pd.DataFrame, column: str, time_unit: str, path: Path) -> tuple[np.ndarray, str, str]:
    """(arrival seconds, clock, unit used)."""
    raw = frame[column]
    numbers = _numbers(raw)
    if numbers.notna().all():
        values = numbers.to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise PlannerInputError(str(path), f"{column} (request {bad[0] + 1})", f"not a finite time: {short_repr(raw.iloc[bad[0]])}")
        unit = _numeric_unit(values, column, path) if time_unit == "auto" else time_unit
        return values * TIME_UNITS_S[unit], "numeric", unit
    stamps = pd.to_datetime(raw.astype(str).str.strip(), errors="coerce", utc=True, format="mixed")
    if stamps.isna().any():
        index = int(np.flatnonzero(stamps.isna().to_numpy())[0])
        raise PlannerInputError(
            str(path), f"{column} (request {index + 1})",
            f"not a timestamp (a date-time such as 2023-11-16 18:15:46.68, or a number): {short_repr(raw.iloc[index])}",
        )  # fmt: skip
    epoch = pd.Timestamp("1970-01-01", tz="UTC")
    return ((stamps - epoch) / pd.Timedelta(seconds=1)).to_numpy(dtype=float), "datetime", "datetime"


def load_trace(
    path: Path | str, time_column: str | None = None, input_column: str | None = None,
    output_column: str | None = None, time_unit: str = "auto",
) -> Trace:
    """Read a request trace; any problem raises PlannerInputError naming the file, the column and the request.
    Numeric timestamps are in `time_unit`; 'auto' takes seconds where that reads as traffic and refuses to guess
    otherwise (`_numeric_unit`)."""
    path = Path(path)
    if time_unit not in TIME_UNIT_CHOICES:
        raise PlannerInputError("--time-unit", "time_unit", f"unknown unit '{time_unit}'; allowed: {', '.join(TIME_UNIT_CHOICES)}")
    frame = _read_table(path)
    if frame.empty:
        raise PlannerInputError(str(path), "", "the trace holds no requests")
    columns = (
        _find_column(frame, time_column, TIME_COLUMNS, "time", path),
        _find_column(frame, input_column, INPUT_COLUMNS, "input", path),
        _find_column(frame, output_column, OUTPUT_COLUMNS, "output", path),
    )
    arrival_s, clock, unit = _arrivals(frame, columns[0], time_unit, path)
    isl = _token_counts(frame, columns[1], path)
    osl = _token_counts(frame, columns[2], path)
    order = np.argsort(arrival_s, kind="stable")
    span = float(arrival_s[order[-1]] - arrival_s[order[0]])
    if not span > 0:
        raise PlannerInputError(
            str(path), columns[0],
            ("only one request" if arrival_s.size == 1 else f"all {arrival_s.size:,} requests arrive at one instant")
            + ": a trace needs at least two distinct arrival times (one instant has no rate to replay or to size for)",
        )  # fmt: skip
    if span > MAX_SPAN_S:
        raise PlannerInputError(
            str(path), f"{columns[0]} (request {order[-1] + 1})",
            f"the trace spans {span:,.0f} s, more than {MAX_SPAN_S / 86400:,.0f} days: an outlier timestamp "
            f"({arrival_s[order[-1]]:g} s), or the wrong --time-unit?",
        )  # fmt: skip
    notes = []
    if clock == "numeric":
        notes.append(f"numeric timestamps read in {unit}" + (" (--time-unit auto; give --time-unit if they are not)" if time_unit == "auto" else ""))
    if (order != np.arange(order.size)).any():
        notes.append("requests were not in arrival order; sorted")
    cached = None
    hash_column = next((c for c in frame.columns if str(c).strip().lower() in HASH_COLUMNS), None)
    if hash_column is not None:
        cached, note = prefix_hits([frame[hash_column].iloc[i] for i in order], isl[order], path, hash_column)
        notes.append(note)
    return Trace(str(path), arrival_s[order], isl[order], osl[order], columns, clock, tuple(notes), cached)


def prefix_hits(hashes: list, isl: np.ndarray, path: Path, column: str) -> tuple[np.ndarray, str]:
    """Prompt tokens each request (in arrival order) finds cached: the leading blocks of its prompt whose hashes an
    earlier request already had (a block's hash stands for its whole prefix, as Mooncake's traces and vLLM's block
    hashes chain them), x the tokens per block (the largest ISL / blocks, rounded up), at most ISL - 1. The cache
    is taken as unbounded (nothing evicted): the hits are an upper bound, said in the note."""
    counts = np.array([len(h) if isinstance(h, (list, tuple)) else -1 for h in hashes])
    if (counts < 0).any():
        index = int(np.flatnonzero(counts < 0)[0])
        raise PlannerInputError(str(path), f"{column} (request {index + 1})", "expected a list of block hashes")
    with_blocks = counts > 0
    # a prompt of n blocks of B tokens has ISL <= n B: B is at least ISL / n for every request (the 99th
    # percentile of those bounds, so that one damaged row does not set it)
    block = int(np.percentile(np.ceil(isl[with_blocks] / counts[with_blocks]), 99)) if with_blocks.any() else 0
    seen: set = set()
    cached = np.zeros(len(hashes), dtype=np.int64)
    for i, blocks in enumerate(hashes):
        matched = 0
        for value in blocks:
            if value not in seen:
                break
            matched += 1
        cached[i] = min(matched * block, max(int(isl[i]) - 1, 0))
        seen.update(blocks)
    hits = cached > 0
    note = (f"prefix cache from {column}: {hits.mean():.0%} of requests find part of their prompt cached "
            f"({block}-token blocks, an unbounded cache: an upper bound)")  # fmt: skip
    return cached, note
