"""Accuracy and invariants of the performance model, every source side by side.

1. Invariant sweep (planner/perf/checks.py): every catalog model x GPU x TP x precision x 9 length pairs over the
   concurrency ladder to the KV capacity, at P50/P95/P99; Little's law, monotony, percentile order, physics
   bounds, TP scaling. Prints the points checked and the violations (must be 0).
2. Kernel calibration: per GPU generation, the error of the fitted step times on the timed iterations.
3. Accuracy on the shipped measured rows (TP and precision stated), leave-one-out: each row is removed from the
   catalog (so neither the engine-overhead fit nor the anchoring sees it) and predicted by
   - default: the planner's default source (the roofline anchored on the remaining rows);
   - roofline: the calibrated roofline alone (--perf-source model);
   - aic / auto: aiconfigurator-core's estimate and --perf-source auto, when the extra is installed.
   Max-throughput rows are compared with the best throughput the source reaches.
4. Serving engines (other scripts, extra `.[aic]`): benchmarks/calibration/engine_classes.py fits the engine classes
   and their release lines and writes their held-out bands (leave one model, GPU, publisher out) to
   catalogs/engines/classes.csv (`--engines` here prints its validation table; `--open-loop` the open loop's
   capacity invariant);
   benchmarks/calibration/scale_out.py the network between link domains (catalogs/engines/scale_out.csv);
   benchmarks/silicon_accuracy.py compares the model, or aiconfigurator (--source aic), with every measured row.
Run:  python benchmarks/perf_accuracy.py [--markdown] [--no-sweep] [--engines] [--open-loop]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from planner.catalog import load_catalog
from planner.metrics import statistic_percentile
from planner.perf import PerfQuery, PerfResult, estimate
from planner.perf.calibration import calibration_rows, efficiency_for, fit_kernels, measured_metrics, predict_row, shape_for_row
from planner.perf.checks import invariant_sweep

LABEL = {"request_throughput_rps": "throughput", "output_tokens_per_s": "throughput", "ttft_ms": "TTFT", "tpot_ms": "TPOT",
         "itl_ms": "ITL"}  # fmt: skip
ARCHITECTURES = ("hopper", "blackwell", "ampere", "ada")
SOURCES = {
    "default": ("measured", "interpolated", "modeled"),
    "roofline": ("modeled",),
    "aic": ("aic",),
    "auto": ("measured", "interpolated", "modeled", "aic"),
}


def without(catalog, row):
    """The catalog less one row (and so a fresh calibration and anchoring)."""
    return catalog.model_copy(update={"benchmarks": tuple(r for r in catalog.benchmarks if r is not row)})


def predicted(row, catalog, sources) -> dict[str, float]:
    """What a source says for the metrics the row recorded (per instance, or per node for a node row)."""
    if row.osl is None:  # a static batch (seed case C3): the roofline's prefill and decode step
        eff = efficiency_for(catalog, catalog.gpus[row.gpu].architecture)
        return predict_row(row, shape_for_row(row, catalog), eff, catalog) if sources != ("aic",) else {}
    query = PerfQuery(row.model, row.gpu, row.isl, row.osl, tp=row.tp, precision=row.precision, concurrency=row.concurrency)
    answer = estimate(query, catalog, sources=sources, percentile=statistic_percentile(row.statistic))  # at its statistic
    if not isinstance(answer, PerfResult):
        return {}
    return {m: getattr(answer, m) for m in measured_metrics(row) if getattr(answer, m) is not None}


def accuracy(catalog, source: str) -> list[tuple[str, str, float]]:
    errors = []
    rows = [r for a in ARCHITECTURES for r in calibration_rows(catalog, a)]
    for row in rows:
        guess = predicted(row, without(catalog, row), SOURCES[source])
        for metric, value in measured_metrics(row).items():
            if metric in guess:
                errors.append((row.source, LABEL[metric], guess[metric] / value - 1))
    return errors


def summarize(errors, layer: str) -> list[tuple]:
    grouped = defaultdict(list)
    for source, metric, error in errors:
        grouped[(source, metric)].append(abs(error))
        grouped[("all sources", metric)].append(abs(error))
    return [
        (layer, source, metric, len(values), statistics.median(values), max(values))
        for (source, metric), values in sorted(grouped.items(), key=lambda kv: (kv[0][0] == "all sources", kv[0]))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables (for docs/perf-model.md)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the invariant sweep")
    parser.add_argument("--engines", action="store_true",
                        help="also refit the engine classes and print their held-out validation (extra .[aic]; minutes)")
    parser.add_argument("--open-loop", action="store_true",
                        help="also check that the open loop serves 90%% of the closed loop's maximum (minutes)")
    args = parser.parse_args()
    started = time.perf_counter()
    catalog = load_catalog()
    if not args.no_sweep:
        sweep_started = time.perf_counter()
        report = invariant_sweep(catalog)
        print(f"invariant sweep: {report.summary()} ({time.perf_counter() - sweep_started:.1f} s)")
        for kind, examples in sorted(report.violations.items()):
            print(f"  {kind}: {examples[:3]}")
    print("\nkernel calibration (fitted step times against the timed iterations):")
    for architecture in ARCHITECTURES:
        fit = fit_kernels(catalog, architecture)
        if fit:
            print(f"  {architecture:10} {fit.iterations:5d} iterations, median error {fit.median_abs_rel_error:.1%}, "
                  f"worst {fit.worst_abs_rel_error:.0%} ({', '.join(fit.tables)})")  # fmt: skip
    from planner.perf import aic

    layers = ["default", "roofline"] + (["aic", "auto"] if aic.available() else [])
    rows = [r for layer in layers for r in summarize(accuracy(catalog, layer), f"{layer} (leave-one-out)")]
    print()
    if args.markdown:
        print("| source | rows from | metric | points | median error | worst error |")
        print("|---|---|---|---|---|---|")
        for layer, source, metric, n, median, worst in rows:
            print(f"| {layer} | {source} | {metric} | {n} | {median:.1%} | {worst:.1%} |")
    else:
        print(f"{'source':26} {'rows from':62} {'metric':10} {'n':>3} {'median':>8} {'worst':>8}")
        for layer, source, metric, n, median, worst in rows:
            print(f"{layer:26} {source[:62]:62} {metric:10} {n:3d} {median:8.1%} {worst:8.1%}")
    if not aic.available():
        print("\n(aic and auto not shown: pip install '.[aic]')")
    if args.open_loop:
        from planner.perf.checks import open_loop_sweep

        loop = open_loop_sweep(catalog, ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b", "deepseek-r1", "llama-3.1-8b",
                                         "llama-3.1-70b"), ("H200-SXM-141GB", "B200-SXM-180GB"))  # fmt: skip
        print(f"\nopen loop at 90% of the closed loop's maximum: {loop.summary()}")
    if args.engines:
        validation = _engine_validation()
        print("\nengine classes, held out by model, GPU and publisher (benchmarks/calibration/engine_classes.py):")
        print(validation)
    print(f"\n({time.perf_counter() - started:.1f} s)")


def _engine_validation() -> str:
    """The engine classes refitted as shipped (to a scratch file) and their held-out validation table."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    script = Path(__file__).resolve().parent / "calibration" / "engine_classes.py"
    with tempfile.TemporaryDirectory() as scratch:
        run = subprocess.run([sys.executable, str(script), "--out", f"{scratch}/classes.csv"], capture_output=True, text=True)
    if run.returncode != 0:
        return run.stderr.strip() or run.stdout.strip()
    return "\n".join(line for line in run.stdout.splitlines() if line.startswith("|"))


if __name__ == "__main__":
    main()
