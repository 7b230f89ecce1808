"""The Python API of `planner bench` and `planner check`: the benchmark that checks a deployed plan, and its results
judged against the plan, with a calibration catalog of what was measured and the plan made again with it."""

from __future__ import annotations

from pathlib import Path

from planner.catalog import CatalogDirs
from planner.scenario import ScenarioOverrides


def bench(scenario_path: Path | str, tool: str, out_dir: Path | str | None = None, plan_document: dict | None = None,
          catalog_dirs: CatalogDirs = None, endpoint: str | None = None, solver: str | None = None,
          time_limit_s: float | None = None, progress=None, overrides: ScenarioOverrides | None = None,
          force: bool = False, inputs=()):  # fmt: skip
    """Plan the scenario (or take a saved plan, checked against it) and build the benchmark scripts of `tool`
    (aiperf, guidellm, vllm), expected.json and a README (planner.bench.build_bench). With `out_dir` they are
    written there (a new or empty folder, a previous bench's, or any with `force`; never over `inputs`): checked
    before planning, written once everything is built. Returns the planner.bench.BenchSet."""
    from planner.api.planning import plan_in_context
    from planner.bench import build_bench, check_endpoint, check_tool
    from planner.deploy.output import check_folder, write_folder
    from planner.report.files import scenario_inputs

    check_tool(tool)
    check_endpoint(endpoint)
    inputs = list(inputs) or scenario_inputs(scenario_path, catalog_dirs)
    if out_dir is not None:
        check_folder(Path(out_dir), ("README.md", "expected.json"), force, inputs)
    planned = plan_in_context(scenario_path, catalog_dirs, solver, time_limit_s, progress, overrides=overrides,
                              plan_document=plan_document)  # fmt: skip
    result = build_bench(planned, tool, endpoint)
    if out_dir is not None:
        write_folder(Path(out_dir), result.files, force, inputs)
    return result


def check(scenario_path: Path | str, results, plan_document: dict | None = None, catalog_dirs: CatalogDirs = None,
          tool: str = "auto", out_dir: Path | str | None = None, force: bool = False, solver: str | None = None,
          time_limit_s: float | None = None, progress=None, overrides: ScenarioOverrides | None = None, inputs=()):  # fmt: skip
    """Judge benchmark RESULTS against the plan (a saved plan, or the scenario planned), write the calibration
    catalog of what they measured (with `out_dir`: a new or empty folder, a previous check's, or any with `force`;
    never over an input), plan the scenario again with it on top of its catalogs and say what changes.
    Returns planner.bench.report.CheckReport."""
    import tempfile

    from planner.api.planning import plan_in_context
    from planner.bench.calibrate import (
        calibration_rows,
        catalog_files,
        changes,
        plan_summary,
    )
    from planner.bench.check import check_runs, check_tool, result_files
    from planner.deploy.output import check_folder, write_folder
    from planner.bench.report import CheckReport
    from planner.catalog import as_directory_list
    from planner.deploy.pools import plan_pools
    from planner.errors import InfeasiblePlanError
    from planner.report.files import scenario_inputs

    check_tool(tool)
    results = [Path(r) for r in results]
    inputs = [*(list(inputs) or scenario_inputs(scenario_path, catalog_dirs)), *results]
    names = ("catalog.yaml", "benchmarks/check.csv")
    result_files(results, tool)  # every RESULTS path there and holding result files, before planning
    if out_dir is not None:
        check_folder(Path(out_dir), names, force, inputs, "check")
    planned = plan_in_context(scenario_path, catalog_dirs, solver, time_limit_s, progress, overrides=overrides,
                              plan_document=plan_document)  # fmt: skip
    runs, unmatched = check_runs(planned, results, tool)
    pools = plan_pools(planned.plan, planned.scenario, planned.catalog)
    rows, notes = calibration_rows(runs, pools)
    files = catalog_files(rows, planned.scenario.name, sorted({r.file for r in runs}))
    before = plan_summary(planned)
    replanned = after = after_runs = None
    infeasible = ""
    if rows:
        with tempfile.TemporaryDirectory(prefix="planner-check-") as scratch:
            layer = Path(out_dir) if out_dir is not None else Path(scratch)
            write_folder(layer, files, force, inputs, "check")
            try:
                replanned = plan_in_context(scenario_path, [*as_directory_list(catalog_dirs), layer], solver, time_limit_s,
                                            progress, overrides=overrides)  # fmt: skip
                after_runs, _ = check_runs(replanned, results, tool)
                after = plan_summary(replanned)
            except InfeasiblePlanError as error:
                infeasible = str(error)
    flagged = sum(len(r.flagged) for r in runs)
    changed = changes(before, after, flagged, sum(len(r.flagged) for r in after_runs)) if after is not None else ()
    return CheckReport(planned.scenario.name, runs, unmatched, rows, tuple(notes), files,
                       str(out_dir) if out_dir is not None and rows else None, before, after, after_runs or (),
                       changed, infeasible)  # fmt: skip
