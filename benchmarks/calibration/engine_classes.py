"""Fit the serving-engine classes (planner/perf/engines.py) and their version factors to measured serving rows.

Rows:
- `systems/silicon_sample.csv` of aiconfigurator-core (extra `.[aic]`): NVIDIA, TensorRT-LLM / vLLM / SGLang,
  aggregated serving, each with the engine version it ran (`backend_version`);
- `../shared/reference/benchmarks/serving_2026.csv` (2025-H2 / 2026: AMD's ATOM recipes, AMD's ROCm vLLM tables,
  GPUStack's vLLM / SGLang runs on H100 / H200) and `serving_amd_and_engines.csv` (early 2025), through
  reference_rows.py beside this file, each with its engine version read from the row's own text.
Each row is a closed-loop benchmark at a fixed concurrency (an offline batch of N prompts: a closed loop of N) whose
model and GPU the catalog knows, at a precision the planner names, within one node (at most 8 GPUs, no pipeline
stages): the roofline is asked at the row's layout, lengths and concurrency.

Engine versions. A row without its engine version is not used (it cannot be reused as if it were today's). Versions
are grouped into release lines (major.minor; ATOM, which has no releases, by the year of its main branch). Per class
(engine x GPU generation x dense/MoE) the current line is the newest with at least MIN_VERSION_ROWS rows; every other
line with as many rows gets a fitted time factor (its memory- and compute-bound time x factor against the current
line); rows of lines with fewer are not used. `engine@<line>` pins a line (planner/perf/engines.py).

Per class two scales, memory-bound and compute-bound time, and a per-request overhead are fitted with the version
factors by least squares on log(model / measured) of TPOT (or throughput where a row gives no TPOT) and TTFT (rows
at concurrency <= 4, where a prompt waits for little but its own prefill; at higher concurrency the benchmark's
TTFT holds the queue of a client that sends requests in waves, which a deployment does not see). TensorRT-LLM on
dense models is the reference the roofline's calibration was fitted to: its scales stay 1 (its version factors are
fitted).

Validation: leave one model out, leave one GPU out and, for the public rows, leave one source out (MLPerf, a
vendor's page, a lab's runs). Each model's (GPU's, source's) rows are predicted by the class fitted without them,
each at its own version's factor (a row whose version is fitted only on the rows held out is not predicted); a
class left with fewer than MIN_TRAIN_ROWS rows keeps the reference scale 1. The 80th percentile of |error| over the
validations, of throughput, TTFT (rows at concurrency <= 4, as fitted) and TPOT, is the class's expected error (50%
and 90% of throughput beside it); a class whose throughput band exceeds UNKNOWN_BAND is written as unknown
(planner/perf/engines.py: its answers say so, and --confidence leaves them out).
Prints the table; writes the CSVs.

Run:  python benchmarks/calibration/engine_classes.py --out catalogs/engines/classes.csv
          [--versions-out catalogs/engines/versions.csv] [--rows-out FILE]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from planner.catalog import load_catalog
from planner.errors import PlannerInputError
from planner.perf import engine_shape
from planner.perf.calibration import efficiency_for
from planner.perf.engines import (
    MEMORY_FACTORS,
    EngineClass,
    ExpectedError,
    scaled,
)
from planner.perf.roofline import (
    SteadyStateError,
    steady_state_curve,
    supports_roofline,
)
from planner.perf.serving import release_line, version_key
from planner.perf.shapes import tensor_split_refusal
from planner.perf.tables import instance_memory
from planner.perf.types import DEFAULT_TOKEN_BUDGET, Layout

PRECISION = {"fp8": "fp8", "fp4": "fp4", "bf16": "bf16"}
MAX_GPUS = 8
TTFT_CONCURRENCY = 4
COVER = 0.8
MIN_TRAIN_ROWS = 8  # a held-out validation fits a class's three numbers only to at least this many rows
MIN_VERSION_ROWS = 8  # a release line is fitted (current, or a factor) only on at least this many rows of a class
UNKNOWN_BAND = 1.0  # a class whose held-out throughput band is wider than this is written as unknown
MAX_OVERHEAD_MS = 400.0  # per request before its prefill: the largest the rows show is SGLang's ~250 ms on MLA models
REFERENCE = ("trtllm", "dense")
# dstack's Llama 3.1 405B on 8x MI300X with Meta's FP8 checkpoint on a community ROCm build: 2-4x slower than AMD's
# own (Quark) FP8 checkpoint on the same setup and lengths in the same benchmark (rows 263-281)
EXCLUDED_REFERENCE_ROWS = {row: "community ROCm build, 2-4x below the same run on AMD's checkpoint" for row in range(244, 263)}


def aic_version() -> str | None:
    """The installed aiconfigurator-core version, or None after saying how to install it."""
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        print("aiconfigurator-core is not installed: pip install '.[aic]'", file=sys.stderr)
        return None


def _script(path: Path):
    """A benchmark script loaded as a module: reference_rows.py beside this file, ../silicon_accuracy.py (one reading
    of the silicon rows for the fit and the accuracy report)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _silicon_accuracy():
    return _script(Path(__file__).resolve().parents[1] / "silicon_accuracy.py")


