"""The performance model against the simulator, metric by metric, at a percentile (docs/metrics.md).

For each engine and load (a share of the engine's highest modeled throughput), the model's figures come from the
closed-loop steady state at the concurrency whose throughput is that rate; the simulator runs one engine on the
same roofline step costs (planner/simulate/steps.py) under Poisson arrivals at that rate. Prints, per metric, the
model's and the simulator's P-th percentile and mean, and their ratio (simulated / modeled): where the ratio is
above 1 the plan is optimistic.

    python benchmarks/model_vs_sim.py [--percentile 95] [--loads 0.3,0.6,0.85] [--seed 0]
"""

from __future__ import annotations

import argparse

from planner.catalog import load_catalog
from planner.metrics import LABELS, LATENCY_METRICS
from planner.perf import engine_shape
from planner.perf.calibration import efficiency_for
from planner.perf.tables import instance_memory
from planner.perf.types import Layout
from planner.simulate.against_model import highest_rate_rps, model_at_rate, simulate_engine

ENGINES = (  # model, GPU, TP, precision, ISL, OSL
    ("llama-3.1-8b", "H100-SXM-80GB", 1, "fp8", 1000, 200),
    ("llama-3.3-70b", "B200-SXM-180GB", 2, "fp4", 1000, 300),
    ("llama-3.3-70b", "H100-SXM-80GB", 4, "fp8", 4000, 300),
    ("llama-3.3-70b", "H100-SXM-80GB", 2, "fp8", 5000, 500),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--percentile", type=float, default=95.0)
    parser.add_argument("--loads", default="0.3,0.6,0.85")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"| engine | ISL/OSL | load | metric | model P{args.percentile:g} | simulated | ratio | model mean | simulated | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, gpu, tp, precision, isl, osl in ENGINES:
        shape = engine_shape(catalog, catalog.models[model], catalog.gpus[gpu], Layout(tp), precision)
        eff = efficiency_for(catalog, catalog.gpus[gpu].architecture)
        memory = instance_memory(catalog, model, gpu, tp, precision, isl, osl)
        capacity = memory.running_limit(isl, osl)
        best = highest_rate_rps(shape, eff, isl, osl, capacity)
        for load in (float(v) for v in args.loads.split(",")):
            rate = load * best
            modeled = model_at_rate(shape, eff, isl, osl, capacity, rate, args.percentile)
            mean = model_at_rate(shape, eff, isl, osl, capacity, rate, None)
            at, means = simulate_engine(shape, eff, isl, osl, capacity, memory.kv_token_capacity, rate, args.percentile,
                                        args.seed)  # fmt: skip
            for metric in LATENCY_METRICS:
                m, s, mm, sm = getattr(modeled, metric), at[metric], getattr(mean, metric), means[metric]
                print(f"| {model} {gpu} TP{tp} {precision} | {isl}/{osl} | {load:.2f} | {LABELS[metric]} | {m:,.1f} | "
                      f"{s:,.1f} | {s / m:.2f} | {mm:,.1f} | {sm:,.1f} | {sm / mm:.2f} |")


if __name__ == "__main__":
    main()
