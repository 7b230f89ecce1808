"""The simulation's checks as a plain document (`planner simulate --json`, a plan file's `verification`, the
decision report's verdict): one reading of them for the CLI, the report and the library."""

from __future__ import annotations

from dataclasses import asdict

from planner.simulate.verdicts import overall_verdict


def simulation_document(checks) -> dict:
    """`planner simulate --json`: per workload and period, the run, its statistics and the verdict per limit
    (`verdict` on each check and workload: holds | misses | inconclusive | not simulated; `extra_seeds` and
    `seeds_note`: what was done about inconclusive verdicts); `verdict` over all of them; `all_ok` (every simulated
    check holds) kept for older readers."""
    items = []
    for check in checks:
        item = asdict(check)
        item["rate_rps"] = round(check.rate_rps, 6)
        del item["wall_s"]  # machine time: the same inputs give the same bytes
        items.append(item)
    return {"workloads": items, "verdict": overall_verdict(checks), "all_ok": all(c.ok for c in checks if c.ok is not None)}