def silicon_rows() -> list[dict]:
    return _silicon_accuracy().silicon_rows()


class Case:
    """One measured serving run and the engine that ran it, ready to ask the roofline: a closed loop at
    `concurrency` (an offline or burst batch of N prompts is asked as a closed loop of N: the same work in flight);
    `measured` holds what the run recorded of ttft_ms, tpot_ms and output tokens/s per GPU."""

    def __init__(self, catalog, *, id: str, engine: str, model: str, gpu: str, precision: str, layout: Layout,
                 isl: int, osl: int, concurrency: int, measured: dict, origin: str, version: str | None = None,
                 source: str = "", publisher: str = "", measured_on: str | None = None,
                 token_budget: int | None = None):  # fmt: skip
        self.id, self.engine, self.model, self.gpu, self.precision = id, engine, model, gpu, precision
        self.layout, self.isl, self.osl, self.concurrency, self.origin = layout, isl, osl, concurrency, origin
        self.version, self.line = version, release_line(engine, version)
        self.group: str | None = None  # its class's group of release lines (`line_groups`), set by the fit
        self.token_budget = token_budget or DEFAULT_TOKEN_BUDGET  # tokens per iteration per rank the run stated
        if self.line is None and measured_on:  # a row without its version: its own line, by when it was measured
            self.line = f"{UNSTATED} (measured {measured_on})"
        self.source, self.publisher = source, publisher  # the file, and who published the row (leave one out)
        self.measured = {k: v for k, v in measured.items() if v}
        arch = catalog.models[model]
        # models of one architecture (DeepSeek-V3 and -R1) are one model to hold out
        self.model_family = repr(arch.model_dump(exclude={"id", "name", "aliases", "notes", "source"}))
        self.kind = "moe" if arch.moe is not None else "dense"
        self.architecture = catalog.gpus[gpu].architecture
        self.shape = engine_shape(catalog, arch, catalog.gpus[gpu], layout, precision)
        memory = instance_memory(catalog, model, gpu, layout.tp, precision, isl, osl, layout.dp, layout.ep, layout.pp)
        self.capacity = memory.running_limit(isl, osl, engine) if memory.fits else None

    @classmethod
    def from_silicon(cls, row: dict, catalog) -> Case:
        silicon = _silicon_accuracy()  # one reading of a row's layout and concurrency, shared with the report
        concurrency = silicon.concurrency_of(row)
        if concurrency is None:
            raise _Unusable("concurrency not stated")
        layout, isl, osl = silicon.layout_of(row), int(row["isl"]), int(row["osl"])
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        tokens = concurrency * osl / ((ttft + (osl - 1) * tpot) / 1e3) / layout.gpus  # Little's law on its closed loop
        return cls(catalog, id=row["id"], engine=row["backend"], model=catalog.resolve("model", row["model_path"]),
                   gpu=catalog.resolve("gpu", row["system"]), precision=PRECISION[row["precision"]], layout=layout,
                   isl=isl, osl=osl, concurrency=concurrency, origin="silicon",
                   measured={"ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_gpu": tokens},
                   version=row["backend_version"] or None, source="silicon", publisher="aiconfigurator-core",
                   measured_on=_measured(row["silicon_data_source"]))  # fmt: skip

    @classmethod
    def from_reference(cls, case: dict, catalog) -> Case:
        per_instance = case["instances"] * case["gpus"]
        tokens = (case["output_tokens_per_s"] / per_instance if case["output_tokens_per_s"] else
                  case["request_throughput_rps"] * case["osl"] / per_instance if case["request_throughput_rps"] else None)
        closed = case["run"] == "closed"  # a batch's latencies are of its own drain, not a steady state
        return cls(catalog, id=f"reference row {case['row_id']}", engine=case["engine"], model=case["model"],
                   gpu=case["gpu"], precision=case["precision"], layout=Layout(case["tp"], case["dp"], case["ep"]),
                   isl=case["isl"], osl=case["osl"], concurrency=case["concurrency"], origin="reference",
                   measured={"ttft_ms": case["ttft_ms"] if closed else None,
                             "tpot_ms": case["tpot_ms"] if closed else None, "tokens_per_gpu": tokens},
                   version=case["engine_version"], source=case["source"].split(" row ")[0],
                   publisher=case["origin"], token_budget=case.get("token_budget"))  # fmt: skip

    def errors(self, eff) -> dict[str, float] | None:
        """model / measured - 1 of what the run recorded (ttft, tpot, throughput: output tokens/s per GPU); None
        where the model has no answer."""
        try:
            point = steady_state_curve(self.shape, eff, self.isl, self.osl, [self.concurrency], self.capacity,
                                       token_budget=self.token_budget)[0]  # fmt: skip
            if not math.isfinite(point.request_throughput_rps):
                return None
        except (SteadyStateError, ValueError, ZeroDivisionError):
            return None
        if not (point.ttft_ms > 0 and point.tpot_ms > 0):
            return None
        model = {"ttft_ms": point.ttft_ms, "tpot_ms": point.tpot_ms,
                 "tokens_per_gpu": point.output_tokens_per_s / self.layout.gpus}  # fmt: skip
        names = {"ttft_ms": "ttft", "tpot_ms": "tpot", "tokens_per_gpu": "throughput"}
        return {names[k]: model[k] / v - 1 for k, v in self.measured.items()}


