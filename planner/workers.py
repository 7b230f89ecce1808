"""Where the planner's parallel stages run: how many processes (engine-curve pricing, round-robin simulation) and on
which executor (forked processes, or Ray for engine-curve pricing)."""

from __future__ import annotations

import logging
import multiprocessing
import os
from contextlib import contextmanager

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


EXECUTORS = ("process", "ray")
_executor: str | None = None  # set for one command by `use_executor` (the CLI's --executor)


@contextmanager
def use_executor(name: str | None):
    """Run the parallel stages inside on `name` (process: forked workers on this machine; ray: tasks on the Ray
    cluster `ray.init()` finds, RAY_ADDRESS or a local one); None keeps what is set (PLANNER_EXECUTOR, else process)."""
    global _executor
    if name is not None and name not in EXECUTORS:
        raise PlannerInputError("--executor", "executor", f"unknown executor '{name}'; allowed: {', '.join(EXECUTORS)}")
    saved = _executor
    _executor = name if name is not None else _executor
    try:
        yield
    finally:
        _executor = saved


def executor() -> str:
    """The executor of the parallel stages: `use_executor`'s, else PLANNER_EXECUTOR, else process."""
    if _executor is not None:
        return _executor
    configured = os.environ.get("PLANNER_EXECUTOR", "").strip() or "process"
    if configured not in EXECUTORS:
        raise PlannerInputError("PLANNER_EXECUTOR", "PLANNER_EXECUTOR", f"one of {', '.join(EXECUTORS)} (got {configured[:20]!r})")
    return configured


def import_ray():
    """The ray module, or the error that says how to install it."""
    try:
        import ray
    except ImportError:
        raise PlannerInputError(
            "--executor", "executor", "ray is not installed: pip install '.[ray]' in the planner checkout (or use the process executor)"
        ) from None
    return ray


def map_on_ray(function, shared, items: list, progress=None, chunk: int = 4) -> list:
    """[function(shared, item) for item in items] as Ray tasks of `chunk` items each, `shared` put in the object
    store once; results in item order. A Ray started here (none running, no RAY_ADDRESS) is shut down after."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        shared_ref = ray.put(shared)
        remote = ray.remote(_run_chunk)
        chunks = [items[i:i + chunk] for i in range(0, len(items), chunk)]
        refs = {remote.remote(function, shared_ref, part): index for index, part in enumerate(chunks)}
        results: dict[int, list] = {}
        done = 0
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            for ref in ready:
                index = refs.pop(ref)
                results[index] = ray.get(ref)
                done += len(results[index])
                if progress is not None:
                    progress(done, len(items))
        return [value for index in range(len(chunks)) for value in results[index]]
    finally:
        if started_here:
            ray.shutdown()


def _run_chunk(function, shared, part: list) -> list:
    return [function(shared, item) for item in part]
