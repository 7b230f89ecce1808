"""Tables as a reader sees them: human headers with units, numbers with thousands separators, blanks for missing.

One formatted frame feeds the Markdown and the HTML alike, so both show "270,000.00" under "Unit price (USD)",
never `270000.0` under `unit_price_usd` nor a literal `<NA>`. CSV and XLSX keep the raw columns and numbers
(machine-readable; spreadsheets format their own cells).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.metrics import LATENCY_METRICS
from planner.perf.serving import engine_named

if TYPE_CHECKING:
    import pandas as pd

# columns whose plain title-casing would read wrong
HEADERS = {
    "item": "Item",
    "description": "Description",
    "site": "Site",
    "period": "Period",
    "count": "Count",
    "unit": "Unit",
    "name": "Assumption",
    "value": "Value",
    "source": "Source",
    "gpu": "GPU",
    "gpus": "GPUs",
    "how": "How paid",
    "runs": "Runs",
    "hours_per_year": "Hours/year",
    "rack_units": "Rack units",
}
UNIT_SUFFIXES = (("_usd_per_year", "USD/year"), ("_usd_per_hour", "USD/hour"), ("_usd", "USD"), ("_kw", "kW"),
                 ("_ms", "ms"), ("_gb", "GB"), ("_rps", "requests/s"))  # fmt: skip
DECIMALS = {"kW": 1, "USD": 2, "USD/year": 2, "USD/hour": 2, "ms": 1}


def human_header(column: str) -> str:
    """'unit_price_usd' -> 'Unit price (USD)'; 'power_kw' -> 'Power (kW)'; 'gpu' -> 'GPU'. Headers without an
    underscore are kept: written for people already, or a name from the scenario (a workload, a period)."""
    if column in HEADERS:
        return HEADERS[column]
    if "_" not in column or " " in column:  # written for people already, or a name from the scenario
        return column
    for suffix, unit in UNIT_SUFFIXES:
        if column.endswith(suffix):
            words = column.removesuffix(suffix).replace("_", " ")
            return f"{words[:1].upper()}{words[1:]} ({unit})"
    words = column.replace("_", " ")
    return words[:1].upper() + words[1:]


def _unit(column: str) -> str | None:
    for suffix, unit in UNIT_SUFFIXES:
        if column.endswith(suffix):
            return unit
    return None


def format_cell(value, column: str = "") -> str:
    """A number with thousands separators (2 decimals for USD, 1 for kW and ms; integers whole), '' for missing."""
    import pandas as pd  # slow to import: only where a table is formatted (a plan's text needs none)

    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        unit = _unit(column)
        if unit is not None:
            return f"{value:,.{DECIMALS.get(unit, 2)}f}"
        # no unit in the name (an assumption's value): as written, 5 -> "5", 0.0806 -> "0.0806", 3650 -> "3,650"
        if value.is_integer():
            return f"{value:,.0f}"
        return f"{value:,.2f}" if abs(value) >= 1000 else f"{value:.6g}"  # never scientific notation
    return str(value)


def format_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every cell as display text, every header for people: what both report.md and report.html show."""
    import pandas as pd

    return pd.DataFrame({
        human_header(str(column)): [format_cell(v, str(column)) for v in frame[column].tolist()] for column in frame.columns
    })  # fmt: skip


def numeric_columns(frame: pd.DataFrame) -> list[bool]:
    """Which columns of a raw frame hold numbers (right-aligned in HTML)."""
    import pandas as pd

    return [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) for c in frame.columns]


# the two capex figures, one name each in every output (planner.plan.Totals; the BOM's totals)
SERVERS_CAPEX = "servers capex"
CAPEX_INCL_SITE = "capex incl. site"


def capex_text(totals) -> str:
    """'servers capex 3,910,000 USD, capex incl. site 4,193,600 USD' (a plan's Totals)."""
    return f"{SERVERS_CAPEX} {totals.servers_capex_usd:,.0f} USD, {CAPEX_INCL_SITE} {totals.capex_incl_site_usd:,.0f} USD"


def workload_configurations(workload) -> list[tuple[str, object]]:
    """The configurations serving a workload, each once with the systems it runs on (one engine at the same
    latencies, bought and rented, is one row): ('TP4 fp8 on dgx-b200, lambda-gpu-8x-b200-sxm6', its assignment);
    the engine named where the workload runs on several."""
    groups: dict[tuple, tuple[list[str], object]] = {}
    for a in workload.assignments:
        key = (a.stage, a.layout or a.tp, a.precision, a.max_batch, a.engine, a.engine_version, a.bucket_isl,
               a.bucket_osl, *(getattr(a, m) for m in LATENCY_METRICS))  # fmt: skip
        systems, _ = groups.setdefault(key, ([], a))
        if a.system not in systems:
            systems.append(a.system)
    engines = {(a.engine, a.engine_version) for _, a in groups.values()}
    out = []
    for systems, a in groups.values():
        stage = "" if a.stage == "aggregated" else f"{a.stage} pool "
        layout = a.layout or (f"TP{a.tp}" if a.tp else "TP not stated")
        engine = f" {engine_named(a.engine, a.engine_version)}" if len(engines) > 1 else ""
        out.append((f"{stage}{layout} {a.precision or 'precision not stated'}{engine} on {', '.join(systems)}", a))
    return out
