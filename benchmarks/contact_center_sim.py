"""The seeds' contact-center answer under random arrivals: 12-15 DGX H100 at 31 requests/s (Poisson).

The seeds size 13 DGX H100 from 31 / 2.4 = 12.9: 99% utilization at the peak. This simulates each count on
serving engines fitted to the measured point (2.4 requests/s per DGX H100, ITL 21.4 ms, 667 output tokens; see
planner/simulate/verify.py) at a fixed run length and prints TTFT percentiles.
Run:  python benchmarks/contact_center_sim.py [--duration 3600] [--seeds 3] [--balancer power-of-two]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from planner.api import plan_in_context
from planner.simulate import BALANCERS, SimulationOptions, simulate_plan

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "contact-center.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="simulated seconds per run")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--balancer", default="power-of-two", choices=list(BALANCERS))
    args = parser.parse_args()
    planned = plan_in_context(SCENARIO)
    (line,) = planned.plan.lines
    (running,) = planned.plan.instances
    print(f"31 rps, Poisson arrivals, {args.duration:g} s per run, {args.seeds} seeds, {args.balancer}; TTFT limit 3000 ms")
    print(f"{'DGX H100':>8} {'utilization':>11} {'TTFT P50 ms':>12} {'P95 ms':>9} {'P99 ms':>9} {'within 3 s':>10}")
    for nodes in (12, 13, 14, 15):
        plan = dataclasses.replace(planned.plan, lines=(dataclasses.replace(line, nodes=nodes),),
                                   instances=(dataclasses.replace(running, instances=nodes),))  # fmt: skip
        rows = []
        started = time.perf_counter()
        for seed in range(args.seeds):
            options = SimulationOptions(duration_s=args.duration, seed=seed, balancer=args.balancer)
            (check,) = simulate_plan(plan, planned.scenario, planned.catalog, options)
            rows.append(check.stats)
        mean = lambda values: sum(values) / len(values)  # noqa: E731
        print(f"{nodes:8d} {31 / (nodes * 2.4):11.1%} {mean([s.ttft_ms.p50 for s in rows]):12,.0f} "
              f"{mean([s.ttft_ms.p95 for s in rows]):9,.0f} {mean([s.ttft_ms.p99 for s in rows]):9,.0f} "
              f"{mean([s.slo_attainment for s in rows]):10.1%}   ({time.perf_counter() - started:.1f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
