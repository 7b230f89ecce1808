"""JSON documents with the names of design.md; deterministic (same input, same bytes)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from planner.perf import PerfResult
from planner.perf.types import Layout
from planner.plan import Plan

if TYPE_CHECKING:  # the answers' types, for the signatures: the report layer does not import the API
    from planner.api.exploring import CurveAnswer, PeakAnswer, PerfAnswer, UsersAnswer
    from planner.api.planning import DeploymentResult


def _clean(value: Any) -> Any:
    """JSON has no inf/NaN: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def dumps(document: dict) -> str:
    return json.dumps(_clean(document), indent=2, ensure_ascii=False) + "\n"


def plan_document(plan: Plan) -> dict:
    """`planner plan --json`: the Plan's fields in their order, among them the precision decision
    (`workload_precisions`, in scenario order; `precision_saving_usd_per_year`, `precision_note`:
    docs/optimizer.md, "Precision")."""
    document = plan.to_dict()
    # the two capex figures by the names every output gives them (`capex_usd`, `infrastructure_capex_usd` kept)
    document["totals"]["servers_capex_usd"] = plan.totals.servers_capex_usd
    document["totals"]["capex_incl_site_usd"] = plan.totals.capex_incl_site_usd
    document["candidates"]["pruned"] = [
        {"workload": w, "system": s, "reason": r} for (w, s, r) in plan.candidates.pruned
    ]
    return document


def perf_document(answer: PerfAnswer, gpus_per_node: int) -> dict:
    result = answer.result
    if result is None:
        return {
            "model": answer.query.model, "gpu": answer.query.gpu, "tp": answer.query.tp, "engine": answer.query.engine,
            "layout": None if answer.query.layout is None else answer.query.layout.label, "expected_error": None,
            "precision": answer.query.precision, "isl": answer.query.isl, "osl": answer.query.osl,
            "concurrency": answer.query.concurrency, "rate_rps": answer.query.rate_rps, "percentile": answer.percentile,
            "statistic": None,
            "ttft_ms": None, "tpot_ms": None, "itl_ms": None, "e2e_ms": None,
            "request_throughput_rps": None, "output_tokens_per_s": None, "instances_per_node": None,
            "rps_per_node": None, "fits": None, "max_concurrency_by_memory": None,
            "provenance": "none", "reason": answer.miss_reason,
        }  # fmt: skip
    memory = result.memory
    return {
        "model": result.model, "gpu": result.gpu, "tp": result.tp, "precision": result.precision,
        "isl": result.isl, "osl": result.osl, "concurrency": result.concurrency, "rate_rps": answer.query.rate_rps,
        "gpus_per_instance": result.gpus_per_instance, "engine": result.engine,
        "engine_version": result.engine_version or "not stated",
        "layout": Layout(result.tp or result.gpus_per_instance, result.dp, result.ep, result.pp).label,
        "expected_error": result.expected_error, "expected_error_known": result.error_known,
        "percentile": result.percentile, "statistic": result.statistic,
        "ttft_ms": result.ttft_ms, "tpot_ms": result.tpot_ms, "itl_ms": result.itl_ms,
        "e2e_ms": None if result.e2e_ms is None else round(result.e2e_ms, 3),
        "ttft_ms_bound": result.ttft_ms_bound, "tpot_ms_bound": result.tpot_ms_bound, "itl_ms_bound": result.itl_ms_bound,
        "request_throughput_rps": _round(result.request_throughput_rps),
        "output_tokens_per_s": _round(result.output_tokens_per_s),
        "gpus_per_node": gpus_per_node,
        "instances_per_node": result.instances_per_node(gpus_per_node),
        "rps_per_node": _round(result.rps_per_node(gpus_per_node)),
        "fits": None if memory is None else memory.fits,
        "max_concurrency_by_memory": None if memory is None else memory.max_concurrency_by_memory,
        "memory": None if memory is None else asdict(memory),
        "provenance": result.provenance, "source": result.source, "derivations": list(result.derivations),
    }  # fmt: skip


