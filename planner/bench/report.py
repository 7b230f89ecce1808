"""What `planner check` found, as text and as JSON: per run and metric the verdict, the runs that matched no pool,
the calibration layer, and what re-planning with it changed."""

from __future__ import annotations

from dataclasses import dataclass

from planner.bench.loads import MEASURED_BAND


@dataclass(frozen=True)
class CheckReport:
    scenario: str
    runs: tuple  # planner.bench.check.RunCheck
    unmatched: tuple  # planner.bench.check.Unmatched
    rows: tuple  # the calibration layer's benchmark rows
    notes: tuple[str, ...]
    files: dict[str, str]  # the calibration catalog's files
    written_to: str | None  # the folder written (None: not asked, or nothing to calibrate)
    before: object  # planner.bench.calibrate.PlanSummary
    after: object | None  # the same after re-planning with the calibration (None: no rows, or no plan)
    after_runs: tuple  # the runs judged against the re-planned model
    changes: tuple  # planner.bench.calibrate.Change
    infeasible: str = ""  # why the calibrated scenario has no plan


RULE = ("verdict per metric on e = (planned - measured) / measured: where the plan promised better than measured "
        "beyond the band (a latency's e below -band, a throughput's above +band) it is optimistic, worse beyond the "
        "band pessimistic, else within band; the band is the model's "
        f"expected error for the engine class, or +-{MEASURED_BAND:.0%} where the model runs through benchmark rows "
        "of this engine (the planner's tolerance, a choice)")  # fmt: skip


def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def verdict_line(verdict) -> str:
    if verdict.verdict == "not judged":
        return f"{verdict.metric}: not judged ({verdict.why[:140]})"
    error = verdict.error
    return (f"{verdict.metric}: measured {_number(verdict.measured)}, planned {_number(verdict.planned)} "
            f"({error:+.0%}; band +-{verdict.band:.0%}): {verdict.verdict}")  # fmt: skip


def text(report: CheckReport) -> str:
    lines = [(f"check of scenario '{report.scenario}': {len(report.runs)} runs judged, {len(report.unmatched)} files "
              "matched no pool"), f"rule: {RULE}"]  # fmt: skip
    for run in report.runs:
        lines.append(f"- {run.file}: pool {run.pool}, {run.load}, ISL {run.isl:.0f} / OSL {run.osl:.0f}, "
                     f"{run.statistic} (the model at P{run.percentile:g})")  # fmt: skip
        lines += [f"    {verdict_line(v)}" for v in run.verdicts]
        if run.planned_from:
            lines.append(f"    planned: {run.planned_from}")
    for item in report.unmatched:
        lines.append(f"- matched no pool: {item.file}: {item.why}")
    lines += [f"note: {n}" for n in report.notes]
    if not report.rows:
        lines.append("no calibration: no judged run can be a benchmark row")
        return "\n".join(lines) + "\n"
    where = f"written to {report.written_to}" if report.written_to else "not written (give --out DIR to keep it)"
    lines.append(f"calibration: {len(report.rows)} rows of {', '.join(sorted({r.model + ' ' + (r.engine or 'trtllm') for r in report.rows}))}, {where}")
    if report.infeasible:
        lines.append(f"re-planned with it: {report.infeasible}")
    elif report.after is not None:
        lines.append("re-planned with it (before -> after):")
        for change in report.changes:
            mark = "" if change.before == change.after else "  (changed)"
            lines.append(f"    {change.what}: {_number(change.before)} -> {_number(change.after)}{mark}")
    return "\n".join(lines) + "\n"


def _verdict_json(verdict) -> dict:
    return {"metric": verdict.metric, "measured": verdict.measured, "planned": verdict.planned, "band": verdict.band,
            "error": verdict.error, "verdict": verdict.verdict, "why": verdict.why}  # fmt: skip


def _runs_json(runs) -> list[dict]:
    return [{"file": r.file, "tool": r.tool, "pool": r.pool, "workload": r.workload, "load": r.load,
             "statistic": r.statistic, "percentile": r.percentile, "isl": r.isl, "osl": r.osl,
             "verdicts": [_verdict_json(v) for v in r.verdicts], "planned_from": r.planned_from, "notes": list(r.notes),
             "calibrates": r.calibrates is None, "not_calibrated_because": r.calibrates} for r in runs]  # fmt: skip


def _summary_json(summary) -> dict | None:
    if summary is None:
        return None
    return {"instances_by_pool": summary.instances, "nodes_by_system": summary.nodes_by_system, "nodes": summary.nodes,
            "annual_cost_usd": summary.annual_cost_usd}  # fmt: skip


def document(report: CheckReport) -> dict:
    return {
        "scenario": report.scenario, "rule": RULE, "runs": _runs_json(report.runs),
        "unmatched": [{"file": u.file, "why": u.why} for u in report.unmatched], "notes": list(report.notes),
        "calibration": {"rows": len(report.rows), "written_to": report.written_to, "files": sorted(report.files)},
        "before": _summary_json(report.before), "after": _summary_json(report.after),
        "after_runs": _runs_json(report.after_runs), "infeasible_after": report.infeasible or None,
        "changes": [{"what": c.what, "before": c.before, "after": c.after} for c in report.changes],
    }  # fmt: skip
