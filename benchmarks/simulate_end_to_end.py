"""`planner simulate` end to end at scale: a shipped scenario's demand set to --rate requests/s, planned, then one hour
simulated (issue 32's target: one hour at 100 requests/s in <= 5 s end to end), as a fresh process, beside the
simulator core alone (benchmarks/simulator_speed.py).
Run:  python benchmarks/simulate_end_to_end.py [--scenario scenarios/llama3-8b-assistant.yaml] [--rate 100]
      [--duration 3600] [--balancer round-robin]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/llama3-8b-assistant.yaml")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--balancer", default="round-robin")
    args = parser.parse_args()
    document = yaml.safe_load((ROOT / args.scenario).read_text())
    for workload in document["workloads"]:  # every workload at the rate, as a peak to size for
        for key in ("users", "mean_rps", "peak_quantile"):
            workload.pop(key, None)
        workload["peak_rps"] = args.rate / len(document["workloads"])
    planner = shutil.which("planner") or str(Path(sys.executable).parent / "planner")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scaled.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        started = time.perf_counter()
        done = subprocess.run([planner, "simulate", str(path), "--duration", f"{args.duration:g}", "--balancer", args.balancer], cwd=ROOT,
                              capture_output=True, text=True, check=False)  # fmt: skip
        wall = time.perf_counter() - started
    summary = [line for line in done.stdout.splitlines() if "requests simulated" in line or line.startswith("Verdict")]
    print(f"{args.scenario} at {args.rate:g} rps for {args.duration:g} s, {args.balancer}: {wall:.2f} s wall end to end "
          f"(exit {done.returncode})")
    for line in summary:
        print("  " + line)


if __name__ == "__main__":
    main()
