"""How many processes the planner's parallel stages (engine-curve pricing, round-robin simulation) may use."""

from __future__ import annotations

import multiprocessing
import os

from planner.errors import PlannerInputError


def worker_count() -> int:
    """PLANNER_WORKERS (1 runs everything in this process), else the CPUs this process may run on."""
    configured = os.environ.get("PLANNER_WORKERS", "").strip()
    if configured:
        if not configured.isdigit() or int(configured) < 1:
            raise PlannerInputError("PLANNER_WORKERS", "PLANNER_WORKERS", f"a whole number of processes >= 1 (got {configured[:20]!r})")
        return int(configured)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether workers can be forked (they inherit the parent's state, nothing is pickled on the way in)."""
    return "fork" in multiprocessing.get_all_start_methods()