class _Unusable(ValueError):
    """A measured row the planner cannot replay, and why."""


def usable(case: Case, catalog) -> str | None:
    """Why a case cannot be asked, or None."""
    if case.layout.gpus > MAX_GPUS or case.layout.pp > 1:
        return "beyond one node"
    if tensor_split_refusal(catalog.models[case.model], case.layout.tp):
        return "a tensor split engines refuse (mislabelled layout)"
    if not supports_roofline(catalog.models[case.model]) or case.precision not in catalog.gpus[case.gpu].precisions:
        return "precision not on the GPU"
    if not case.capacity:
        return "does not fit"
    if not case.measured:
        return "nothing measured to compare"
    return None


def cases(catalog) -> tuple[list[Case], dict[str, int]]:
    """aiconfigurator-core's measured rows (silicon_sample.csv, aggregated serving)."""
    out, skipped = [], defaultdict(int)
    silicon = _silicon_accuracy()
    rows, duplicates = silicon.unique_measurements(silicon.silicon_rows())
    if duplicates:  # runs listed twice (DeepSeek-V3 and -R1 as two names): counted once, or a held-out model leaks
        skipped["the same measurement listed again (same model, or another name of it)"] = duplicates
    for row in rows:
        if row["mode"] != "agg":
            continue
        if row["precision"] not in PRECISION:
            skipped[f"precision {row['precision'] or 'unstated'}"] += 1
            continue
        try:
            case = Case.from_silicon(row, catalog)
        except PlannerInputError:
            skipped["model or GPU not in the catalog"] += 1
            continue
        except _Unusable as why:
            skipped[str(why)] += 1
            continue
        _keep(case, catalog, out, skipped)
    return out, dict(skipped)


