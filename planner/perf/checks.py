"""Invariants every performance-model answer must satisfy, checked over a grid (tests and benchmarks/perf_accuracy.py).

Independent of how the model computes: Little's law (X x E2E = concurrency), throughput and ITL never falling as
concurrency rises, tail latencies ordered (P99 >= P95 >= P50), no answer faster than the hardware allows (every
weight read once per decode step at full bandwidth; every prompt FLOP at the full tensor rate), and a 70B model's
batch-1 decode getting faster as TP grows from 1 to 8.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from planner.catalog import Catalog, compute_precision
from planner.metrics import LABELS, LATENCY_METRICS
from planner.perf import PerfQuery, is_modeled, model_precisions, modeled_points
from planner.perf.roofline import LM_HEAD_BYTES, model_shape, supports_roofline, weight_format
from planner.perf.types import Layout, PerfResult

LENGTHS = ((128, 128), (512, 128), (2048, 128), (128, 2048), (1000, 1000), (4096, 512), (5000, 500), (8192, 512), (20000, 2000))
TPS = (1, 2, 4, 8)
LITTLE_TOLERANCE = 0.02
DROP_TOLERANCE = 0.05


@dataclass
class SweepReport:
    points: int = 0
    curves: int = 0
    violations: dict = field(default_factory=lambda: defaultdict(list))

    @property
    def total_violations(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def summary(self) -> str:
        counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(self.violations.items())) or "none"
        return f"{self.points} points on {self.curves} curves checked; violations: {self.total_violations} ({counts})"


def lower_bounds_ms(catalog: Catalog, point: PerfResult) -> tuple[float, float]:
    """(ITL, TTFT) no engine can beat: the layer weights and LM head read once at full bandwidth per decode step;
    the prompt's linear FLOPs at the full tensor rate."""
    arch = model_shape(catalog.models[point.model])
    stored = weight_format(catalog.models[point.model], point.precision)
    gpu = catalog.gpus[point.gpu]
    tp = point.gpus_per_instance
    weights = (arch.layers * (arch.attention_params * stored.layer + arch.mlp_params_read(1.0) * stored.expert)
               + arch.lm_head_params * LM_HEAD_BYTES)  # fmt: skip
    itl = weights / tp / (gpu.mem_bw_tb_per_s * 1e12) * 1e3
    rate = gpu.tflops_by_precision[compute_precision(point.precision)]
    ttft = 2 * arch.active_layer_params * point.isl / (tp * rate * 1e12) * 1e3
    return itl, ttft


def check_curve(catalog: Catalog, points: list[PerfResult], report: SweepReport, label: str, means: bool = True) -> None:
    """Little's law, physics bounds and monotony over one curve (points in rising concurrency). On a curve of
    percentiles (`means` False) Little's law does not apply, and the ITL percentile may fall where the batch grows
    enough to cut each prompt into one more chunk (the longest gap then carries less prompt work): there only TPOT
    must not fall."""
    report.curves += 1
    previous = None
    for point in points:
        report.points += 1
        tag = f"{label} c{point.concurrency} ({point.provenance})"
        if means and point.e2e_ms and point.request_throughput_rps and is_modeled(point.provenance):
            little_ratio = point.request_throughput_rps * point.e2e_ms / 1e3 / point.concurrency
            if abs(little_ratio - 1) > LITTLE_TOLERANCE:
                report.violations["little"].append(f"{tag}: X x E2E / C = {little_ratio:.4f}")
        gap_bound, ttft_bound = lower_bounds_ms(catalog, point)
        for gap in ("tpot_ms", "itl_ms"):
            value = getattr(point, gap)
            if value is not None and value < gap_bound * 0.999:
                report.violations["faster_than_bandwidth"].append(f"{tag}: {LABELS[gap]} {value:.3f} < {gap_bound:.3f} ms")
        if point.ttft_ms is not None and point.ttft_ms < ttft_bound * 0.999:
            report.violations["faster_than_flops"].append(f"{tag}: TTFT {point.ttft_ms:.3f} < {ttft_bound:.3f} ms")
        if previous is not None:
            if point.request_throughput_rps < previous.request_throughput_rps * (1 - DROP_TOLERANCE):
                report.violations["throughput_drop"].append(
                    f"{tag}: {previous.request_throughput_rps:.4g} -> {point.request_throughput_rps:.4g} rps")
            for gap in ("tpot_ms", "itl_ms") if means else ("tpot_ms",):
                if getattr(point, gap) < getattr(previous, gap) * (1 - DROP_TOLERANCE):
                    report.violations["itl_drop"].append(
                        f"{tag}: {LABELS[gap]} {getattr(previous, gap):.4g} -> {getattr(point, gap):.4g} ms")
        previous = point


