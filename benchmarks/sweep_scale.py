"""Sweep throughput: 1,000 Monte Carlo points of the contact-center scenario, with 1 and 2 local workers.

    python benchmarks/sweep_scale.py [--points 1000]

Prints points per second for each worker count (and checks both give the same records).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from planner.api import sweep

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1000)
    args = parser.parse_args()
    document = {
        "scenario": str(ROOT / "scenarios" / "contact-center.yaml"),
        "monte_carlo": {"samples": args.points, "seed": 0, "fields": {
            "workloads.call-summaries.peak_rps": {"uniform": [10, 60]},
            "sites.on_prem.usd_per_kwh": {"uniform": [0.05, 0.20]},
            "sites.on_prem.amortization_years": {"choice": [3, 4, 5, 6]},
        }},
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sweep.yaml"
        path.write_text(yaml.safe_dump(document))
        results = {}
        for workers in (1, 2):
            started = time.perf_counter()
            results[workers] = sweep(path, workers=workers).records
            seconds = time.perf_counter() - started
            print(f"{workers} worker(s): {args.points} points in {seconds:.1f} s = {args.points / seconds:.1f} points/s")
        print("same records with 1 and 2 workers:", results[1] == results[2])


if __name__ == "__main__":
    main()