def _keep(case: Case, catalog, out: list[Case], skipped: dict[str, int]) -> None:
    """The case into `out` where the planner can replay it, else its reason counted in `skipped`."""
    why = usable(case, catalog)
    if why:
        skipped[why] += 1
    else:
        out.append(case)


def reference_cases(catalog) -> tuple[list[Case], dict[str, int]]:
    """The public rows of ../shared/reference/benchmarks (serving_amd_and_engines.csv, serving_2026.csv) through
    reference_rows.py (beside this file); rows EXCLUDED_REFERENCE_ROWS are left out (their reason beside them)."""
    module = _script(Path(__file__).resolve().parent / "reference_rows.py")
    out, skipped = [], defaultdict(int)
    for path in (module.DEFAULT_PATH, module.PATH_2026):
        found, left = module.reference_cases(catalog, path)
        for reason, count in left.items():
            skipped[reason] += count
        for record in found:
            if path == module.DEFAULT_PATH and record["row_id"] in EXCLUDED_REFERENCE_ROWS:
                skipped[EXCLUDED_REFERENCE_ROWS[record["row_id"]]] += 1
                continue
            _keep(Case.from_reference(record, catalog), catalog, out, skipped)
    return out, dict(skipped)


UNSTATED = "version not stated"


def _measured(source: str) -> str | None:
    """The quarter a silicon row was measured in ('2025-Q4'), from its data source's 'measured=' date."""
    found = re.search(r"measured=(20\d\d)-(\d\d)", source)
    return f"{found.group(1)}-Q{(int(found.group(2)) - 1) // 3 + 1}" if found else None


@dataclass
class Scales:
    """A class's fit: memory- and compute-bound time scales, per-request overhead (None: the generation's), and the
    time factor of each release line other than the current one."""

    memory: float = 1.0
    compute: float = 1.0
    ttft: float | None = None
    factors: dict = field(default_factory=dict)
    current: str | None = None

    def of(self, case: Case) -> float | None:
        """The time factor of the case's release-line group; None where that group is not fitted."""
        if case.group is None:
            return None
        if case.group == self.current:
            return 1.0
        return self.factors.get(case.group)


def line_groups(group: list[Case]) -> list[tuple[str, tuple[str, ...]]]:
    """The class's release lines grouped so that each group has MIN_VERSION_ROWS rows: stated lines from the newest
    back, a line with fewer rows joined to the older ones after it until the group has enough ('0.9-0.11': three
    lines of AMD's ROCm vLLM tables, two rows each); rows without a stated version in their own group by when they
    were measured. Returns (label, lines) per group, newest stated first; a last group short of rows is dropped."""
    counts = defaultdict(int)
    for case in group:
        if case.line is not None:
            counts[case.line] += 1
    stated = sorted((line for line in counts if not line.startswith(UNSTATED)), key=version_key, reverse=True)
    out, pending = [], []
    for line in stated:
        pending.append(line)
        if sum(counts[p] for p in pending) >= MIN_VERSION_ROWS:
            label = pending[0] if len(pending) == 1 else f"{pending[-1]}-{pending[0]}"
            out.append((label, tuple(pending)))
            pending = []
    out += [(line, (line,)) for line in counts if line.startswith(UNSTATED) and counts[line] >= MIN_VERSION_ROWS]
    return out


def group_of(case: Case, groups: list[tuple[str, tuple[str, ...]]]) -> str | None:
    return next((label for label, lines in groups if case.line in lines), None)


def class_efficiency(base, memory_scale: float, compute_scale: float, ttft_overhead_ms: float | None = None):
    probe = EngineClass("trtllm", "", "", memory_scale, compute_scale, ttft_overhead_ms, 0, 0, ExpectedError(0, 0, 0), "fit")
    return scaled(base, probe)