def point_record(point: PerfResult, gpus_per_node: int) -> dict:
    return {
        "concurrency": point.concurrency, "statistic": point.statistic, "ttft_ms": _round(point.ttft_ms, 3),
        "tpot_ms": _round(point.tpot_ms, 3), "itl_ms": _round(point.itl_ms, 3),
        "e2e_ms": _round(point.e2e_ms, 3), "request_throughput_rps": _round(point.request_throughput_rps),
        "output_tokens_per_s": _round(point.output_tokens_per_s),
        "output_tokens_per_s_per_gpu": _round((point.output_tokens_per_s or 0) / point.gpus_per_instance),
        "rps_per_node": _round(point.rps_per_node(gpus_per_node)), "provenance": point.provenance,
    }  # fmt: skip


def curve_document(answer: CurveAnswer) -> dict:
    q = answer.query
    return {
        "model": q.model, "gpu": q.gpu, "tp": q.tp, "precision": q.precision, "isl": q.isl, "osl": q.osl,
        "percentile": answer.percentile, "token_budget": q.token_budget, "arrivals": q.arrivals,
        "limits": {"ttft_ms": q.ttft_ms, "tpot_ms": q.tpot_ms, "itl_ms": q.itl_ms, "e2e_ms": q.e2e_ms},
        "gpus_per_node": answer.gpus_per_node,
        "data_points": [point_record(p, answer.gpus_per_node) for p in answer.data_points],
        "modeled_points": [point_record(p, answer.gpus_per_node) for p in answer.modeled_points],
        "chosen": None if answer.chosen is None else point_record(answer.chosen, answer.gpus_per_node),
        "reason": answer.miss_reason,
    } | ({} if answer.landscape is None else {"landscape": landscape_document(answer.landscape)})  # fmt: skip


def landscape_document(landscape) -> dict:
    """Every engine point (tokens/s per GPU, tokens/s per user = 1000/TPOT), the Pareto front, the chosen point."""
    return {
        "isl": landscape.isl, "osl": landscape.osl, "tpot_limit_ms": landscape.tpot_limit_ms,
        "points": [asdict(p) for p in landscape.points], "pareto_front": [asdict(p) for p in landscape.front],
        "chosen": None if landscape.chosen is None else asdict(landscape.chosen), "chosen_note": landscape.chosen_note,
    }  # fmt: skip


def peak_document(answer: PeakAnswer) -> dict:
    return asdict(answer)


def users_document(answer: UsersAnswer) -> dict:
    return asdict(answer)


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


def compare_document(results: tuple[DeploymentResult, ...]) -> dict:
    sides = []
    for r in results:
        plan = r.plan
        sides.append({
            "deployment": r.deployment,
            "status": plan.status if plan else r.no_plan_status,
            "objective_usd_per_year": plan.objective_usd_per_year if plan else None,
            "mip_gap": plan.mip_gap if plan else None,
            "solve_seconds": plan.solve_seconds if plan else None,
            "usd_per_million_output_tokens": _round(r.usd_per_million_output_tokens, 4),
            "output_tokens_per_year": round(r.output_tokens_per_year, 1),
            "gpus": plan.totals.gpus if plan else None,
            "peak_nodes": plan.totals.peak_concurrent_nodes if plan else None,
            "peak_gpus": plan.totals.peak_concurrent_gpus if plan else None,
            "nodes_by_system": plan.totals.nodes_by_system if plan else None,
            "capex_usd": plan.totals.capex_usd if plan else None,
            "infrastructure_capex_usd": plan.totals.infrastructure_capex_usd if plan else None,
            "servers_capex_usd": plan.totals.servers_capex_usd if plan else None,
            "capex_incl_site_usd": plan.totals.capex_incl_site_usd if plan else None,
            "gpu_hours_per_year": round(r.gpu_hours, 1) if plan else None,
            "usd_per_gpu_hour": _round(r.usd_per_gpu_hour, 4),
            "cost_breakdown": asdict(plan.totals.cost_breakdown) if plan else None,
            "diagnosis": list(r.infeasible),
            "note": r.note or None,
        })  # fmt: skip
    from planner.api import break_even

    even = break_even(results)
    return {"deployments": sides, "break_even": None if even is None else asdict(even)}


