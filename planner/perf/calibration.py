"""Calibration of the roofline, per GPU generation, in two stages (docs/perf-model.md).

1. Kernel factors (planner/perf/kernel_fit.py) (bandwidth, GEMM and attention efficiencies, link, fixed latencies): least squares on the log
   error of every timed engine iteration of the generation in the catalog's step tables (`calibration/*.csv`:
   aiconfigurator's kernel database, measured with TensorRT-LLM on each GPU; users may add their own).
2. Engine factors (per-iteration and per-request overheads, the prefill queue factor): least squares on the log
   error of TTFT, ITL and throughput of the generation's measured benchmark rows (TP and precision stated), with
   a weak prior so that a few rows cannot pull them far. Estimates (aic tables) never calibrate.

A generation without measured rows keeps its own kernel factors and borrows the engine factors of the generation
with the most rows (basis 'aic kernels', or 'timed kernels' for a user's own timings); one without timed iterations
borrows everything (basis 'extrapolated'). Fits are cached with the catalog, and by content across catalogs.

User catalogs' rows (`--catalog`; any row whose origin is not the bottom layer's, usually 'shipped') calibrate what
they measured: they answer and anchor the roofline of the engines they measured (model, GPU, TP, precision, engine
and version: planner.perf.anchor), which is where a few rows of one engine carry information, and never move other
models' or engines' answers unless the user asks. A user catalog asks with `calibrate: generation` in its
catalog.yaml; its rows then refit the engine factors of a generation they measured when they speak for that
generation (`engine_fit_rows`), at least OVERLAY_MIN_ROWS calibrating rows across at least OVERLAY_MIN_MODELS
models of it (all such layers together). Without it, or with fewer rows, or rows of one model, the generation's
factors stay as its bottom layer's rows fit them: the rows do not set three overheads shared by every model of the
generation. Three factors fitted to a handful of points of one model and one client (often at p95/p99, often with
HTTP and tokenization in TTFT) absorb what is particular to that model and client: two real runs moved Hopper's
per-request overhead from 14.7 to 141 ms. And a generation that borrows engine factors borrows the donor's
bottom-layer fit, the donor chosen by bottom-layer rows, so user rows never move the factors of a generation they
did not measure. What the user rows did, or would have done, to each fit is in planner.perf.fit_report.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from planner.catalog import BenchmarkRow, Catalog
from planner.metrics import statistic_percentile
from planner.perf.roofline import (
    ENGINE_FACTORS,
    KERNEL_FACTORS,
    MOE_FACTORS,
    Efficiency,
    EngineShape,
    concurrency_ladder,
    decode_step_ms,
    kv_bytes_for,
    prefill_ms,
    steady_state_curve,
    supports_roofline,
)
from planner.perf.tables import running_capacity
from planner.perf.kernel_fit import FITS, PRIOR, KernelFit, fit_kernels, rounded  # noqa: F401 (fit_kernels: read here by callers)
from planner.perf.transfer import kernel_transfer

# Engine factors: bounds, start, and the weak prior (centre, scale) they are pulled to
ENGINE_BOUNDS = {"step_overhead_ms": (0.0, 50.0, 0.5), "ttft_overhead_ms": (0.0, 2000.0, 10.0), "queue_factor": (0.25, 8.0, 1.0)}
ENGINE_PRIOR = {"step_overhead_ms": (0.0, 2.0), "ttft_overhead_ms": (0.0, 100.0), "queue_factor": (1.0, 0.5)}
# user catalogs' rows refit a generation's shared engine factors only from this many rows across this many models
OVERLAY_MIN_ROWS = 8
OVERLAY_MIN_MODELS = 2


@dataclass(frozen=True)
class EngineFit:
    architecture: str
    factors: dict  # engine factor -> value
    rows_used: tuple[str, ...]
    residual_count: int
    median_abs_rel_error: float | None
    worst_abs_rel_error: float | None
    origins: tuple[tuple[str, int], ...] = ()  # (catalog layer, rows) of the rows fitted: whose data it rests on


@dataclass(frozen=True)
class CalibrationFit:
    """Both stages for one generation, and the efficiency they give."""

    architecture: str
    kernel: KernelFit | None
    engine: EngineFit | None
    efficiency: Efficiency

    @property
    def rows_used(self) -> tuple[str, ...]:
        return self.engine.rows_used if self.engine else ()

    @property
    def median_abs_rel_error(self) -> float | None:
        return self.engine.median_abs_rel_error if self.engine else None


def shape_for_row(row: BenchmarkRow, catalog: Catalog) -> EngineShape | None:
    """The engine a row measured, when the roofline can reproduce it (architecture, TP and precision known)."""
    model = catalog.models[row.model]
    if not supports_roofline(model) or row.precision is None or row.isl is None:
        return None
    tp = row.tp if row.tp else (row.gpus if row.per == "instance" else None)
    if tp is None:
        return None
    return EngineShape(model, catalog.gpus[row.gpu], tp, row.precision, kv_bytes_for(row.precision))


def predict_row(row: BenchmarkRow, shape: EngineShape, eff: Efficiency, catalog: Catalog) -> dict[str, float]:
    """What the roofline says for the metrics this row recorded."""
    measured = measured_metrics(row)
    predicted: dict[str, float] = {}
    if row.osl is None:
        # a static batch: TTFT is the prefill of `concurrency` prompts, ITL one decode step of that batch (case C3)
        batch = row.concurrency or 1
        if "ttft_ms" in measured:
            predicted["ttft_ms"] = prefill_ms(shape, eff, row.isl, batch)
        for gap in ("tpot_ms", "itl_ms"):
            if gap in measured:
                predicted[gap] = decode_step_ms(shape, eff, batch, row.isl)
        return predicted
    capacity = running_capacity(catalog, row.model, row.gpu, shape.tp, shape.precision, row.isl, row.osl)
    if not capacity:
        return {}
    percentile = statistic_percentile(row.statistic)  # each row at its own statistic (its p99 against the model's)
    if row.concurrency is not None:
        point = steady_state_curve(shape, eff, row.isl, row.osl, [row.concurrency], capacity, percentile)[0]
    else:  # max-throughput / offline: the best point the engine reaches
        points = steady_state_curve(shape, eff, row.isl, row.osl, concurrency_ladder(capacity), capacity, percentile)
        point = max(points, key=lambda p: p.request_throughput_rps)
    values = {
        "ttft_ms": point.ttft_ms, "tpot_ms": point.tpot_ms, "itl_ms": point.itl_ms,
        "request_throughput_rps": point.request_throughput_rps, "output_tokens_per_s": point.output_tokens_per_s,
    }  # fmt: skip
    return {k: values[k] for k in measured}


def measured_metrics(row: BenchmarkRow) -> dict[str, float]:
    """TTFT, TPOT, ITL and one throughput figure (requests/s when recorded, else output tokens/s), each at the row's
    statistic. A run that sent every
    request at once (no concurrency; vLLM's rate inf) calibrates by its throughput only: its latencies depend on
    how many requests the burst held, which the row does not say."""
    metrics = {}
    burst = row.concurrency is None and row.osl is not None
    if row.ttft_ms is not None and not burst:
        metrics["ttft_ms"] = row.ttft_ms
    for gap in ("tpot_ms", "itl_ms"):
        if getattr(row, gap) is not None and not burst:
            metrics[gap] = getattr(row, gap)
    if row.request_throughput_rps is not None:
        metrics["request_throughput_rps"] = row.request_throughput_rps
    elif row.output_tokens_per_s is not None and row.osl is not None:
        metrics["output_tokens_per_s"] = row.output_tokens_per_s
    return metrics


def calibration_rows(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> list[BenchmarkRow]:
    return [
        row for row in catalog.benchmarks
        if row.is_measurement  # estimates (aic tables) never calibrate the roofline
        and row.serving_engine == "trtllm"  # rows of another engine anchor it only (its class has its own fit)
        and catalog.gpus[row.gpu].architecture == architecture
        and (row.table, row.line) not in exclude
        and shape_for_row(row, catalog) is not None
        and measured_metrics(row)
    ]  # fmt: skip


def base_layer_rows(catalog: Catalog, rows: list[BenchmarkRow]) -> list[BenchmarkRow]:
    """The rows of the catalog's bottom layer ('shipped', or the first user catalog when it says `base: none`)."""
    return [row for row in rows if row.origin == catalog.layers[0]]


def overlay_rows(catalog: Catalog, rows: list[BenchmarkRow]) -> list[BenchmarkRow]:
    """The rows of the user layers above the bottom one."""
    return [row for row in rows if row.origin != catalog.layers[0]]


def overlay_shortfall(rows: list[BenchmarkRow]) -> str | None:
    """Why user rows do not speak for their generation (module docstring), or None when they do."""
    models = {row.model for row in rows}
    if len(rows) >= OVERLAY_MIN_ROWS and len(models) >= OVERLAY_MIN_MODELS:
        return None
    return (f"{len(rows)} row{'s' if len(rows) != 1 else ''} of {len(models)} model{'s' if len(models) != 1 else ''}, "
            f"fewer than {OVERLAY_MIN_ROWS} rows across {OVERLAY_MIN_MODELS} models")  # fmt: skip


def engine_fit_rows(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> list[BenchmarkRow]:
    """The rows a generation's engine factors are fitted to: its bottom layer's, and those of the user layers that
    ask to refit it (`calibrate: generation`) only when they speak for the generation (module docstring)."""
    rows = calibration_rows(catalog, architecture, exclude)
    base = base_layer_rows(catalog, rows)
    asking = [row for row in overlay_rows(catalog, rows) if row.origin in catalog.generation_layers]
    return base + asking if asking and overlay_shortfall(asking) is None else base


def engine_residuals(rows: list[BenchmarkRow], shapes: list[EngineShape], eff: Efficiency, catalog: Catalog) -> list[float]:
    """log(model / measured) of every metric the rows recorded, each at the row's statistic (5.0 where the model has
    no answer)."""
    out = []
    for row, shape in zip(rows, shapes):
        predicted = predict_row(row, shape, eff, catalog)
        for metric, value in measured_metrics(row).items():
            guess = predicted.get(metric)
            out.append(math.log(guess / value) if guess and guess > 0 else 5.0)
    return out


def median_error(rows: list[BenchmarkRow], eff: Efficiency, catalog: Catalog) -> float | None:
    """The median relative error, over the metrics of `rows`, of the roofline with factors `eff`; None without rows."""
    if not rows:
        return None
    residuals = engine_residuals(rows, [shape_for_row(row, catalog) for row in rows], eff, catalog)
    return float(np.median(np.abs(np.expm1(residuals))))


def fit_engine(
    catalog: Catalog, architecture: str, kernel: Efficiency, exclude: frozenset = frozenset(),
    rows: list[BenchmarkRow] | None = None,
) -> EngineFit | None:  # fmt: skip
    """Stage 2: the engine factors of one generation, fitted to its measured rows (a MAP fit: weak prior); `rows`
    defaults to `engine_fit_rows` (the user-catalog rule)."""
    rows = engine_fit_rows(catalog, architecture, exclude) if rows is None else rows
    if not rows:
        return None
    key = ("engine", architecture, kernel, tuple((r.point_key, r.origin, tuple(measured_metrics(r).items())) for r in rows))
    if key in FITS:
        return FITS[key]
    shapes = [shape_for_row(row, catalog) for row in rows]
    names = ENGINE_FACTORS

    def residuals(values) -> np.ndarray:
        eff = dataclasses.replace(kernel, **dict(zip(names, values)))
        out = engine_residuals(rows, shapes, eff, catalog)
        data = len(out)
        for name, value in zip(names, values):
            centre, scale = ENGINE_PRIOR[name]
            out.append((math.log(value / centre) if name == "queue_factor" else value - centre) / scale)
        residuals.data = data
        return np.asarray(out)

    from scipy.optimize import least_squares  # scipy is slow to import: where it is used

    result = least_squares(
        residuals, [ENGINE_BOUNDS[n][2] for n in names],
        bounds=([ENGINE_BOUNDS[n][0] for n in names], [ENGINE_BOUNDS[n][1] for n in names]), diff_step=1e-3,
    )  # fmt: skip
    data = np.abs(np.expm1(result.fun[: residuals.data]))
    fit = EngineFit(
        architecture, {n: rounded(v) for n, v in zip(names, result.x)},
        tuple(sorted({f"{r.table}:{r.line}" for r in rows})), len(data), float(np.median(data)), float(data.max()),
        _origin_counts(rows),
    )  # fmt: skip
    FITS[key] = fit
    return fit


def _origin_counts(rows: list[BenchmarkRow]) -> tuple[tuple[str, int], ...]:
    """(origin, rows) of each catalog layer among `rows`, the shipped layer first."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.origin] = counts.get(row.origin, 0) + 1
    return tuple(sorted(counts.items(), key=lambda item: (item[0] != "shipped", item[0])))


def _architectures(catalog: Catalog) -> list[str]:
    return sorted({gpu.architecture for gpu in catalog.gpus.values()})


def kernel_efficiency(catalog: Catalog, architecture: str) -> tuple[Efficiency, KernelFit | None, list[str]]:
    """Stage 1 of a generation, or the kernel factors it borrows: the efficiency without engine factors (basis
    'measured' when fitted, else 'extrapolated'), the fit, and notes saying where the factors come from."""
    kernel = fit_kernels(catalog, architecture)
    basis, notes = "measured", []
    if kernel is None:
        donors = [(a, fit_kernels(catalog, a)) for a in _architectures(catalog) if a != architecture]
        donors = [(a, k) for a, k in donors if k is not None]
        if donors:
            # the generation that timed the most of this one's precisions (an fp4 part borrows from one that
            # timed fp4, not a prior), then the most iterations
            needed = {p for gpu in catalog.gpus.values() if gpu.architecture == architecture for p in gpu.precisions}
            donor, borrowed = max(donors, key=lambda d: (len(needed & set(d[1].precisions)), d[1].iterations, d[0]))
            kernel_factors = borrowed.factors
            notes.append(f"no {architecture} iterations timed: {donor} kernel factors")
            transfer = kernel_transfer(catalog, architecture, donor)
            if transfer is not None:
                kernel_factors = transfer.factors(kernel_factors)
                notes.append(transfer.note())
            else:
                notes.append(f"no {architecture} microbenchmarks beside {donor}'s: its fractions of peak unchanged")
        else:
            kernel_factors = {n: getattr(PRIOR, n) for n in KERNEL_FACTORS}
            notes.append("no iterations timed: microbenchmark prior")
        basis = "extrapolated"
    else:
        kernel_factors = kernel.factors
        notes.append(
            f"kernels fitted to {kernel.iterations} timed {architecture} iterations ({', '.join(kernel.tables)}; median "
            f"error {kernel.median_abs_rel_error:.1%}"
            + (f", mixtures of experts {kernel.moe_median_abs_rel_error:.1%} over {kernel.moe_iterations}"
               if kernel.moe_iterations else "") + f", worst {kernel.worst_abs_rel_error:.0%})"
        )  # fmt: skip
    if kernel is None or not kernel.mixture_of_experts:  # grouped GEMMs from the generation that timed the most
        moe_donors = [k for a in _architectures(catalog) if a != architecture and (k := fit_kernels(catalog, a)) is not None
                      and k.mixture_of_experts]  # fmt: skip
        if moe_donors:
            donor = max(moe_donors, key=lambda k: (k.iterations, k.architecture))
            kernel_factors = {**kernel_factors, **{n: donor.factors[n] for n in MOE_FACTORS}}
            notes.append(f"no {architecture} mixture of experts timed: {donor.architecture} grouped-GEMM factors")
    return Efficiency(**kernel_factors, basis=basis), kernel, notes


def fit_architecture(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> CalibrationFit:
    """Both stages for one generation, borrowing what it lacks (module docstring)."""
    base, kernel, notes = kernel_efficiency(catalog, architecture)
    basis = base.basis
    engine = fit_engine(catalog, architecture, base, exclude)
    if engine is not None:
        users = [f"{n} of catalog '{origin}'" for origin, n in engine.origins if origin != catalog.layers[0]]
        notes.append(
            f"engine overheads fitted to {len(engine.rows_used)} measured {architecture} rows ({engine.residual_count} "
            f"metrics; {'; '.join(users) + '; ' if users else ''}median error {engine.median_abs_rel_error:.0%}, "
            f"worst {engine.worst_abs_rel_error:.0%})"
        )  # fmt: skip
        engine_factors = engine.factors
    else:
        engine_factors, note = borrowed_engine_factors(catalog, architecture, exclude)
        notes.append(note)
        if basis == "measured":
            basis = kernel.basis
    kernel_factors = {name: getattr(base, name) for name in KERNEL_FACTORS}
    efficiency = Efficiency(**kernel_factors, **engine_factors, source="; ".join(notes), basis=basis)
    return CalibrationFit(architecture, kernel, engine, efficiency)


def borrowed_engine_factors(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> tuple[dict, str]:
    """The engine factors of a generation without its own fit, and a note saying whose: the donor's bottom-layer fit
    (user rows never move a generation they did not measure), else the prior."""
    donor = _engine_donor(catalog, architecture, exclude)
    if donor is None:
        return {name: ENGINE_PRIOR[name][0] for name in ENGINE_FACTORS}, "no measured rows: engine overheads at their prior"
    return donor.factors, f"no measured {architecture} rows: engine overheads of {donor.architecture} ({len(donor.rows_used)} rows)"


def _engine_donor(catalog: Catalog, architecture: str, exclude: frozenset) -> EngineFit | None:
    """The engine fit of the generation with the most measured rows of the bottom layer, fitted to those rows."""
    rows = {a: base_layer_rows(catalog, calibration_rows(catalog, a, exclude)) for a in _architectures(catalog) if a != architecture}
    rows = {a: r for a, r in rows.items() if r}
    if not rows:
        return None
    donor = max(rows, key=lambda a: (len(rows[a]), a))
    kernel = fit_kernels(catalog, donor)
    base = Efficiency(**(kernel.factors if kernel else {n: getattr(PRIOR, n) for n in KERNEL_FACTORS}))
    return fit_engine(catalog, donor, base, exclude, rows[donor])


def efficiency_for(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> Efficiency:
    """The calibrated factors of a GPU generation (both stages; see the module docstring)."""
    key = ("efficiency", architecture, exclude)
    if key not in catalog.derived:
        from planner.perf.fit_cache import cached_dataclass

        catalog.derived[key] = cached_dataclass(catalog, ("efficiency", architecture, tuple(sorted(exclude))), Efficiency,
                                                lambda: fit_architecture(catalog, architecture, exclude).efficiency)  # fmt: skip
    return catalog.derived[key]