def invariant_sweep(catalog: Catalog, models: tuple[str, ...] | None = None, gpus: tuple[str, ...] | None = None,
                    lengths=LENGTHS, percentiles=(50.0, 95.0, 99.0)) -> SweepReport:  # fmt: skip
    """Every model x GPU x TP x precision x lengths of the catalog the roofline can model, over the concurrency
    ladder to the KV capacity, anchored on the rows as plans use it; plus the percentile order and TP scaling."""
    report = SweepReport()
    models = models or tuple(m for m in sorted(catalog.models) if supports_roofline(catalog.models[m]))
    gpus = gpus or tuple(sorted(catalog.gpus))
    for model in models:
        for gpu in gpus:
            for precision in model_precisions(catalog, gpu, model):
                batch_one = {}
                for tp in TPS:
                    for isl, osl in lengths:
                        query = PerfQuery(model, gpu, isl, osl)
                        means = modeled_points(query, catalog, tp, precision)
                        curves = {p: modeled_points(query, catalog, tp, precision, p) for p in percentiles}
                        if isinstance(means, str) or any(isinstance(c, str) for c in curves.values()):
                            continue
                        label = f"{model} {gpu} TP{tp} {precision} {isl}/{osl}"
                        check_curve(catalog, means, report, label)  # Little's law holds for means
                        for p, curve in curves.items():
                            check_curve(catalog, curve, report, f"{label} P{p:g}", means=False)
                        _check_percentiles(curves, report, label)
                        if (isl, osl) == (512, 128):
                            batch_one[tp] = means[0].tpot_ms
                # TP must cut the batch-1 ITL where the weights one token reads are large (>= 60 B active
                # parameters): their read splits over the GPUs. A mixture of experts with few active parameters
                # (gpt-oss-120b: 5.1 B) reads too little for that to outweigh the added all-reduces.
                arch = catalog.models[model]
                active_b = arch.moe.active_params_b if arch.moe else arch.params_b
                if active_b >= 60 and len(batch_one) > 1:
                    itls = [batch_one[tp] for tp in sorted(batch_one)]
                    if any(b >= a for a, b in zip(itls, itls[1:])):
                        report.violations["tp_not_helping"].append(f"{model} {gpu} {precision}: batch-1 ITL by TP {itls}")
    return report


LAYOUTS = (Layout(8), Layout(1, 8, 8), Layout(2, 4, 8), Layout(8, 1, 8), Layout(4, pp=2), Layout(1, 16, 16))  # DEP16: two boards
LAYOUT_LENGTHS = ((512, 128), (2048, 512), (8192, 1024))


def layout_engine_sweep(catalog: Catalog, models: tuple[str, ...] | None = None, gpus: tuple[str, ...] | None = None,
                        lengths=LAYOUT_LENGTHS, percentiles=(95.0,)) -> SweepReport:  # fmt: skip
    """Every serving engine x layout beyond TP (attention DP with EP, TP with EP, pipeline stages; EP layouts for
    mixtures of experts only) x precision x lengths, for the models and GPUs given (default: every one the
    roofline models): the same checks as `invariant_sweep` at the mean and at each percentile."""
    from planner.perf.engines import ENGINES

    report = SweepReport()
    models = models or tuple(m for m in sorted(catalog.models) if supports_roofline(catalog.models[m]))
    gpus = gpus or tuple(sorted(catalog.gpus))
    for model, gpu, engine in itertools.product(models, gpus, ENGINES):
        layouts = [layout for layout in LAYOUTS if layout.ep == 1 or catalog.models[model].moe is not None]
        for precision, layout, (isl, osl) in itertools.product(model_precisions(catalog, gpu, model), layouts, lengths):
            query = PerfQuery(model, gpu, isl, osl, engine=engine)
            means = modeled_points(query, catalog, layout.tp, precision, layout=layout)
            curves = {p: modeled_points(query, catalog, layout.tp, precision, p, layout=layout) for p in percentiles}
            if isinstance(means, str) or any(isinstance(c, str) for c in curves.values()):
                continue
            label = f"{model} {gpu} {engine} {layout.label} {precision} {isl}/{osl}"
            check_curve(catalog, means, report, label)
            for p, curve in curves.items():
                check_curve(catalog, curve, report, f"{label} P{p:g}", means=False)
            _check_percentiles(curves, report, label)
    return report


