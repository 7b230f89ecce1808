"""Scale of the fleet integer program: a large generated scenario, solved by each solver.

20 workloads (5 models, 3 length buckets each), every catalog system that can be priced (on-prem and cloud),
TP 1-8, every precision the GPU has (bf16, fp8, fp4), 4 batch caps, 3 engine lengths per model, 24 hourly
periods, hybrid. Prints candidate counts, enumeration and build time, solve time, status and gap per solver.
Run:  python benchmarks/solver_scale.py [--solvers cbc,highs,ortools] [--time-limit 60]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import yaml

from planner.candidates import enumerate_candidates
from planner.catalog import load_catalog
from planner.optimize import _read_plan, build_fleet_model, solve_model
from planner.scenario import load_scenario

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "mistral-7b", "qwen2.5-72b", "mixtral-8x7b")
BUCKETS = ((512, 128), (2048, 256), (6000, 500))  # short chat, RAG answer, long summary
# benchmark-only purchase prices for systems whose price is not public (the catalog leaves them out)
PLACEHOLDER_PRICES = {"dgx-h200": 350_000, "dgx-a100": 150_000}


def hourly_factor(hour: int, phase: int) -> float:
    """A daily curve: low at night, a business-hours peak, shifted per workload."""
    return round(0.15 + 0.85 * max(0.0, math.sin(math.pi * ((hour + phase) % 24 - 6) / 14)) ** 1.5, 3)


def scale_scenario(catalog) -> dict:
    on_prem = [s for s, v in sorted(catalog.systems.items()) if v.kind == "on-prem" and v.power_kw is not None]
    cloud = [s for s, v in sorted(catalog.systems.items()) if v.kind == "cloud" and v.usd_per_hour is not None]
    workloads = []
    for index in range(20):
        shares = [(index % 3 + 1) / 6, (2 - index % 3 + 1) / 6]
        shares.append(round(1 - sum(shares), 6))
        workloads.append({
            "name": f"w{index:02d}", "model": MODELS[index % len(MODELS)], "peak_rps": 5 + (index * 7) % 40,
            "buckets": [{"isl_tokens": i, "osl_tokens": o, "share": s} for (i, o), s in zip(BUCKETS, shares)],
            "slo": {"ttft_ms": 2000 + 500 * (index % 3), "itl_ms": 80},
        })  # fmt: skip
    periods = [
        {"name": f"h{hour:02d}", "hours_per_year": 365,
         "demand_factor": {w["name"]: hourly_factor(hour, i % 4) for i, w in enumerate(workloads)}}
        for hour in range(24)
    ]  # fmt: skip
    return {
        "name": "solver-scale", "deployment": "hybrid", "workloads": workloads, "periods": periods,
        "sites": {"on_prem": {"systems": on_prem, "price_usd": {s: p for s, p in PLACEHOLDER_PRICES.items() if s in on_prem}},
                  "cloud": {"systems": cloud}},
        "engine": {"max_batch_ladder": [16, 64, 256, 1024], "tp_ladder": [1, 2, 4, 8]},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solvers", default="cbc,highs,ortools")
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    catalog = load_catalog()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(yaml.safe_dump(scale_scenario(catalog), sort_keys=False))
        scenario = load_scenario(path, catalog)
    started = time.perf_counter()
    cset = enumerate_candidates(scenario, catalog)
    enumerate_s = time.perf_counter() - started
    stats = cset.stats
    print(f"scenario: {len(scenario.workloads)} workloads x {sum(len(w.buckets) for w in scenario.workloads) // len(scenario.workloads)} "
          f"buckets, {len(scenario.offers)} system offers, {len(scenario.periods)} periods")  # fmt: skip
    print(f"candidates: {stats.generated} generated, {stats.pruned_memory} do not fit, {stats.pruned_latency} miss a limit, "
          f"{stats.pruned_dominated} dominated, {stats.kept} kept; {len(cset.options)} options; enumeration {enumerate_s:.1f} s")  # fmt: skip
    print(f"{'solver':8} {'build s':>8} {'solve s':>8} {'status':>9} {'gap':>8} {'USD/year':>14} {'vars':>8} {'rows':>8}")
    for solver in args.solvers.split(","):
        started = time.perf_counter()
        model = build_fleet_model(scenario, cset, catalog)
        build_s = time.perf_counter() - started
        outcome = solve_model(model, solver, args.time_limit)
        objective = "-"
        if outcome.status in ("optimal", "feasible"):
            objective = f"{_read_plan(scenario, cset, catalog, model, solver, outcome).objective_usd_per_year:,.0f}"
        gap = "-" if outcome.mip_gap is None else f"{outcome.mip_gap:.2%}"
        print(f"{solver:8} {build_s:8.2f} {outcome.seconds:8.2f} {outcome.status:>9} {gap:>8} {objective:>14} "
              f"{len(model.problem.variables()):8d} {len(model.problem.constraints):8d}")  # fmt: skip


if __name__ == "__main__":
    main()
