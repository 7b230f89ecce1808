"""Fit the scale-out network that engines spanning several link domains cross (planner/perf/engines.py ScaleOut).

Rows: aiconfigurator-core's measured serving rows (`systems/silicon_sample.csv`, extra `.[aic]`, aggregated serving)
whose engine spans more GPUs than one link domain joins (attention TP or expert parallelism over 16-64 GPUs of
8-GPU boards: SGLang and TensorRT-LLM wide expert parallelism of DeepSeek-V3/R1 on H200, B200 and B300), no pipeline
stages, model and GPU in the catalog. Each is asked of the roofline at its engine's class (fitted within one node,
engine_classes.py), layout, lengths and concurrency, as a closed loop.

Two numbers for every engine and generation: the share of the NIC's bandwidth a collective reaches across domains
(`efficiency`, per GPU and direction of the catalog's `scale_out_gb_per_s`) and the latency each crossing collective
waits (`latency_us`: per all-to-all phase, per ring). Robust least squares (soft L1 beyond 30%) on log(model /
measured) of TPOT, as the classes.

Validation: leave one GPU out, one engine out, one model out (refit without the group, predict it). The 80th
percentile of |error| over the three is the expected error of an answer whose engine spans domains (the wider of it
and its class's band). Prints the table; writes the CSV.

Run:  python benchmarks/calibration/scale_out.py --out catalogs/engines/scale_out.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from planner.catalog import load_catalog
from planner.errors import PlannerInputError
from planner.perf.engines import engine_efficiency

COVER = 0.8
BOUNDS = ([0.02, 0.0], [1.0, 2000.0])  # efficiency (share of the NIC), latency (us)


def _classes_module():
    spec = importlib.util.spec_from_file_location("engine_classes", Path(__file__).resolve().parent / "engine_classes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(catalog, module) -> tuple[list, dict]:
    """The measured rows whose engine spans link domains, ready to ask."""
    out, skipped = [], {}
    for row in module.silicon_rows():
        if row["mode"] != "agg" or row["precision"] not in module.PRECISION:
            continue
        try:
            case = module.Case.from_silicon(row, catalog)
        except PlannerInputError:
            continue
        if not case.shape.crosses_domain:
            continue
        why = ("pipeline stages" if case.layout.pp > 1
               else "precision not on the GPU" if case.precision not in catalog.gpus[case.gpu].precisions
               else "does not fit" if not case.capacity
               else "no TPOT measured" if "tpot_ms" not in case.measured else None)  # fmt: skip
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            out.append(case)
    return out, skipped


def efficiency(catalog, case, values):
    eff = engine_efficiency(catalog, case.model, case.gpu, case.engine)
    return dataclasses.replace(eff, scale_out=values[0], scale_out_latency_us=values[1])


def residuals(catalog, group, values) -> np.ndarray:
    out = []
    for case in group:
        errors = case.errors(efficiency(catalog, case, values))
        out.append(3.0 if errors is None else math.log1p(errors["tpot"]))
    return np.asarray(out)


def fit(catalog, group) -> tuple[float, float]:
    result = least_squares(lambda v: residuals(catalog, group, v), [0.5, 20.0], bounds=BOUNDS, diff_step=1e-3,
                           x_scale=[0.3, 50.0], loss="soft_l1", f_scale=0.3)  # fmt: skip
    return float(result.x[0]), float(result.x[1])


def throughput_errors(catalog, group, values) -> list[float]:
    return [e["throughput"] for c in group if (e := c.errors(efficiency(catalog, c, values)))]


def summary(errors: list[float]) -> str:
    if not errors:
        return "-"
    magnitudes = np.abs(errors)
    return f"{np.median(magnitudes):5.0%} {float(np.median(errors)):+5.0%} {np.quantile(magnitudes, 0.9):5.0%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    module = _classes_module()
    version = module.aic_version()
    if version is None:
        return 2
    catalog = load_catalog()
    found, skipped = cases(catalog, module)
    print(f"{len(found)} measured rows span link domains (aiconfigurator-core {version} silicon_sample.csv; "
          f"not used: {skipped})")
    values = fit(catalog, found)
    nvlink = [e["throughput"] for c in found if (e := c.errors(dataclasses.replace(
        engine_efficiency(catalog, c.model, c.gpu, c.engine), scale_out=1e6, scale_out_latency_us=0.0)))]  # fmt: skip
    print(f"fit: {values[0]:.3g} of the NIC's bandwidth, {values[1]:.3g} us per crossing collective")
    print("output tokens/s per GPU: median |error|, signed median, p90 |error|")
    print(f"  as if one domain held them  {len(nvlink):4} rows  {summary(nvlink)}")
    print(f"  fitted (in sample)          {len(found):4} rows  {summary(throughput_errors(catalog, found, values))}")
    held = {"throughput": [], "ttft": [], "tpot": []}
    for by in ("gpu", "engine", "model"):
        errors = []
        for name in sorted({getattr(c, by) for c in found}):
            rest = [c for c in found if getattr(c, by) != name]
            group = [c for c in found if getattr(c, by) == name]
            if not rest:
                continue
            refit = fit(catalog, rest)
            for case in group:
                e = case.errors(efficiency(catalog, case, refit))
                if e is None:
                    continue
                errors.append(e["throughput"])
                for metric in held:
                    if metric in e and (metric != "ttft" or case.concurrency <= module.TTFT_CONCURRENCY):
                        held[metric].append(e[metric])
        print(f"  leave one {by:6} out        {len(errors):4} rows  {summary(errors)}")
    bands = {m: round(float(np.quantile(np.abs(v), COVER)), 3) if v else float("nan") for m, v in held.items()}
    if math.isnan(bands["ttft"]):  # no TTFT held out at low concurrency: the throughput band stands for it
        bands["ttft"] = max(bands["throughput"], bands["tpot"])
    ids = sorted(c.id for c in found)
    models = sorted({c.model for c in found})
    record = {
        "efficiency": f"{values[0]:.4g}", "latency_us": f"{values[1]:.4g}", "rows": len(found),
        "error_throughput": bands["throughput"], "error_ttft": bands["ttft"], "error_tpot": bands["tpot"],
        "source": (f"aiconfigurator-core {version} systems/silicon_sample.csv: {len(found)} measured rows spanning link "
                   f"domains, of {', '.join(models)} on {', '.join(sorted({c.gpu for c in found}))} with "
                   f"{', '.join(sorted({c.engine for c in found}))} ({ids[0]} .. {ids[-1]})"),
    }  # fmt: skip
    print(f"expected error (p80 of the held-out): throughput {bands['throughput']:.0%}, TTFT {bands['ttft']:.0%}, "
          f"TPOT {bands['tpot']:.0%}")
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(record), lineterminator="\n")
        writer.writeheader()
        writer.writerow(record)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