def case_efficiency(case: Case, bases: dict, scales: Scales):
    """The case's factors under a class fit, its release line's time factor on both scales (None: line not fitted)."""
    factor = scales.of(case)
    if factor is None:
        return None
    return class_efficiency(bases[case.architecture], scales.memory * factor, scales.compute * factor, scales.ttft)


def residuals(group: list[Case], bases: dict, scales: Scales) -> np.ndarray:
    out = []
    for case in group:
        eff = case_efficiency(case, bases, scales)
        errors = case.errors(eff) if eff is not None else None
        if errors is None:
            out.append(3.0)
            continue
        out.append(math.log1p(errors["tpot"] if "tpot" in errors else errors["throughput"]))
        if "ttft" in errors and case.concurrency <= TTFT_CONCURRENCY:
            out.append(math.log1p(errors["ttft"]))
    return np.asarray(out)


def fit(group: list[Case], bases: dict, reference: bool = False, order: list[str] | None = None,
        near: Scales | None = None) -> Scales:  # fmt: skip
    """In two stages, so that a class describes its current release line: the class's scales on the current line's
    rows, then each older line's time factor on its own rows with the scales held (a line's rows are often one
    model's: fitted together, the older lines' many rows would set the class's shape and the current line's own
    rows be fitted worse).

    Scales within [floor, 20] (the floor keeps the bandwidth factors at most 1: never beyond the hardware; for a
    mixture of experts every read is capped at the peak on its own, so the floor is the slowest read's factor), the
    per-request overhead within [0, MAX_OVERHEAD_MS] (fitted only where a row measured TTFT at concurrency <=
    TTFT_CONCURRENCY: else the generation's, not a bound the fit drifts to) and each release line's log time factor
    within [-3, 3]; a robust loss (soft L1 beyond 30%) so that a few odd rows (a client's cold start in TTFT) do not
    carry the class. `reference`: the scales stay 1 (TensorRT-LLM dense), the factors are fitted. `order`: the
    class's release-line groups, newest first (`line_groups`), of which the rows' `group` are; `near`: a fit to start
    from (the whole class's, for a held-out fold: the same optimum, found in fewer steps)."""
    present = [label for label in (order or [label for label, _ in line_groups(group)]) if any(c.group == label for c in group)]
    if not present:
        return Scales()
    current, others = present[0], present[1:]
    rows = [c for c in group if c.group == current]
    scales = Scales(current=current) if reference else _fit_scales(rows, bases, current, near)
    for line in others:
        mine = [c for c in group if c.group == line]
        begin = float(np.log(near.factors[line])) if near is not None and line in near.factors else 0.0

        def with_factor(x, line=line) -> Scales:
            return Scales(scales.memory, scales.compute, scales.ttft, {line: float(np.exp(x[0]))}, scales.current)

        result = least_squares(lambda x: residuals(mine, bases, with_factor(x)), [begin], bounds=([-3.0], [3.0]),
                               diff_step=1e-3, loss="soft_l1", f_scale=0.3)  # fmt: skip
        scales.factors[line] = float(np.exp(result.x[0]))
    return scales


