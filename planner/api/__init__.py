"""The Python API: every CLI command is one call of a function here.

Its names live in three modules (`data`, `exploring`, `planning`), imported when a name of theirs is first used:
`planner plan` does not pay for the landscape and sweep machinery `planner curve` needs (about 0.15 s of imports).
"""

from __future__ import annotations

import importlib

_HOME = {
    "TablesBuild": "data",
    "bench": "benching",
    "check": "benching",
    "deploy": "deploying",
    "WorkloadFromTrace": "data",
    "analyze_workload": "data",
    "ingest_results": "data",
    "scenario_with_workload": "data",
    "tables_build": "data",
    "CATALOG_KINDS": "exploring",
    "CurveAnswer": "exploring",
    "PeakAnswer": "exploring",
    "PerfAnswer": "exploring",
    "SweepResult": "exploring",
    "UsersAnswer": "exploring",
    "_check_query_ids": "exploring",
    "catalog_entries": "exploring",
    "curve": "exploring",
    "curve_in_catalog": "exploring",
    "peak": "exploring",
    "perf_layers": "planning",
    "perf_point": "exploring",
    "sweep": "exploring",
    "users": "exploring",
    "SENSITIVITY_DEMAND_SCALES": "planning",
    "SENSITIVITY_THROUGHPUT_SCALES": "planning",
    "BreakEven": "planning",
    "DecisionInputs": "planning",
    "DeploymentResult": "planning",
    "PlannedScenario": "planning",
    "_named_stage": "planning",
    "_saved_plan": "planning",
    "bom": "planning",
    "break_even": "planning",
    "compare": "planning",
    "decision_report": "planning",
    "gpu_hours_per_year": "planning",
    "output_tokens_per_year": "planning",
    "plan_file": "planning",
    "plan_in_context": "planning",
    "repair": "planning",
    "scenario_catalog": "planning",
    "sensitivity": "planning",
    "simulate": "planning",
    "solve_scenario": "planning",
    "validate_file": "planning",
    "verify": "planning",
    "with_confidence": "planning",
    "with_perf_margin": "planning",
    "with_perf_source": "planning",
    "workload_landscapes": "exploring",
}

__all__ = sorted(n for n in _HOME if not n.startswith("_"))


def __getattr__(name: str):
    """A name of the API, from its module (imported on first use, then kept here)."""
    if name not in _HOME:
        raise AttributeError(f"module 'planner.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"planner.api.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
