"""Benchmark results users bring (genai-perf / AIPerf, `vllm bench serve`, GuideLLM) as catalog benchmark rows.

Each tool module turns one result file into `Run`s (what the tool measured, in the tool's words); `ingest`
adds what no file records (catalog model, GPU, TP, precision, whole node or one instance) and makes rows of
`catalogs/benchmarks/*.csv` with the source named: tool, version when the file has it, file name.
The formats were read from the tools' own exporters: `tests/fixtures/ingest/<tool>/FORMAT.md`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import BenchmarkRow, Catalog, benchmark_csv_text
from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import short_repr, validate_model

TOOLS = ("genai-perf", "vllm", "guidellm")
STATISTICS = ("mean", "median", "p90", "p95", "p99")


@dataclass(frozen=True)
class Run:
    """One benchmark run (one concurrency or rate) as the tool reported it. Latencies in ms at `statistic`."""

    tool: str
    tool_version: str | None
    file: str
    model_name: str | None  # the served model's name as the file gives it
    concurrency: int | None
    request_rate: float | None  # requests/s the client offered; None = as fast as possible
    isl: float
    osl: float
    ttft_ms: float | None
    itl_ms: float | None
    request_throughput_rps: float
    output_tokens_per_s: float | None
    statistic: str
    run_kind: str = "online"
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class IngestOptions:
    """What no benchmark file records: the catalog ids, the engine, and whether a whole node was measured."""

    model: str
    gpu: str | None = None
    tp: int = 1
    precision: str = "bf16"
    node: str | None = None  # a catalog system: the benchmark loaded a whole node of it
    statistic: str = "median"
    isl: int | None = None  # override the lengths read from the files
    osl: int | None = None
    concurrency: int | None = None  # for a single run whose file does not record it (a genai-perf CSV)


@dataclass(frozen=True)
class IngestResult:
    rows: tuple[BenchmarkRow, ...]
    runs: tuple[Run, ...]
    notes: tuple[str, ...]

    def csv_text(self) -> str:
        return benchmark_csv_text(self.rows)


def require(mapping: dict, key: str, file: str, what: str, where: str = ""):
    """mapping[key], or an input error naming the missing key and what the file was taken for."""
    if not isinstance(mapping, dict) or key not in mapping or mapping[key] is None:
        raise PlannerInputError(file, f"{where}{key}", f"missing key '{key}': not a {what} (or an incomplete one)")
    return mapping[key]


def number(value, file: str, field: str) -> float:
    """A finite number from JSON or a CSV cell ('1,234.5' and quoted cells included), at most 1e15 in size."""
    parsed = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        parsed = float(value)
    elif isinstance(value, str):
        text = value.strip().strip('"').replace(",", "")
        try:
            parsed = float(text)
        except ValueError:
            parsed = None
    if parsed is None or not math.isfinite(parsed) or abs(parsed) > 1e15:
        raise PlannerInputError(file, field, f"expected a finite number, got {short_repr(value)}")
    return parsed


def count(value, file: str, field: str) -> int:
    """A whole number >= 1 (a concurrency, a stream count): 2.7 or 'eight' is refused, not rounded or guessed."""
    parsed = number(value, file, field)
    if parsed < 1 or parsed != int(parsed):
        raise PlannerInputError(file, field, f"expected a whole number >= 1, got {short_repr(value)}")
    return int(parsed)


def files_of(paths: list[Path], pattern_ok) -> list[Path]:
    """The result files among PATHs: files as given, directories searched recursively (sorted, deterministic)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            matches = sorted(p for p in path.rglob("*") if p.is_file() and pattern_ok(p))
            if not matches:
                raise PlannerInputError(str(path), "", "no result files of this tool in the directory")
            found.extend(matches)
        elif path.is_file():
            found.append(path)
        else:
            raise PlannerInputError(str(path), "", "no such file or directory")
    return found


def _check_options(options: IngestOptions, catalog: Catalog) -> tuple[str, int, str]:
    """(gpu id, GPUs per row, per) after checking every id against the catalog."""
    if options.model not in catalog.models:
        raise PlannerInputError("--model", "model", unknown_id_message("model", options.model, catalog.models, "planner catalog models"))
    gpu = options.gpu
    if options.node is not None:
        if options.node not in catalog.systems:
            raise PlannerInputError("--node", "node", unknown_id_message("system", options.node, catalog.systems, "planner catalog systems"))
        system = catalog.systems[options.node]
        if gpu is not None and gpu != system.gpu:
            raise PlannerInputError("--gpu", "gpu", f"{options.node} has {system.gpu} GPUs, not {gpu}")
        gpu = system.gpu
    if gpu is None:
        raise PlannerInputError("--gpu", "gpu", "required (or --node SYSTEM, whose GPU is then used)")
    if gpu not in catalog.gpus:
        raise PlannerInputError("--gpu", "gpu", unknown_id_message("GPU", gpu, catalog.gpus, "planner catalog gpus"))
    if options.precision not in catalog.gpus[gpu].precisions:
        raise PlannerInputError(
            "--precision", "precision",
            f"{gpu} does not support {options.precision}; allowed: {', '.join(catalog.gpus[gpu].precisions)}",
        )  # fmt: skip
    if options.tp < 1:
        raise PlannerInputError("--tp", "tp", f"must be >= 1 (got {options.tp})")
    if options.statistic not in STATISTICS:
        raise PlannerInputError("--statistic", "statistic", f"unknown '{options.statistic}'; allowed: {', '.join(STATISTICS)}")
    if options.node is not None:
        system = catalog.systems[options.node]
        if options.tp > system.gpus_per_node:
            raise PlannerInputError("--tp", "tp", f"{options.node} has {system.gpus_per_node} GPUs; TP {options.tp} does not fit")
        return gpu, system.gpus_per_node, "node"
    return gpu, options.tp, "instance"


