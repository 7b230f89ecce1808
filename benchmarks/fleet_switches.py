"""What sharing nodes across models and reconfiguring them between periods save (docs/optimizer.md).

A generated hybrid scenario: chat on Llama 3.1 8B, summarization on Llama 3.1 70B and an offline batch on Llama
3.1 70B over 24 hourly periods (chat and summarization by day, the batch by night), DGX H100 bought on-prem and
H100 cloud instances on demand; and `scenarios/daily-hybrid.yaml`. Each is planned under the four settings of
`fleet: {reconfigure_between_periods, share_nodes_across_models}`; prints cost, nodes and solve time.
Run:  python benchmarks/fleet_switches.py [--solver cbc|highs] [--time-limit 120]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import yaml

from planner.api import plan_file

SETTINGS = (("shared + reconfigured", True, True), ("reconfigured only", True, False),
            ("shared only", False, True), ("neither (v1)", False, False))  # fmt: skip


def day_curve(hour: int) -> float:
    return round(0.1 + 0.9 * max(0.0, math.sin(math.pi * (hour - 7) / 13)), 3)


def three_workloads() -> dict:
    periods = [
        {"name": f"h{hour:02d}", "hours_per_year": 365,
         "demand_factor": {"chat": day_curve(hour), "summarize": day_curve(hour), "batch": round(1.1 - day_curve(hour), 3)}}
        for hour in range(24)
    ]  # fmt: skip
    return {
        "name": "three-workloads-24h", "deployment": "hybrid",
        "workloads": [
            {"name": "chat", "model": "llama-3.1-8b", "isl_tokens": 1024, "osl_tokens": 256, "peak_rps": 400,
             "slo": {"ttft_ms": 1000, "itl_ms": 50}},
            {"name": "summarize", "model": "llama-3.1-70b", "isl_tokens": 4096, "osl_tokens": 512, "peak_rps": 40,
             "slo": {"ttft_ms": 3000, "itl_ms": 80}},
            {"name": "batch", "model": "llama-3.1-70b", "isl_tokens": 2048, "osl_tokens": 512, "peak_rps": 60,
             "mode": "offline"},
        ],
        "periods": periods,
        "sites": {"on_prem": {"systems": ["dgx-h100"]}, "cloud": {"systems": ["aws-p5.48xlarge", "lambda-gpu-8x-h100-sxm5"]}},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver", default="highs")
    parser.add_argument("--time-limit", type=float, default=120.0)
    args = parser.parse_args()
    shipped = yaml.safe_load((Path(__file__).parent.parent / "scenarios" / "daily-hybrid.yaml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        for document in (three_workloads(), shipped):
            print(f"{document['name']}: {len(document['workloads'])} workloads x {len(document['periods'])} periods")
            print(f"  {'fleet':24} {'status':>9} {'gap':>7} {'USD/year':>12} {'vs v1':>7} {'nodes':>30} {'s':>6}")
            results = []
            for label, reconfigure, share in SETTINGS:
                document["fleet"] = {"reconfigure_between_periods": reconfigure, "share_nodes_across_models": share}
                path = Path(tmp) / "scenario.yaml"
                path.write_text(yaml.safe_dump(document, sort_keys=False))
                started = time.perf_counter()
                result = plan_file(path, solver=args.solver, time_limit_s=args.time_limit)
                results.append((label, result, time.perf_counter() - started))
            base = results[-1][1].objective_usd_per_year
            for label, result, seconds in results:
                gap = "-" if result.mip_gap is None else f"{result.mip_gap:.2%}"
                nodes = ", ".join(f"{n} {s}" for s, n in result.totals.nodes_by_system.items())
                print(f"  {label:24} {result.status:>9} {gap:>7} {result.objective_usd_per_year:12,.0f} "
                      f"{result.objective_usd_per_year / base - 1:+7.1%} {nodes:>30} {seconds:6.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