def _check_percentiles(curves: dict, report: SweepReport, label: str) -> None:
    order = sorted(curves)
    for low, high in zip(order, order[1:]):
        for a, b in zip(curves[low], curves[high]):
            for metric in LATENCY_METRICS:
                if getattr(b, metric) < getattr(a, metric) * (1 - 1e-9):
                    report.violations["percentile_order"].append(
                        f"{label} c{a.concurrency}: {LABELS[metric]} P{high:g} {getattr(b, metric):.4g} below "
                        f"P{low:g} {getattr(a, metric):.4g}"
                    )


OPEN_LOOP_LOAD = 0.9  # the share of the closed loop's highest throughput the open loop must serve
OPEN_LOOP_LAYOUTS = (Layout(1), Layout(2), Layout(4), Layout(8), Layout(1, 8, 8), Layout(4, pp=2))
OPEN_LOOP_LENGTHS = ((512, 128), (1000, 1000), (2000, 200), (4000, 500), (1000, 8000))
LATENCY_TOLERANCE = 0.02  # the open loop's mean latencies may sit this much below the closed loop's (model error)


def _closed_at(curve: list[PerfResult], throughput: float, metric: str, at) -> float | None:
    """The closed loop's mean `metric` at `throughput`: the two concurrencies of the curve that surround it,
    narrowed by bisection to neighbours (`at(c)`: the closed loop's point at concurrency c), then linear between
    them (None beyond the curve)."""
    ordered = sorted(curve, key=lambda p: p.request_throughput_rps)
    for low, high in zip(ordered, ordered[1:]):
        if low.request_throughput_rps <= throughput <= high.request_throughput_rps:
            while high.concurrency - low.concurrency > 1:
                middle = at((low.concurrency + high.concurrency) // 2)
                if middle is None:
                    break
                low, high = (middle, high) if middle.request_throughput_rps <= throughput else (low, middle)
            span = high.request_throughput_rps - low.request_throughput_rps
            share = (throughput - low.request_throughput_rps) / span if span > 0 else 0.0
            return getattr(low, metric) + share * (getattr(high, metric) - getattr(low, metric))
    return None


def open_loop_sweep(catalog: Catalog, models: tuple[str, ...] | None = None, gpus: tuple[str, ...] | None = None,
                    layouts=OPEN_LOOP_LAYOUTS, lengths=OPEN_LOOP_LENGTHS, engines: tuple[str, ...] | None = None,
                    load: float = OPEN_LOOP_LOAD) -> SweepReport:  # fmt: skip
    """The open loop (Poisson arrivals, what a plan sizes with) serves what the closed loop serves: for every
    engine x layout x precision x lengths that fits, the open loop answers at `load` of the closed loop's highest
    throughput when no limit is given, and its mean TTFT, TPOT and E2E there are no lower than the closed loop's
    at the same throughput (random arrivals only add waiting). Violations: `open_loop_refused`,
    `open_loop_faster`."""
    from planner.perf.engines import ENGINES

    report = SweepReport()
    models = models or tuple(m for m in sorted(catalog.models) if supports_roofline(catalog.models[m]))
    gpus = gpus or tuple(sorted(catalog.gpus))
    for model, gpu, engine in itertools.product(models, gpus, engines or ENGINES):
        moe = catalog.models[model].moe is not None
        for precision, layout, (isl, osl) in itertools.product(model_precisions(catalog, gpu, model), layouts, lengths):
            if layout.ep > 1 and not moe:
                continue
            query = PerfQuery(model, gpu, isl, osl, engine=engine)
            closed = modeled_points(query, catalog, layout.tp, precision, layout=layout)
            if isinstance(closed, str):
                continue
            report.curves += 1
            top = max(p.request_throughput_rps for p in closed)
            rate = load * top
            label = f"{model} {gpu} {engine} {layout.label} {precision} {isl}/{osl} at {rate:.4g} rps"
            opened = modeled_points(dataclasses.replace(query, rate_rps=rate), catalog, layout.tp, precision,
                                    layout=layout)  # fmt: skip
            report.points += 1
            if isinstance(opened, str) or not opened:
                report.violations["open_loop_refused"].append(f"{label} ({load:.0%} of {top:.4g}): {opened}")
                continue
            def at(concurrency, query=query, layout=layout, precision=precision):
                point = modeled_points(dataclasses.replace(query, concurrency=concurrency), catalog, layout.tp,
                                       precision, layout=layout)  # fmt: skip
                return None if isinstance(point, str) or not point else point[0]

            for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
                reference = _closed_at(closed, opened[0].request_throughput_rps, metric, at)
                value = getattr(opened[0], metric)
                if reference is not None and value < reference * (1 - LATENCY_TOLERANCE):
                    report.violations["open_loop_faster"].append(
                        f"{label}: {LABELS[metric]} {value:.4g} ms below the closed loop's {reference:.4g} ms")
    return report
