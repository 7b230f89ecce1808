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
    from planner.bench.output import check_folder, write_folder
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