def simulation_document(checks) -> dict:
    """`planner simulate --json`: per workload and period, the run, its statistics and the verdict per limit
    (`verdict` on each check and workload: holds | misses | inconclusive | not simulated; `extra_seeds` and
    `seeds_note`: what was done about inconclusive verdicts); `verdict` over all of them; `all_ok` (every simulated
    check holds) kept for older readers."""
    from planner.simulate.verdicts import overall_verdict

    items = []
    for check in checks:
        item = asdict(check)
        item["rate_rps"] = round(check.rate_rps, 6)
        del item["wall_s"]  # machine time: the same inputs give the same bytes
        items.append(item)
    return {"workloads": items, "verdict": overall_verdict(checks), "all_ok": all(c.ok for c in checks if c.ok is not None)}


def repair_document(repair) -> dict:
    """`planner plan --verify --repair --json`: what was raised, why (each step's conclusive `misses`), the cost
    before and after, the final `verdict`, why the repair `stopped` and the `inconclusive` checks it left alone."""
    return {
        "steps": [asdict(step) for step in repair.steps], "verdict": repair.verdict, "stopped": repair.stopped,
        "inconclusive": list(repair.inconclusive), "all_ok": repair.all_ok,
        "original_annual_cost_usd": repair.original_annual_cost_usd, "original_nodes": repair.original_nodes,
        "annual_cost_usd": repair.plan.totals.annual_cost_usd, "nodes": repair.plan.totals.nodes,
    }  # fmt: skip


def workload_analysis_document(answer) -> dict:
    """`planner workload analyze --json`: the analysis (windows, profile, histogram, variants) and the block."""
    document = {"analysis": asdict(answer.analysis), "block": answer.block}
    if answer.scenario_document is not None:
        document["scenario"] = answer.scenario_document
        document["kept_from_base"] = list(answer.kept)
    if answer.scaled:
        document["demand_scaled"] = answer.scaled
    return document


def ingest_document(result, written_to: str | None) -> dict:
    """`planner ingest --json`: the rows as they were written, and where."""
    rows = [row.model_dump(exclude={"table", "line", "origin", "path"}) for row in result.rows]
    return {"written": written_to, "rows": rows, "notes": list(result.notes)}


def sensitivity_document(result) -> dict:
    """`planner sensitivity --json`: the nominal plan's break point and one record per grid point."""
    return asdict(result)


def sensitivity_csv(result) -> str:
    import pandas as pd

    from planner.report.spreadsheet import csv_safe_frame

    frame = pd.DataFrame([asdict(point) for point in result.points])
    return csv_safe_frame(frame).to_csv(index=False, lineterminator="\n")


def write_sweep_table(records, path) -> None:
    """The sweep's points as CSV (text cells made inert for spreadsheets) or Parquet (needs the optional pyarrow:
    .[parquet]), written atomically with the umask's mode (planner.report.files)."""
    import io

    import pandas as pd

    from planner.errors import PlannerInputError
    from planner.report.files import write_bytes_atomic, write_text_atomic
    from planner.report.spreadsheet import csv_safe_frame

    frame = pd.DataFrame(list(records))
    if str(path).lower().endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise PlannerInputError("--out", "out", "Parquet needs pyarrow: pip install '.[parquet]' in the planner checkout (or write .csv)") from None
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        write_bytes_atomic(path, buffer.getvalue())
        return
    write_text_atomic(path, csv_safe_frame(frame).to_csv(index=False, lineterminator="\n"))
