"""The calibration layer `planner check` writes: the judged runs as benchmark rows of the engine they measured
(model, GPU, TP, precision, serving engine and version: the user-rows path of issue 49, `calibrate: measured`, so
they answer and anchor that engine only), as a user catalog folder (catalog.yaml + benchmarks/check.csv naming the
result files as the source); and what re-planning with it changes (instances per pool, nodes, cost, verdicts)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from planner.bench.check import RunCheck
from planner.ingest import IngestOptions, runs_to_rows

TABLE = "check.csv"


@dataclass(frozen=True)
class PlanSummary:
    instances: dict[str, int]  # pool -> instances at its busiest period
    nodes_by_system: dict[str, int]
    nodes: int
    annual_cost_usd: float


@dataclass(frozen=True)
class Change:
    what: str  # 'pool <name>', 'nodes <system>', 'nodes', 'cost USD/year', 'flagged metrics'
    before: float | None
    after: float | None


def calibration_rows(checks: tuple[RunCheck, ...], pools) -> tuple[tuple, tuple[str, ...]]:
    """(rows, notes): every judged run that calibrates (an aggregated TP pool, a run at a rate or a concurrency)
    as a row of its pool's engine, lengths snapped per engine as `planner ingest` does."""
    engines = {p.name: (p.engine, p.engine_version) for p in pools}
    usable = [c for c in checks if c.calibrates is None]
    notes = [f"{c.file}: not calibrated ({c.calibrates})" for c in checks if c.calibrates is not None]
    if not usable:
        return (), tuple(notes)
    result = runs_to_rows([(c.run, c.engine) for c in usable], IngestOptions(statistic=usable[0].statistic), TABLE)
    by_file: dict[str, RunCheck] = {c.run.file: c for c in usable}
    rows = []
    for row, run in zip(result.rows, result.runs):
        engine, version = engines[by_file[run.file].pool]
        rows.append(row.model_copy(update={"engine": "" if engine == "trtllm" else engine, "engine_version": version}))
    return tuple(rows), tuple(notes) + tuple(result.notes)


def catalog_files(rows, scenario: str, files: list[str]) -> dict[str, str]:
    """catalog.yaml and benchmarks/check.csv of the calibration layer (names relative to its folder)."""
    from planner.catalog import benchmark_csv_text

    shown = ", ".join(files[:20]) + (f" and {len(files) - 20} more" if len(files) > 20 else "")
    manifest = {
        "name": f"check-{scenario}",
        "description": (f"Calibration written by `planner check` for scenario '{scenario}' from the benchmark results "
                        f"{shown}: each row is one run, of the engine it measured (model, GPU, TP, precision, "
                        "serving engine and version; the GPU, engine and version as the plan's pool states them, "
                        "which the result files do not record)."),
        "tables": [TABLE],
        "calibrate": "measured",
    }  # fmt: skip
    return {"catalog.yaml": yaml.safe_dump(manifest, sort_keys=False, width=10_000),
            f"benchmarks/{TABLE}": benchmark_csv_text(rows)}  # fmt: skip


def plan_summary(planned) -> PlanSummary:
    from planner.deploy.pools import plan_pools

    pools = plan_pools(planned.plan, planned.scenario, planned.catalog)
    totals = planned.plan.totals
    return PlanSummary({p.name: p.peak_instances for p in pools}, dict(totals.nodes_by_system), totals.nodes,
                       round(totals.annual_cost_usd, 2))  # fmt: skip


def changes(before: PlanSummary, after: PlanSummary, flagged_before: int, flagged_after: int) -> tuple[Change, ...]:
    out = []
    for pool in sorted(set(before.instances) | set(after.instances)):
        out.append(Change(f"instances of pool {pool}", before.instances.get(pool), after.instances.get(pool)))
    for system in sorted(set(before.nodes_by_system) | set(after.nodes_by_system)):
        out.append(Change(f"nodes of {system}", before.nodes_by_system.get(system), after.nodes_by_system.get(system)))
    out.append(Change("nodes", before.nodes, after.nodes))
    out.append(Change("annual cost (USD)", before.annual_cost_usd, after.annual_cost_usd))
    out.append(Change("metrics flagged (optimistic or pessimistic)", flagged_before, flagged_after))
    return tuple(out)
