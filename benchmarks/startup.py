"""Start-up of the command line: `planner --help` and `planner plan` of a shipped seed scenario, wall time of fresh
processes (median of --runs), beside `python -c pass` (the interpreter alone) and the imports of `planner.cli`.
Issue 31's targets: --help <= 0.25 s, plan <= 0.4 s.
Run:  python benchmarks/startup.py [--runs 7] [--scenario scenarios/contact-center.yaml]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wall_s(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--scenario", default="scenarios/contact-center.yaml")
    args = parser.parse_args()
    # the package byte-compiled, as an install has it (pip compiles what it installs; a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 would compile every module again in every fresh process)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "planner")], check=True,
                   stdout=subprocess.DEVNULL)
    planner = shutil.which("planner") or str(Path(sys.executable).parent / "planner")
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("python -c 'import planner.cli'", [sys.executable, "-c", "import planner.cli"]),
        ("python -c 'import planner.api'", [sys.executable, "-c", "import planner.api"]),
        ("planner --help", [planner, "--help"]),
        (f"planner plan {args.scenario}", [planner, "plan", args.scenario]),
    ]
    print(f"{'command':55} {'median wall s':>14}   ({args.runs} fresh processes each)")
    for label, command in rows:
        print(f"{label:55} {wall_s(command, args.runs):14.3f}")


if __name__ == "__main__":
    main()
