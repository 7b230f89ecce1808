"""Fit the serving-engine classes (planner/perf/engines.py) to aiconfigurator-core's measured serving rows.

Rows: `systems/silicon_sample.csv` of aiconfigurator-core (extra `.[aic]`), aggregated serving, whose model and GPU
the catalog knows, at a precision the planner names, within one node (at most 8 GPUs, no pipeline stages). Each is
a closed-loop benchmark at a fixed concurrency: the roofline is asked at the row's layout, lengths and concurrency.

Per class (engine x GPU generation x dense/MoE) two scales, memory-bound and compute-bound time, are fitted by
least squares on log(model / measured) of TPOT (every row) and TTFT (rows at concurrency <= 4, where a prompt
waits for little but its own prefill; at higher concurrency the benchmark's TTFT holds the queue of a client that
sends requests in waves, which a deployment does not see). TensorRT-LLM on dense models is the reference the
roofline's calibration was fitted to: its scales stay 1.

Validation: leave one model out, and leave one GPU out. Each model's (GPU's) rows are predicted by the scales fitted
to the class's other models (GPUs); a class of one model (GPU) is predicted by its scale 1 reference: nothing to
hold out against. The 80th percentile of |error| over both validations, of throughput, TTFT (rows at concurrency
<= 4, as fitted) and TPOT, is the class's expected error (50% and 90% of throughput beside it).
Prints the table; writes the CSV.

Run:  python benchmarks/calibration/engine_classes.py --out catalogs/engines/classes.csv [--rows-out FILE]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import math
import re
import sys
import time
from collections import defaultdict
from importlib import metadata, resources
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
from planner.perf.tables import instance_memory
from planner.perf.types import Layout

PRECISION = {"fp8": "fp8", "fp4": "fp4", "bf16": "bf16"}
MAX_GPUS = 8
TTFT_CONCURRENCY = 4
COVER = 0.8
MIN_TRAIN_ROWS = 8  # a held-out validation fits a class's three numbers only to at least this many rows
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


def silicon_rows() -> list[dict]:
    path = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    with path.open() as handle:
        return list(csv.DictReader(handle))


def layout_of(row: dict) -> Layout:
    """Attention TP x DP; experts whole on every GPU when the MoE is split by EP at all, else by TP."""
    tp, dp = int(float(row["tp_size"])), max(1, int(float(row["attention_dp_size"] or 1)))
    ep = int(float(row["moe_ep_size"] or 1))
    return Layout(tp, dp, tp * dp if ep > 1 else 1, int(float(row["pp_size"] or 1)))


class Case:
    """One measured serving run and the engine that ran it, ready to ask the roofline: a closed loop at
    `concurrency` (an offline or burst batch of N prompts is asked as a closed loop of N: the same work in flight);
    `measured` holds what the run recorded of ttft_ms, tpot_ms and output tokens/s per GPU."""

    def __init__(self, catalog, *, id: str, engine: str, model: str, gpu: str, precision: str, layout: Layout,
                 isl: int, osl: int, concurrency: int, measured: dict, origin: str):  # fmt: skip
        self.id, self.engine, self.model, self.gpu, self.precision = id, engine, model, gpu, precision
        self.layout, self.isl, self.osl, self.concurrency, self.origin = layout, isl, osl, concurrency, origin
        self.measured = {k: v for k, v in measured.items() if v}
        arch = catalog.models[model]
        self.kind = "moe" if arch.moe is not None else "dense"
        self.architecture = catalog.gpus[gpu].architecture
        self.shape = engine_shape(catalog, arch, catalog.gpus[gpu], layout, precision)
        memory = instance_memory(catalog, model, gpu, layout.tp, precision, isl, osl, layout.dp, layout.ep, layout.pp)
        self.capacity = memory.running_limit(isl, osl) if memory.fits else None

    @classmethod
    def from_silicon(cls, row: dict, catalog) -> Case:
        found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
        concurrency = int(found.group(1)) if found else int(float(row["batch_size"]))
        layout, isl, osl = layout_of(row), int(row["isl"]), int(row["osl"])
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
        tokens = concurrency * osl / ((ttft + (osl - 1) * tpot) / 1e3) / layout.gpus  # Little's law on its closed loop
        return cls(catalog, id=row["id"], engine=row["backend"], model=catalog.resolve("model", row["model_path"]),
                   gpu=catalog.resolve("gpu", row["system"]), precision=PRECISION[row["precision"]], layout=layout,
                   isl=isl, osl=osl, concurrency=concurrency, origin="silicon",
                   measured={"ttft_ms": ttft, "tpot_ms": tpot, "tokens_per_gpu": tokens})  # fmt: skip

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
                             "tpot_ms": case["tpot_ms"] if closed else None, "tokens_per_gpu": tokens})  # fmt: skip

    def errors(self, eff) -> dict[str, float] | None:
        """model / measured - 1 of what the run recorded (ttft, tpot, throughput: output tokens/s per GPU); None
        where the model has no answer."""
        try:
            point = steady_state_curve(self.shape, eff, self.isl, self.osl, [self.concurrency], self.capacity)[0]
        except (SteadyStateError, ValueError, ZeroDivisionError):
            return None
        if not (point.ttft_ms > 0 and point.tpot_ms > 0):
            return None
        model = {"ttft_ms": point.ttft_ms, "tpot_ms": point.tpot_ms,
                 "tokens_per_gpu": point.output_tokens_per_s / self.layout.gpus}  # fmt: skip
        names = {"ttft_ms": "ttft", "tpot_ms": "tpot", "tokens_per_gpu": "throughput"}
        return {names[k]: model[k] / v - 1 for k, v in self.measured.items()}


def usable(case: Case, catalog) -> str | None:
    """Why a case cannot be asked, or None."""
    if case.layout.gpus > MAX_GPUS or case.layout.pp > 1:
        return "beyond one node"
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
    for row in silicon_rows():
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
        why = usable(case, catalog)
        if why:
            skipped[why] += 1
        else:
            out.append(case)
    return out, dict(skipped)


def reference_cases(catalog) -> tuple[list[Case], dict[str, int]]:
    """../shared/reference/benchmarks/serving_amd_and_engines.csv through reference_rows.py (beside this file);
    rows EXCLUDED_REFERENCE_ROWS are left out (their reason beside them)."""
    spec = importlib.util.spec_from_file_location("reference_rows", Path(__file__).resolve().parent / "reference_rows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found, skipped = module.reference_cases(catalog)
    skipped = dict(skipped)
    out = []
    for record in found:
        if record["row_id"] in EXCLUDED_REFERENCE_ROWS:
            skipped[EXCLUDED_REFERENCE_ROWS[record["row_id"]]] = skipped.get(EXCLUDED_REFERENCE_ROWS[record["row_id"]], 0) + 1
            continue
        case = Case.from_reference(record, catalog)
        why = usable(case, catalog)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            out.append(case)
    return out, skipped


def class_efficiency(base, memory_scale: float, compute_scale: float, ttft_overhead_ms: float | None = None):
    probe = EngineClass("trtllm", "", "", memory_scale, compute_scale, ttft_overhead_ms, 0, 0, ExpectedError(0, 0, 0), "fit")
    return scaled(base, probe)


def residuals(group: list[Case], bases: dict, scales) -> np.ndarray:
    out = []
    for case in group:
        errors = case.errors(class_efficiency(bases[case.architecture], *scales))
        if errors is None:
            out.append(3.0)
            continue
        out.append(math.log1p(errors["tpot"] if "tpot" in errors else errors["throughput"]))
        if "ttft" in errors and case.concurrency <= TTFT_CONCURRENCY:
            out.append(math.log1p(errors["ttft"]))
    return np.asarray(out)


def fit(group: list[Case], bases: dict) -> tuple[float, float, float]:
    """Scales within [floor, 20] (the floor keeps the bandwidth factors at most 1: never beyond the hardware; for a
    mixture of experts every read is capped at the peak on its own, so the floor is the slowest read's factor) and
    the per-request overhead within [0, MAX_OVERHEAD_MS]; a robust loss (soft L1 beyond 30%) so that a few odd rows
    (a client's cold start in TTFT) do not carry the class."""
    if group[0].kind == "moe":  # each read capped at the peak (engines.scaled): down to the slowest read's factor
        floor = max(min(min(b.kv_bandwidth, b.bandwidth * b.moe_bandwidth) for b in (bases[c.architecture] for c in group)), 0.05)
    else:
        floor = max(max(getattr(bases[c.architecture], f) for c in group for f in MEMORY_FACTORS), 0.05)
    start = [max(1.0, floor), 1.0, max(bases[c.architecture].ttft_overhead_ms for c in group)]
    start[2] = min(start[2], MAX_OVERHEAD_MS)
    result = least_squares(lambda s: residuals(group, bases, s), start, bounds=([floor, 0.2, 0.0], [20.0, 20.0, MAX_OVERHEAD_MS]),
                           diff_step=1e-3, x_scale=[1.0, 1.0, 50.0], loss="soft_l1", f_scale=0.3)  # fmt: skip
    return float(result.x[0]), float(result.x[1]), float(result.x[2])


def held_out(group: list[Case], by: str, reference: bool, bases: dict, rows_out: list, label: str) -> dict[str, list]:
    """model / measured - 1 of each row predicted by the scales fitted without its model (by='model') or its GPU
    (by='gpu'); a group left with fewer than MIN_TRAIN_ROWS rows to fit on keeps the reference scale 1 (three
    numbers fitted to one odd row, GB200's single TensorRT-LLM MoE row at +500%, predicted B200's 292 rows 64% low)."""
    held = defaultdict(list)
    for value in sorted({getattr(c, by) for c in group}):
        train = [c for c in group if getattr(c, by) != value]
        scales = (1.0, 1.0, None) if reference or len(train) < MIN_TRAIN_ROWS else fit(train, bases)
        for case in (c for c in group if getattr(c, by) == value):
            errors = case.errors(class_efficiency(bases[case.architecture], *scales))
            if errors is None:
                continue
            for metric, error in errors.items():
                if metric != "ttft" or case.concurrency <= TTFT_CONCURRENCY:  # TTFT where the fit used it
                    held[metric].append(error)
            rows_out.append({"id": case.id, "class": label, "held_out": by, "model": case.model, "gpu": case.gpu, **errors})
    return held


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.abs(values), q)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rows-out", help="write the held-out error of every row here")
    args = parser.parse_args()
    version = aic_version()
    if version is None:
        return 2
    started = time.time()
    catalog = load_catalog()
    found, skipped = cases(catalog)
    others, other_skipped = reference_cases(catalog)
    # the reference file fits the generations the package has no rows of (AMD); its NVIDIA rows validate
    fitted_here = {c.architecture for c in found}
    validation = [c for c in others if c.architecture in fitted_here]
    found += [c for c in others if c.architecture not in fitted_here]
    bases = {a: efficiency_for(catalog, a) for a in {c.architecture for c in found + validation}}
    groups = defaultdict(list)
    for case in found:
        groups[(case.engine, case.architecture, case.kind)].append(case)
    print(f"{len(found)} rows: aiconfigurator-core {version} silicon_sample.csv (not used: {skipped}) and "
          f"serving_amd_and_engines.csv for {sorted({c.architecture for c in others} - fitted_here)} (not used: {other_skipped})")
    records, held_rows, by_what = [], [], {}
    header = f"{'class':28} {'rows':>5} {'models':>6}  scales mem/comp/ms   | tput med signed: before -> in sample | held-out p80 tput/TTFT/TPOT"
    print(header)
    for key in sorted(groups):
        group = groups[key]
        models = sorted({c.model for c in group})
        reference = (key[0], key[2]) == REFERENCE
        scales = (1.0, 1.0, None) if reference else fit(group, bases)
        before = [e["throughput"] for c in group if (e := c.errors(bases[c.architecture])) and "throughput" in e]
        after = [e["throughput"] for c in group
                 if (e := c.errors(class_efficiency(bases[c.architecture], *scales))) and "throughput" in e]  # fmt: skip
        held = defaultdict(list)
        for by in ("model", "gpu"):  # leave one model out, then one GPU out: both validations together
            for metric, values in held_out(group, by, reference, bases, held_rows, "/".join(key)).items():
                held[metric] += values
                by_what[(key, by, metric)] = values
        expected = ExpectedError(*(round(quantile(held[m], COVER), 3) for m in ("throughput", "ttft", "tpot")))
        ids = sorted(c.id for c in group)
        origin = group[0].origin
        where = (f"aiconfigurator-core {version} systems/silicon_sample.csv" if origin == "silicon" else
                 "serving_amd_and_engines.csv (public runs, sources in SOURCES_amd_engines.md of the planner's shared reference)")
        records.append({
            "engine": key[0], "architecture": key[1], "kind": key[2], "memory_scale": f"{scales[0]:.4g}",
            "compute_scale": f"{scales[1]:.4g}", "ttft_overhead_ms": "" if scales[2] is None else f"{scales[2]:.4g}", "rows": len(group), "models": len(models),
            "error_throughput": expected.throughput, "error_ttft": expected.ttft, "error_tpot": expected.tpot,
            "error_throughput_p50": round(quantile(held["throughput"], 0.5), 3),
            "error_throughput_p90": round(quantile(held["throughput"], 0.9), 3),
            "source": (f"{where}: {len(group)} measured rows of {', '.join(models)} ({ids[0]} .. {ids[-1]})"
                       + ("; TensorRT-LLM dense is the reference (scales 1)" if reference else "")),
        })  # fmt: skip
        print(f"{'/'.join(key):28} {len(group):5} {len(models):6}  {scales[0]:6.3g} {scales[1]:6.3g} {scales[2] or 0:6.0f} | "
              f"{quantile(before, 0.5):5.0%} {float(np.median(before)) if before else float('nan'):+6.0%} -> "
              f"{quantile(after, 0.5):4.0%} {float(np.median(after)) if after else float('nan'):+5.0%} | "
              f"{expected.throughput:5.0%} {expected.ttft:5.0%} {expected.tpot:5.0%}")  # fmt: skip
    for record, column in itertools.product(records, ("error_ttft", "error_tpot")):
        if math.isnan(record[column]):  # nothing of it held out (no latencies measured): the widest of its kind
            record[column] = max(r[column] for r in records if r["kind"] == record["kind"] and not math.isnan(r[column]))
    with open(args.out, "w", newline="") as handle:

        writer = csv.DictWriter(handle, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    if args.rows_out:
        with open(args.rows_out, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(held_rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(held_rows)
    print("held out, output tokens/s per GPU: median |error|, signed median, p90 |error|")
    for kind in ("dense", "moe"):
        for by in ("model", "gpu"):
            values = [v for (key, b, m), vs in by_what.items() if key[2] == kind and b == by and m == "throughput" for v in vs]
            print(f"  {kind:5} leave one {by:5} out: {len(values):5} rows  {quantile(values, 0.5):5.0%} "
                  f"{float(np.median(values)):+5.0%} {quantile(values, 0.9):5.0%}")  # fmt: skip
    print(f"independent validation: {len(validation)} NVIDIA rows of serving_amd_and_engines.csv (not fitted), "
          "output tokens/s per GPU, before -> with the shipped classes (median |error|, signed median)")
    from planner.perf.engines import engine_class as shipped_class

    by_class = defaultdict(list)
    for case in validation:
        by_class[(case.engine, case.architecture, case.kind)].append(case)
    for key, group in sorted(by_class.items()):
        before = [e["throughput"] for c in group if (e := c.errors(bases[c.architecture])) and "throughput" in e]
        after = [e["throughput"] for c in group
                 if (e := c.errors(scaled(bases[c.architecture], shipped_class(*key)))) and "throughput" in e]  # fmt: skip
        if before and after:
            print(f"  {'/'.join(key):24} {len(group):4} rows  {quantile(before, 0.5):5.0%} {float(np.median(before)):+5.0%}"
                  f"  ->  {quantile(after, 0.5):5.0%} {float(np.median(after)):+5.0%}")  # fmt: skip
    print(f"wrote {args.out} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