def _fit_scales(rows: list[Case], bases: dict, current: str, near: Scales | None) -> Scales:
    """The class's memory- and compute-bound scales and per-request overhead on its current line's rows (`fit`)."""
    if rows[0].kind == "moe":  # each read capped at the peak (engines.scaled): down to the slowest read's factor
        floor = max(min(min(b.kv_bandwidth, b.bandwidth * b.moe_bandwidth) for b in (bases[c.architecture] for c in rows)), 0.05)
    else:
        floor = max(max(getattr(bases[c.architecture], f) for c in rows for f in MEMORY_FACTORS), 0.05)
    # the per-request overhead only where a row measured TTFT with little queueing (none: the generation's own)
    timed = any("ttft_ms" in c.measured and c.concurrency <= TTFT_CONCURRENCY for c in rows)
    start = [max(1.0, floor), 1.0] + ([min(max(bases[c.architecture].ttft_overhead_ms for c in rows), MAX_OVERHEAD_MS)] if timed else [])
    low, high = [floor, 0.2] + ([0.0] if timed else []), [20.0, 20.0] + ([MAX_OVERHEAD_MS] if timed else [])
    if near is not None:
        start[:2] = [min(max(near.memory, floor), 20.0), min(max(near.compute, 0.2), 20.0)]
        if timed and near.ttft is not None:
            start[2] = min(near.ttft, MAX_OVERHEAD_MS)

    def unpack(x) -> Scales:
        return Scales(float(x[0]), float(x[1]), float(x[2]) if timed else None, {}, current)

    result = least_squares(lambda x: residuals(rows, bases, unpack(x)), start, bounds=(low, high), diff_step=1e-3,
                           x_scale=[1.0, 1.0] + ([50.0] if timed else []), loss="soft_l1", f_scale=0.3)  # fmt: skip
    return unpack(result.x)


HOLD_OUT = ("model", "gpu", "publisher")  # leave one model, GPU, publisher out


def held_out(group: list[Case], by: str, reference: bool, bases: dict, rows_out: list, label: str,
             full: Scales, order: list[str]) -> dict[str, list]:  # fmt: skip
    """model / measured - 1 of each row predicted by the class fitted without its model (by='model'), its GPU
    (by='gpu') or its publisher (by='publisher'), at its own line's factor; a group left with fewer than
    MIN_TRAIN_ROWS rows to fit on keeps the reference scale 1 (three numbers fitted to one odd row, GB200's single
    TensorRT-LLM MoE row at +500%, predicted B200's 292 rows 64% low). A validation with one value only (a class of
    one model, GPU or publisher) has nothing to hold out against and is skipped."""
    held = defaultdict(list)
    key = "model_family" if by == "model" else by  # one architecture under two names is one model
    for value in sorted({getattr(c, key) for c in group}):
        train = [c for c in group if getattr(c, key) != value]
        scales = Scales(current=full.current) if len(train) < MIN_TRAIN_ROWS else fit(train, bases, reference, order, full)
        # a line the held-out rows alone carry keeps its factor from the whole class (a property of the version)
        scales.factors = {**{line: f for line, f in full.factors.items() if line != scales.current}, **scales.factors}
        if scales.current != full.current and scales.current in full.factors:
            scales.factors[full.current] = 1.0 / full.factors[scales.current]
        for case in (c for c in group if getattr(c, key) == value):
            eff = case_efficiency(case, bases, scales)
            errors = case.errors(eff) if eff is not None else None
            if errors is None:
                continue
            for metric, error in errors.items():
                if metric != "ttft" or case.concurrency <= TTFT_CONCURRENCY:  # TTFT where the fit used it
                    held[metric].append(error)
            rows_out.append({"id": case.id, "class": label, "held_out": by, "model": case.model, "gpu": case.gpu,
                             "version": case.version or "", **errors})  # fmt: skip
    return held


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.abs(values), q)) if values else float("nan")


def describe_source(group: list[Case], package: str) -> str:
    """Where a class's rows come from: the package's file, and the public files with their publishers."""
    parts = []
    silicon = [c for c in group if c.origin == "silicon"]
    if silicon:
        parts.append(f"aiconfigurator-core {package} systems/silicon_sample.csv ({len(silicon)} rows)")
    public = defaultdict(lambda: defaultdict(int))
    for case in group:
        if case.origin == "reference":
            public[case.source][case.publisher] += 1
    for source, publishers in sorted(public.items()):
        named = ", ".join(f"{p} {n}" for p, n in sorted(publishers.items()))
        parts.append(f"{source} of the planner's shared reference ({named} rows)")
    return "; ".join(parts)


