"""Accuracy of every perf source against the shipped measured benchmark rows, side by side.

- roofline: for every row it can reproduce (architecture known, TP and precision stated), the calibration is
  refitted without that row and the row is predicted (leave-one-out);
- interpolation: every measured point with measured neighbours on the same engine, from them (leave-one-out);
- aic (when the extra planner[aic] is installed): NVIDIA's operator-level estimate for the row's model, GPU, TP,
  precision, ISL/OSL, at its concurrency (max-throughput rows: the best throughput over the batch ladder).
Prints median and worst relative error per source and metric. Run:  python benchmarks/perf_accuracy.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from planner.catalog import load_catalog
from planner.perf.calibration import calibration_rows, efficiency_for, measured_metrics, predict_row, shape_for_row
from planner.perf.interpolate import over_concurrency
from planner.perf.tables import group_by_engine

METRICS = ("request_throughput_rps", "output_tokens_per_s", "ttft_ms", "itl_ms")
LABEL = {"request_throughput_rps": "throughput", "output_tokens_per_s": "throughput", "ttft_ms": "TTFT", "itl_ms": "ITL"}


def roofline_errors(catalog) -> list[tuple[str, str, float]]:
    errors = []
    architectures = sorted({gpu.architecture for gpu in catalog.gpus.values()})
    for arch in architectures:
        for row in calibration_rows(catalog, arch):
            eff = efficiency_for(catalog, arch, exclude=frozenset({(row.table, row.line)}))
            predicted = predict_row(row, shape_for_row(row, catalog), eff, catalog)
            for metric, value in measured_metrics(row).items():
                if metric in predicted:
                    errors.append((row.source, LABEL[metric], predicted[metric] / value - 1))
    return errors


def table_errors(catalog) -> list[tuple[str, str, float]]:
    errors = []
    for group in group_by_engine([r for r in catalog.benchmarks if r.is_measurement]):
        series = sorted((r for r in group if r.concurrency is not None and r.isl is not None), key=lambda r: (r.isl, r.osl or 0, r.concurrency))
        for row in series:
            neighbours = [r for r in series if (r.isl, r.osl) == (row.isl, row.osl) and r is not row]
            point = over_concurrency(neighbours, row.concurrency, catalog)
            if point is None:
                continue
            for metric, value in measured_metrics(row).items():
                guess = getattr(point, metric)
                if guess is not None:
                    errors.append((row.source, LABEL[metric], guess / value - 1))
    return errors


def aic_errors(catalog) -> list[tuple[str, str, float]]:
    """The aic estimate of every measured row it supports (TP, precision, ISL and OSL stated)."""
    from planner.perf import PerfQuery, aic

    if not aic.available():
        return []
    errors = []
    for row in catalog.benchmarks:
        if not row.is_measurement or None in (row.tp, row.precision, row.isl, row.osl):
            continue
        if aic.unsupported_reason(row.model, row.gpu, row.precision) is not None:
            continue
        query = PerfQuery(model=row.model, gpu=row.gpu, isl=row.isl, osl=row.osl, concurrency=row.concurrency)
        points = aic.aic_points(query, catalog.gpus[row.gpu].memory_gb, row.tp, row.precision)
        if isinstance(points, str) or not points:
            continue
        point = max(points, key=lambda p: p.output_tokens_per_s or 0)
        per_instance = row.gpus // row.tp if row.per == "node" else 1  # rows per node hold several instances
        for metric, value in measured_metrics(row).items():
            guess = getattr(point, metric)
            if guess is None:
                continue
            if metric in ("request_throughput_rps", "output_tokens_per_s"):
                guess *= per_instance
            errors.append((row.source, LABEL[metric], guess / value - 1))
    return errors


def summarize(errors, layer: str) -> list[tuple]:
    grouped = defaultdict(list)
    for source, metric, error in errors:
        grouped[(source, metric)].append(abs(error))
        grouped[("all sources", metric)].append(abs(error))
    rows = []
    for (source, metric), values in sorted(grouped.items(), key=lambda kv: (kv[0][0] == "all sources", kv[0])):
        rows.append((layer, source, metric, len(values), statistics.median(values), max(values)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for docs/perf-model.md)")
    args = parser.parse_args()
    started = time.perf_counter()
    catalog = load_catalog()
    rows = (
        summarize(roofline_errors(catalog), "roofline (LOO calibration)")
        + summarize(table_errors(catalog), "interpolation (LOO)")
        + summarize(aic_errors(catalog), "aic (aiconfigurator-core)")
    )
    seconds = time.perf_counter() - started
    if args.markdown:
        print("| layer | source | metric | points | median error | worst error |")
        print("|---|---|---|---|---|---|")
        for layer, source, metric, n, median, worst in rows:
            print(f"| {layer} | {source} | {metric} | {n} | {median:.1%} | {worst:.1%} |")
    else:
        print(f"{'layer':28} {'source':62} {'metric':10} {'n':>3} {'median':>8} {'worst':>8}")
        for layer, source, metric, n, median, worst in rows:
            print(f"{layer:28} {source[:62]:62} {metric:10} {n:3d} {median:8.1%} {worst:8.1%}")
    print(f"\n({seconds:.1f} s; targets: median <= 15% throughput, <= 20% TTFT/ITL)")


if __name__ == "__main__":
    main()
