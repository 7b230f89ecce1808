"""Scale of the fleet integer program: a large generated scenario, solved by each solver.

20 workloads (5 models, 3 length buckets each), every catalog system that can be priced (on-prem and cloud),
TP 1-8, every precision the GPU has of bf16, fp8 and fp4 (named on every workload; --precisions default: the
quality-keeping default, no fp4), 4 batch caps, 3 engine lengths per model, 24 hourly
periods, hybrid. Prints candidate counts, enumeration time, then per solver: model size, build time, the LP relaxation's bound and
the root gap it leaves against the optimum, the seconds of the period bound (planner/optimize/periods.py: the
Lagrangian bound with each period an integer program; its value, and how many of its blocks were solved to
optimality) and of the two-stage starting plan (planner/optimize/decompose.py), both part of the solve's, solve
time, status, gap and the best proven bound; with --year-round-bound, the search over the year-round decisions
(planner/optimize/yearround.py): its bound, seconds, boxes and points.
Run:  python benchmarks/solver_scale.py [--solvers cbc,highs,ortools] [--time-limit 60] [--periods 24]
      [--workloads 20] [--fleet shared|fixed] [--precisions default] [--no-warm-start] [--period-bound]
      [--year-round-bound] [--no-bound]
      (fixed: no reconfiguration, no sharing: the v1 formulation)
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
# every precision named, fp4 included (the quality-keeping default leaves fp4 out of a workload that names none:
# the benchmark's size, 90,144 candidates at 20 x 24, is with it); --precisions default: what a scenario gets unasked
ALL_PRECISIONS = ("bf16", "fp8", "fp4")


def hourly_factor(hour: int, phase: int) -> float:
    """A daily curve: low at night, a business-hours peak, shifted per workload."""
    return round(0.15 + 0.85 * max(0.0, math.sin(math.pi * ((hour + phase) % 24 - 6) / 14)) ** 1.5, 3)


def scale_scenario(catalog, n_workloads: int = 20, n_periods: int = 24, fleet: str = "shared",
                   precisions: tuple[str, ...] = ALL_PRECISIONS) -> dict:
    on_prem = [s for s, v in sorted(catalog.systems.items()) if v.kind == "on-prem" and v.power_kw is not None]
    cloud = [s for s, v in sorted(catalog.systems.items()) if v.kind == "cloud" and v.usd_per_hour is not None]
    workloads = []
    for index in range(n_workloads):
        shares = [(index % 3 + 1) / 6, (2 - index % 3 + 1) / 6]
        shares.append(round(1 - sum(shares), 6))
        workloads.append({
            "name": f"w{index:02d}", "model": MODELS[index % len(MODELS)], "peak_rps": 5 + (index * 7) % 40,
            "buckets": [{"isl_tokens": i, "osl_tokens": o, "share": s} for (i, o), s in zip(BUCKETS, shares)],
            "slo": {"ttft_ms": 2000 + 500 * (index % 3), "itl_ms": 80},
        } | ({"precisions": list(precisions)} if precisions else {}))  # fmt: skip
    hours = [round(h * 24 / n_periods) for h in range(n_periods)]
    periods = [
        {"name": f"h{hour:02d}", "hours_per_year": 8760 / n_periods,
         "demand_factor": {w["name"]: hourly_factor(hour, i % 4) for i, w in enumerate(workloads)}}
        for hour in hours
    ]  # fmt: skip
    return {
        "name": "solver-scale", "deployment": "hybrid", "workloads": workloads, "periods": periods,
        "sites": {"on_prem": {"systems": on_prem, "price_usd": {s: p for s, p in PLACEHOLDER_PRICES.items() if s in on_prem}},
                  "cloud": {"systems": cloud}},
        "engine": {"max_batch_ladder": [16, 64, 256, 1024], "tp_ladder": [1, 2, 4, 8]},
        "fleet": {"reconfigure_between_periods": fleet == "shared", "share_nodes_across_models": fleet == "shared"},
    }  # fmt: skip


def lp_bound(model) -> float | None:
    """The LP relaxation's optimum (every integer relaxed), by HiGHS."""
    import pulp

    from planner.optimize import quiet_stdout

    with quiet_stdout():
        model.problem.solve(pulp.HiGHS(msg=False, mip=False, threads=1))
    return pulp.value(model.problem.objective) if model.problem.status == pulp.LpStatusOptimal else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solvers", default="cbc,highs,ortools")
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--periods", type=int, default=24)
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--fleet", choices=("shared", "fixed"), default="shared")
    parser.add_argument("--no-warm-start", action="store_true",
                        help="branch and bound alone (no period bound, no two-stage starting plan: planner/optimize/"
                             "periods.py, decompose.py)")
    parser.add_argument("--period-bound", action="store_true",
                        help="also the period bound (planner/optimize/periods.py) within a third of the time")
    parser.add_argument("--year-round-bound", action="store_true",
                        help="after the start, the search over the year-round decisions (planner/optimize/yearround.py)"
                             " until 0.9 of the time: planner/optimize/solve.py YEAR_ROUND_SHARE")
    parser.add_argument("--no-bound", action="store_true",
                        help="price every curve (no curves left unpriced by a bound: planner/candidates/bounds.py)")
    parser.add_argument("--precisions", default=",".join(ALL_PRECISIONS),
                        help="precisions every workload names (comma-separated), or 'default': none named")
    args = parser.parse_args()
    precisions = () if args.precisions == "default" else tuple(args.precisions.split(","))
    started = time.perf_counter()
    catalog = load_catalog()
    load_catalog_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(yaml.safe_dump(scale_scenario(catalog, args.workloads, args.periods, args.fleet, precisions), sort_keys=False))
        scenario = load_scenario(path, catalog)
    from planner.perf.calibration import efficiency_for

    started = time.perf_counter()
    for gpu in sorted({catalog.systems[o.system].gpu for o in scenario.offers}):
        efficiency_for(catalog, catalog.gpus[gpu].architecture)  # calibration fits, cached with the catalog
    calibrate_s = time.perf_counter() - started
    stages: list[tuple[float, str]] = []  # (seconds since the enumeration began, stage) at each stage's start

    def progress(done, total=None, stage=None):
        if stage is not None:
            stages.append((time.perf_counter() - started, stage))

    started = time.perf_counter()
    cset = enumerate_candidates(scenario, catalog, progress, bound_pruning=not args.no_bound)
    enumerate_s = time.perf_counter() - started
    stats = cset.stats
    print(f"catalog load {load_catalog_s:.2f} s, calibration fits {calibrate_s:.2f} s (once per catalog)")
    print(f"fleet: {args.fleet}; scenario: {len(scenario.workloads)} workloads x {sum(len(w.buckets) for w in scenario.workloads) // len(scenario.workloads)} "
          f"buckets, {len(scenario.offers)} system offers, {len(scenario.periods)} periods")  # fmt: skip
    print(f"candidates: {stats.generated} generated, {stats.pruned_memory} do not fit, {stats.pruned_latency} miss a limit, "
          f"{stats.pruned_dominated} dominated, {stats.kept} kept; {len(cset.options)} options; enumeration {enumerate_s:.1f} s")  # fmt: skip
    for (at, stage), (until, _) in zip(stages, stages[1:] + [(enumerate_s, "")]):  # the enumeration's phases
        print(f"  {at:7.1f} s  +{until - at:6.1f} s  {stage}")
    started = time.perf_counter()
    relaxed = build_fleet_model(scenario, cset, catalog)
    build_s = time.perf_counter() - started
    variables = relaxed.problem.variables()
    integers = sum(1 for v in variables if v.cat == "Integer")
    started = time.perf_counter()
    bound = lp_bound(relaxed)
    print(f"model: {len(variables)} variables ({integers} integer), {len(relaxed.problem.constraints)} rows; build "
          f"{build_s:.2f} s; LP relaxation {bound:,.0f} USD/year in {time.perf_counter() - started:.2f} s")  # fmt: skip
    print(f"{'solver':8} {'build s':>8} {'bound s':>8} {'start s':>8} {'solve s':>8} {'status':>9} {'gap':>8} {'USD/year':>14} "
          f"{'root gap':>9} {'best bound':>14} {'period bound':>14} {'blocks':>7}")  # fmt: skip
    for solver in args.solvers.split(","):
        started = time.perf_counter()
        model = build_fleet_model(scenario, cset, catalog)
        build_s = time.perf_counter() - started
        outcome = solve_model(model, solver, args.time_limit, warm_start=not args.no_warm_start,
                              period_bound=args.period_bound, year_round_bound=args.year_round_bound)
        objective, root = "-", "-"
        if outcome.status in ("optimal", "feasible"):
            value = _read_plan(scenario, cset, catalog, model, solver, outcome).objective_usd_per_year
            objective, root = f"{value:,.0f}", f"{(value - bound) / value:.2%}"
        gap = "-" if outcome.mip_gap is None else f"{outcome.mip_gap:.2%}"
        start = "-" if outcome.warm_start_s is None else f"{outcome.warm_start_s:.2f}"  # of the solve's seconds
        period = outcome.period_bound  # planner/optimize/periods.py's Lagrangian bound (of the solve's seconds)
        bound_s, period_value, blocks = ("-", "-", "-") if period is None else (
            f"{period.seconds:.2f}", f"{period.lower_bound:,.0f}", f"{period.blocks_optimal}/{period.blocks}")
        best = "-" if outcome.best_bound is None else f"{outcome.best_bound:,.0f}"
        print(f"{solver:8} {build_s:8.2f} {bound_s:>8} {start:>8} {outcome.seconds:8.2f} {outcome.status:>9} {gap:>8} "
              f"{objective:>14} {root:>9} {best:>14} {period_value:>14} {blocks:>7}")  # fmt: skip
        year = outcome.year_round_bound  # planner/optimize/yearround.py's search (of the solve's seconds)
        if year is not None:
            print(f"  year-round bound {year.lower_bound:,.0f} in {year.seconds:.2f} s: {year.boxes} boxes, {year.points} "
                  f"points ({year.closed} solved whole with their periods' floors), {year.open} left below the start"
                  + ("" if year.plan is None else f"; a closed point held a cheaper plan, {year.plan[0]:,.0f}"))  # fmt: skip


if __name__ == "__main__":
    main()