def validation_table(held_rows: list[dict], records: list[dict]) -> str:
    """Markdown: output tokens/s per GPU held out by model, GPU and publisher, per set (NVIDIA dense and MoE, AMD):
    rows, median |error|, p90 |error|, signed median, and how often the stated band of the row's class covers the
    held-out error, with the median band stated (a row of a class written as unknown counts as not covered)."""
    band = {f"{r['engine']}/{r['architecture']}/{r['kind']}": (r["error_throughput"], r["known"] == "yes") for r in records}
    sets = {"NVIDIA dense": lambda c: c.endswith("/dense") and "/cdna" not in c,
            "NVIDIA MoE": lambda c: c.endswith("/moe") and "/cdna" not in c, "AMD": lambda c: "/cdna" in c}
    lines = ["| set | held out by | rows | median | p90 | signed | covered by the stated band | median band |",
             "|---|---|---|---|---|---|---|---|"]
    for name, member in sets.items():
        for by in HOLD_OUT:
            rows = [r for r in held_rows if member(r["class"]) and r["held_out"] == by and "throughput" in r
                    and r["class"] in band]  # fmt: skip
            if not rows:
                continue
            errors = [r["throughput"] for r in rows]
            covered = [abs(r["throughput"]) <= band[r["class"]][0] and band[r["class"]][1] for r in rows]
            bands = [band[r["class"]][0] for r in rows]
            lines.append(f"| {name} | {by} | {len(rows)} | {quantile(errors, 0.5):.0%} | {quantile(errors, 0.9):.0%} | "
                         f"{float(np.median(errors)):+.0%} | {np.mean(covered):.0%} | {float(np.median(bands)):.0%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--versions-out", help="write the release lines' time factors here (catalogs/engines/versions.csv)")
    parser.add_argument("--rows-out", help="write the held-out error of every row here")
    args = parser.parse_args()
    version = aic_version()
    if version is None:
        return 2
    started = time.time()
    catalog = load_catalog()
    found, skipped = cases(catalog)
    others, other_skipped = reference_cases(catalog)
    found += others
    unversioned = [c for c in found if c.line is None]
    found = [c for c in found if c.line is not None]
    bases = {a: efficiency_for(catalog, a) for a in {c.architecture for c in found}}
    groups = defaultdict(list)
    for case in found:
        groups[(case.engine, case.architecture, case.kind)].append(case)
    print(f"{len(found)} rows with their engine version: aiconfigurator-core {version} silicon_sample.csv (not used: "
          f"{skipped}) and the shared reference's public rows (not used: {other_skipped}); without a version (not "
          f"used): {len(unversioned)}")  # fmt: skip
    records, version_records, held_rows, by_what = [], [], [], {}
    print(f"{'class':24} {'rows':>5} {'models':>6} {'line':>7}  scales mem/comp/ms | tput med signed: before -> in "
          "sample | held-out p80 tput/TTFT/TPOT | line factors")  # fmt: skip
    for key in sorted(groups):
        group = groups[key]
        lines = line_groups(group)
        order = [label for label, _ in lines]
        for case in group:
            case.group = group_of(case, lines)
        reference = (key[0], key[2]) == REFERENCE
        scales = fit(group, bases, reference, order)
        used = [c for c in group if scales.of(c) is not None]
        if not used:
            print(f"{'/'.join(key):24} {len(group):5}: no release line with {MIN_VERSION_ROWS} rows, not fitted")
            continue
        models = sorted({c.model for c in used})
        before = [e["throughput"] for c in used if (e := c.errors(bases[c.architecture])) and "throughput" in e]
        after = [e["throughput"] for c in used
                 if (e := c.errors(case_efficiency(c, bases, scales))) and "throughput" in e]  # fmt: skip
        held = defaultdict(list)
        for by in HOLD_OUT:
            for metric, values in held_out(used, by, reference, bases, held_rows, "/".join(key), scales, order).items():
                held[metric] += values
                by_what[(key, by, metric)] = values
        expected = ExpectedError(*(round(quantile(held[m], COVER), 3) for m in ("throughput", "ttft", "tpot")))
        current_rows = [c for c in used if c.group == scales.current]
        stated = [c.version for c in current_rows if c.version]
        newest = max(stated, key=version_key) if stated else scales.current
        ids = sorted(c.id for c in used)
        records.append({
            "engine": key[0], "architecture": key[1], "kind": key[2], "memory_scale": f"{scales.memory:.4g}",
            "compute_scale": f"{scales.compute:.4g}", "ttft_overhead_ms": "" if scales.ttft is None else f"{scales.ttft:.4g}",
            "rows": len(used), "models": len(models),
            "error_throughput": expected.throughput, "error_ttft": expected.ttft, "error_tpot": expected.tpot,
            "error_throughput_p50": round(quantile(held["throughput"], 0.5), 3),
            "error_throughput_p90": round(quantile(held["throughput"], 0.9), 3),
            "engine_version": newest, "release_line": scales.current,
            "known": "no" if not expected.throughput <= UNKNOWN_BAND else "yes",
            "source": (f"{describe_source(used, version)}: {len(used)} measured rows of {', '.join(models)} "
                       f"({ids[0]} .. {ids[-1]}); {len(current_rows)} of release line {scales.current} (newest "
                       f"{newest})" + ("; TensorRT-LLM dense is the reference (scales 1)" if reference else "")),
        })  # fmt: skip
        for line, factor in sorted(scales.factors.items(), key=lambda item: version_key(item[0])):
            rows = [c for c in used if c.group == line]
            version_records.append({
                "engine": key[0], "architecture": key[1], "kind": key[2], "release_line": line,
                "newest_version": max((c.version for c in rows if c.version), key=version_key, default=line),
                "time_factor": f"{factor:.4g}",
                "rows": len(rows), "models": len({c.model for c in rows}),
                "source": f"{describe_source(rows, version)}: fitted with the class, against release line {scales.current}",
            })  # fmt: skip
        factors = " ".join(f"{line}:x{f:.2f}" for line, f in sorted(scales.factors.items(), key=lambda i: version_key(i[0])))
        print(f"{'/'.join(key):24} {len(used):5} {len(models):6} {scales.current:>7}  {scales.memory:6.3g} "
              f"{scales.compute:6.3g} {scales.ttft or 0:6.0f} | {quantile(before, 0.5):5.0%} "
              f"{float(np.median(before)) if before else float('nan'):+6.0%} -> {quantile(after, 0.5):4.0%} "
              f"{float(np.median(after)) if after else float('nan'):+5.0%} | {expected.throughput:5.0%} "
              f"{expected.ttft:5.0%} {expected.tpot:5.0%} | {factors}")  # fmt: skip
    widest = {(kind, column): max((r[column] for r in records if r["kind"] == kind and not math.isnan(r[column])), default=1.0)
              for kind in ("dense", "moe") for column in ("error_throughput", "error_ttft", "error_tpot")}  # fmt: skip
    for record in records:  # rows of latencies only: at a fixed concurrency throughput is Little's law over them
        if math.isnan(record["error_throughput"]) and not math.isnan(record["error_tpot"]):
            record["error_throughput"] = record["error_tpot"]
            record["known"] = "no" if record["error_throughput"] > UNKNOWN_BAND else "yes"
    for record in records:  # nothing of it held out (one model, GPU and publisher; no latency measured): the widest of its kind
        for column in ("error_throughput", "error_ttft", "error_tpot"):
            if math.isnan(record[column]):
                record[column] = widest[(record["kind"], column)]
                record["known"] = "no" if record["error_throughput"] > UNKNOWN_BAND else record["known"]
        for column in ("error_throughput_p50", "error_throughput_p90"):
            if math.isnan(record[column]):
                record[column] = ""
    for path, rows in ((args.out, records), (args.versions_out, version_records), (args.rows_out, held_rows)):
        if path and rows:
            with open(path, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(dict.fromkeys(k for r in rows for k in r)),
                                        lineterminator="\n", restval="")  # fmt: skip
                writer.writeheader()
                writer.writerows(rows)
    print(validation_table(held_rows, records))
    print(f"wrote {args.out} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
