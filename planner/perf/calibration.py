"""Calibration of the roofline: efficiency factors (and the all-reduce step latency) fitted to the benchmark rows, per GPU architecture.

The prior is what microbenchmarks reach on an H100 SXM (shared/reference/hardware.md: 8192^3 bf16 GEMM 787 of
989 TFLOP/s = 80%, device copy 3.03 of 3.35 TB/s = 90%, no overhead). Serving engines reach less; the fit
finds (e_c, e_b, overhead_ms, allreduce_step_us) minimizing the squared log error of TTFT, ITL and throughput over every row the
roofline can reproduce (architecture known, TP and precision stated). An architecture without rows borrows the
factors of the architecture with the most rows, and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from planner.catalog import BenchmarkRow, Catalog
from planner.perf.memory import memory_fit
from planner.perf.roofline import (
    Efficiency,
    EngineShape,
    concurrency_ladder,
    decode_step_ms,
    kv_bytes_for,
    prefill_ms,
    steady_state,
    supports_roofline,
)

PRIOR = Efficiency(
    compute=787 / 989,
    bandwidth=3.03 / 3.35,
    overhead_ms=0.0,
    allreduce_step_us=0.0,
    source="prior: H100 microbenchmarks of shared/reference/hardware.md (GEMM 80%, copy 90%); no rows to fit",
)
_LOWER = (0.05, 0.05, 0.0, 0.0)
_UPPER = (1.0, 1.0, 50.0, 100.0)


@dataclass(frozen=True)
class CalibrationFit:
    architecture: str
    efficiency: Efficiency
    rows_used: tuple[str, ...]
    residual_count: int
    median_abs_rel_error: float | None
    worst_abs_rel_error: float | None


def shape_for_row(row: BenchmarkRow, catalog: Catalog) -> EngineShape | None:
    """The engine a row measured, when the roofline can reproduce it (architecture, TP and precision known)."""
    model = catalog.models[row.model]
    if not supports_roofline(model) or row.precision is None or row.isl is None:
        return None
    tp = row.tp if row.tp else (row.gpus if row.per == "instance" else None)
    if tp is None:
        return None
    precision = row.precision
    return EngineShape(model, catalog.gpus[row.gpu], tp, precision, kv_bytes_for(precision))


def max_running(shape: EngineShape, isl: int, osl: int, catalog: Catalog) -> int | None:
    fit = memory_fit(
        shape.model, shape.gpu, shape.tp, shape.precision, isl + osl,
        catalog.defaults.memory_reserve_fraction.value, shape.kv_bytes_per_element,
    )  # fmt: skip
    return fit.max_concurrency_by_memory if fit.fits else 0


def predict_row(row: BenchmarkRow, shape: EngineShape, eff: Efficiency, catalog: Catalog) -> dict[str, float]:
    """What the roofline says for the metrics this row recorded."""
    measured = measured_metrics(row)
    predicted: dict[str, float] = {}
    if row.osl is None:
        # a static batch: TTFT is the prefill of `concurrency` prompts, ITL one decode step of that batch (case C3)
        batch = row.concurrency or 1
        if "ttft_ms" in measured:
            predicted["ttft_ms"] = prefill_ms(shape, eff, row.isl, batch)
        if "itl_ms" in measured:
            predicted["itl_ms"] = decode_step_ms(shape, eff, batch, row.isl)
        return predicted
    capacity = max_running(shape, row.isl, row.osl, catalog)
    if not capacity:
        return {}
    if row.concurrency is not None:
        point = steady_state(shape, eff, row.isl, row.osl, row.concurrency, capacity)
    else:  # max-throughput / offline: the best point the engine reaches
        points = [steady_state(shape, eff, row.isl, row.osl, c, capacity) for c in concurrency_ladder(capacity)]
        point = max(points, key=lambda p: p.request_throughput_rps)
    values = {
        "ttft_ms": point.ttft_ms, "itl_ms": point.itl_ms,
        "request_throughput_rps": point.request_throughput_rps, "output_tokens_per_s": point.output_tokens_per_s,
    }  # fmt: skip
    return {k: values[k] for k in measured}


def measured_metrics(row: BenchmarkRow) -> dict[str, float]:
    """TTFT, ITL and one throughput figure (requests/s when recorded, else output tokens/s)."""
    metrics = {}
    if row.ttft_ms is not None:
        metrics["ttft_ms"] = row.ttft_ms
    if row.itl_ms is not None:
        metrics["itl_ms"] = row.itl_ms
    if row.request_throughput_rps is not None:
        metrics["request_throughput_rps"] = row.request_throughput_rps
    elif row.output_tokens_per_s is not None and row.osl is not None:
        metrics["output_tokens_per_s"] = row.output_tokens_per_s
    return metrics


def calibration_rows(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> list[BenchmarkRow]:
    return [
        row for row in catalog.benchmarks
        if row.is_measurement  # estimates (aic tables) never calibrate the roofline
        and catalog.gpus[row.gpu].architecture == architecture
        and (row.table, row.line) not in exclude
        and shape_for_row(row, catalog) is not None
        and measured_metrics(row)
    ]  # fmt: skip


def _residuals(params: np.ndarray, rows: list[BenchmarkRow], catalog: Catalog) -> np.ndarray:
    eff = Efficiency(float(params[0]), float(params[1]), float(params[2]), float(params[3]), "fit")
    out = []
    for row in rows:
        shape = shape_for_row(row, catalog)
        predicted = predict_row(row, shape, eff, catalog)
        for metric, value in measured_metrics(row).items():
            guess = predicted.get(metric)
            out.append(math.log(guess / value) if guess and guess > 0 else 5.0)
    return np.asarray(out)


_CACHE: dict[tuple, CalibrationFit] = {}


def fit_architecture(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> CalibrationFit | None:
    """Least-squares fit of (e_c, e_b, overhead_ms) on the rows of one architecture; None without rows."""
    key = (id(catalog), architecture, exclude)
    if key in _CACHE:
        return _CACHE[key]
    rows = calibration_rows(catalog, architecture, exclude)
    if not rows:
        return None
    start = np.array([PRIOR.compute, PRIOR.bandwidth, 1.0, 5.0])
    result = least_squares(_residuals, start, bounds=(_LOWER, _UPPER), args=(rows, catalog), diff_step=1e-3)
    errors = np.abs(np.exp(result.fun) - 1.0)
    names = tuple(sorted({f"{r.table}:{r.line}" for r in rows}))
    eff = Efficiency(
        compute=round(float(result.x[0]), 4), bandwidth=round(float(result.x[1]), 4),
        overhead_ms=round(float(result.x[2]), 4), allreduce_step_us=round(float(result.x[3]), 3),
        source=(
            f"calibrated on {len(rows)} {architecture} benchmark rows ({len(result.fun)} metrics; "
            f"median error {np.median(errors):.0%}, worst {errors.max():.0%})"
        ),
    )  # fmt: skip
    fit = CalibrationFit(architecture, eff, names, len(result.fun), float(np.median(errors)), float(errors.max()))
    _CACHE[key] = fit
    _CACHE_KEEP.append(catalog)  # keep the catalog alive so its id() is not reused by another object
    return fit


_CACHE_KEEP: list = []


def efficiency_for(catalog: Catalog, architecture: str, exclude: frozenset = frozenset()) -> Efficiency:
    """The calibrated factors for a GPU architecture, borrowed from the best-covered one when it has no rows."""
    own = fit_architecture(catalog, architecture, exclude)
    if own is not None:
        return own.efficiency
    counts = {
        arch: len(calibration_rows(catalog, arch, exclude))
        for arch in sorted({gpu.architecture for gpu in catalog.gpus.values()})
    }
    donor = max(counts, key=lambda a: (counts[a], a))
    if counts[donor] == 0:
        return PRIOR
    borrowed = fit_architecture(catalog, donor, exclude).efficiency
    return Efficiency(
        borrowed.compute, borrowed.bandwidth, borrowed.overhead_ms, borrowed.allreduce_step_us,
        f"no {architecture} rows: {donor} factors used ({borrowed.source})",
    )