def _snap(values: list[float]) -> tuple[list[int], str | None]:
    """Lengths of one sweep measured a little differently per run (tokenizer, BOS) are one length: runs within
    2% of the most common rounded value take it, so that the rows group for interpolation."""
    rounded = [int(round(v)) for v in values]
    common = Counter(rounded).most_common(1)[0][0]
    snapped = [common if abs(v - common) <= 0.02 * common else v for v in rounded]
    if snapped != rounded:
        return snapped, f"lengths within 2% of {common} taken as {common}"
    return snapped, None


def _short_path(file: str) -> str:
    """'run-directory/file': genai-perf names every run's export alike, its directory tells them apart."""
    path = Path(file)
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def runs_to_rows(runs: list[Run], options: IngestOptions, engine: tuple[str, int, str], table: str = "ingested") -> IngestResult:
    """Benchmark rows from runs, with the options' ids; every row validated as the catalog loader would."""
    gpu, gpus, per = engine  # from _check_options
    if not runs:
        raise PlannerInputError(table, "", "no benchmark runs found")
    notes: list[str] = []
    isls, isl_note = _snap([r.isl for r in runs]) if options.isl is None else ([options.isl] * len(runs), None)
    osls, osl_note = _snap([r.osl for r in runs]) if options.osl is None else ([options.osl] * len(runs), None)
    notes += [n for n in (isl_note, osl_note) if n]
    ordered = sorted(zip(runs, isls, osls), key=lambda t: (t[1], t[2], t[0].concurrency or 0, t[0].file))
    rows = []
    for line, (run, isl, osl) in enumerate(ordered, start=2):
        version = run.tool_version or "version not recorded"
        remarks = [f"{run.tool} {version}", f"model in file: {run.model_name or 'not recorded'}",
                   f"latencies: {run.statistic}"]  # fmt: skip
        if run.request_rate is not None:
            remarks.append(f"offered {run.request_rate:g} rps")
        remarks += list(run.notes)
        values = {
            "table": table, "line": line, "source": f"{run.tool} ({version}): {_short_path(run.file)}",
            "model": options.model, "gpu": gpu, "gpus": gpus, "tp": options.tp, "precision": options.precision,
            "isl": isl, "osl": osl, "concurrency": run.concurrency, "run_kind": run.run_kind,
            "ttft_ms": run.ttft_ms or None, "itl_ms": run.itl_ms or None,
            "request_throughput_rps": run.request_throughput_rps, "output_tokens_per_s": run.output_tokens_per_s or None,
            "per": per, "notes": "; ".join(remarks),
        }  # fmt: skip
        rows.append(validate_model(BenchmarkRow, values, run.file))
    return IngestResult(tuple(rows), tuple(r for r, _, _ in ordered), tuple(notes))


def ingest(tool: str, paths: list[Path | str], options: IngestOptions, catalog: Catalog, table: str = "ingested") -> IngestResult:
    """Parse a tool's result files (or directories of them) into benchmark rows."""
    import importlib

    if tool not in TOOLS:
        raise PlannerInputError("ingest", "tool", f"unknown tool '{tool}'; allowed: {', '.join(TOOLS)}")
    engine = _check_options(options, catalog)  # before any file is read
    parser = importlib.import_module(f"planner.ingest.{tool.replace('-', '_')}")
    files = files_of([Path(p) for p in paths], parser.is_result_file)
    if options.concurrency is not None and len(files) > 1:
        raise PlannerInputError("--concurrency", "concurrency", f"applies to one run; {len(files)} result files were found")
    runs: list[Run] = []
    for file in files:
        try:
            runs.extend(parser.parse_file(file, options.statistic, options.concurrency))
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
            # a file of the right name whose structure is not the tool's (a field of another type, a list where
            # a mapping belongs): refused as such, whatever the parser stumbled on
            raise PlannerInputError(
                str(file), "", f"not a {tool} result of a known layout: {type(exc).__name__}: {str(exc)[:120]}"
            ) from None
    return runs_to_rows(runs, options, engine, table)


def little_concurrency(rps: float, latency_ms: float | None) -> int | None:
    """Mean requests in flight by Little's law (L = lambda x W), for runs driven by a rate, not a concurrency."""
    if latency_ms is None or rps <= 0:
        return None
    return max(1, int(round(rps * latency_ms / 1000.0)))



__all__ = ["IngestOptions", "IngestResult", "Run", "TOOLS", "STATISTICS", "ingest", "runs_to_rows"]
