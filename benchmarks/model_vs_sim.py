"""The performance model against the simulator, metric by metric, at a percentile (docs/metrics.md).

For each engine and load (a share of the engine's usable rate: the highest at which the open-loop model settles
with its running batch inside the KV cache 99% of the time), the model's figures are the open-loop steady state at
that rate (planner/perf/open_loop.py: what a plan sizes an instance with); the simulator runs one engine on the
same roofline step costs (planner/simulate/steps.py) under Poisson arrivals at that rate. Prints, per metric, the
model's and the simulator's P-th percentile (with the simulation's 95% batch-means interval) and their ratio
(simulated / modeled): above 1 the plan is optimistic. A ratio outside 0.9-1.1 whose interval does not reach
the band is marked `OUT`.

    python benchmarks/model_vs_sim.py [--percentile 95] [--loads 0.3,0.6,0.85] [--seed 0]
    python benchmarks/model_vs_sim.py --random 40 [--seed 1]      # random engines, loads and percentiles

`--random` draws what `tests/test_metrics.py::test_nine_in_ten_simulated_percentiles_lie_within_ten_percent_of_the_model`
draws (planner.simulate.against_model.random_engine), more of them.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from planner.catalog import load_catalog
from planner.metrics import LABELS, LATENCY_METRICS
from planner.simulate.against_model import EngineCase, compare, random_engine

ENGINES = (  # model, GPU, TP, precision, ISL, OSL
    ("llama-3.1-8b", "H100-SXM-80GB", 1, "fp8", 1000, 200),
    ("llama-3.3-70b", "B200-SXM-180GB", 2, "fp4", 1000, 300),
    ("llama-3.3-70b", "H100-SXM-80GB", 4, "fp8", 4000, 300),
    ("llama-3.3-70b", "H100-SXM-80GB", 2, "fp8", 5000, 500),
    ("llama-3.3-70b", "B200-SXM-180GB", 1, "fp4", 16000, 400),
    ("qwen2.5-72b", "H200-SXM-141GB", 4, "fp8", 587, 20),
    ("llama-3.1-8b", "A100-SXM-80GB", 1, "bf16", 300, 50),
)


def _row(case: EngineCase, load: float, percentile: float, seed: int) -> tuple[str, int]:
    started = time.perf_counter()
    result = compare(case, load, percentile, seed)
    cells, outside = [], 0
    for metric in LATENCY_METRICS:
        check = result[metric]
        mark = "" if check.within(0.10) else " OUT"
        outside += bool(mark)
        low, high = check.interval or (float("nan"), float("nan"))
        cells.append(f"{check.modeled_ms:,.1f} | {check.simulated_ms:,.1f} ({low:,.1f}-{high:,.1f}) | "
                     f"{check.ratio:.2f}{mark}")  # fmt: skip
    line = (f"| {case.label} | {load:.2f} | P{percentile:g} | " + " | ".join(cells)
            + f" | {time.perf_counter() - started:.1f} s |")  # fmt: skip
    return line, outside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--percentile", type=float, default=95.0)
    parser.add_argument("--loads", default="0.3,0.6,0.85")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random", type=int, default=0, help="random engines, loads and percentiles instead")
    args = parser.parse_args()
    catalog = load_catalog()
    header = " | ".join(f"{LABELS[m]} model | simulated (95%) | ratio" for m in LATENCY_METRICS)
    print(f"| engine | load | at | {header} | time |")
    print("|---|---|---|" + "---|---|---|" * len(LATENCY_METRICS) + "---|")
    rows = outside = 0
    if args.random:
        rng = np.random.default_rng(args.seed)
        for _ in range(args.random):
            case, load, percentile = random_engine(catalog, rng)
            line, out = _row(case, load, percentile, args.seed)
            print(line, flush=True)
            rows, outside = rows + 1, outside + out
    else:
        for model, gpu, tp, precision, isl, osl in ENGINES:
            case = EngineCase.build(catalog, model, gpu, tp, precision, isl, osl)
            for load in (float(v) for v in args.loads.split(",")):
                line, out = _row(case, load, args.percentile, args.seed)
                print(line, flush=True)
                rows, outside = rows + 1, outside + out
    print(f"\n{outside} of {rows * len(LATENCY_METRICS)} figures outside +-10% of the model (beyond the simulation's interval)")


if __name__ == "__main__":
    main()
