"""`planner bench` and `planner check`: the benchmark that checks a deployed plan, and its results judged against
the plan with a calibration catalog of what was measured (docs/deploy.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import (
    CatalogOption,
    DebugOption,
    DeploymentOption,
    EnginesOption,
    PlanFileOption,
    PrecisionsOption,
    ProgressMode,
    ProgressOption,
    ScenarioArgument,
    SolverOption,
    SystemsOption,
    TimeLimitOption,
    _examples,
    _overrides,
    _progress,
    _run,
    api,
    app,
    files,
)


@app.command(epilog=_examples(
    "planner bench scenarios/agent-prefix-cache.yaml --tool aiperf --out bench/",
    "planner plan scenarios/agent-prefix-cache.yaml --json > plan.json && "
    "planner bench scenarios/agent-prefix-cache.yaml --plan plan.json --tool vllm --endpoint http://10.0.0.5:8000 --out bench/",
))
def bench(
    scenario: ScenarioArgument,
    tool: Annotated[str, typer.Option("--tool", help="aiperf | guidellm | vllm (`vllm bench serve`).")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the scripts, expected.json and README.md.")],
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Base URL of the deployed Service (default: "
                                                 "http://<workload>:8000, the k8s Service of `planner deploy`).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder that holds no previous bench.")] = False,
    plan_file: PlanFileOption = None,
    deployment: DeploymentOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Write, per workload, the benchmark script that reproduces its planned load against the deployed endpoint (lengths, Poisson arrivals at the busiest period's peak, for the Service and one instance per pool), flags checked against the tool's own argument list, and expected.json with the plan's figures and their expected-error bands."""

    def action() -> None:
        from planner.cli.planning import _plan_document

        inputs = files.scenario_inputs(scenario, catalog, plan_file)
        overrides = _overrides(deployment, systems, precisions, engines)
        document = _plan_document(plan_file)
        with _progress(progress_mode) as progress:
            result = api.bench(scenario, tool, out, document, catalog, endpoint, solver.value if solver else None,
                               time_limit, progress, overrides, force, inputs)  # fmt: skip
        scripts = [name for name in result.files if name.endswith(".sh")]
        print(f"bench ({result.tool}) written to {out}: {len(scripts)} scripts, expected.json, README.md "
              f"(see {out / 'README.md'})")  # fmt: skip

    _run(action, debug, time_limit_s=time_limit)


@app.command(epilog=_examples(
    "planner check scenarios/agent-prefix-cache.yaml --plan plan.json bench/results/ --out calibration/",
    "planner check scenarios/agent-prefix-cache.yaml ../shared/real/bench/vllm --tool vllm --json",
))
def check(
    scenario: ScenarioArgument,
    results: Annotated[list[Path], typer.Argument(help="Result files or folders (searched): AIPerf, genai-perf, "
                                                       "GuideLLM or `vllm bench serve` outputs.", show_default=False)],
    tool: Annotated[str, typer.Option("--tool", help="auto (by file name) | vllm | genai-perf | aiperf | guidellm.")] = "auto",
    out: Annotated[Path | None, typer.Option("--out", help="Folder for the calibration catalog (catalog.yaml and "
                                             "benchmarks/check.csv; use it with --catalog).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder that holds no previous check.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The verdicts and changes as JSON.")] = False,
    plan_file: PlanFileOption = None,
    deployment: DeploymentOption = None,
    systems: SystemsOption = None,
    precisions: PrecisionsOption = None,
    engines: EnginesOption = None,
    solver: SolverOption = None,
    time_limit: TimeLimitOption = None,
    catalog: CatalogOption = None,
    progress_mode: ProgressOption = ProgressMode.auto,
    debug: DebugOption = False,
) -> None:
    """Judge benchmark results against the plan: each run matched to a pool (model, GPU, engine, layout, precision), measured vs the model at the run's own load per metric (within band, optimistic, pessimistic); then a calibration catalog of what was measured (it moves only the engines it measured), the scenario planned again with it, and what changes (nodes per pool, cost, verdicts)."""

    def action() -> None:
        import json

        from planner.bench.report import document, text
        from planner.cli.planning import _plan_document

        inputs = files.scenario_inputs(scenario, catalog, plan_file)
        overrides = _overrides(deployment, systems, precisions, engines)
        plan = _plan_document(plan_file)
        with _progress(progress_mode) as progress:
            report = api.check(scenario, results, plan, catalog, tool, out, force, solver.value if solver else None,
                               time_limit, progress, overrides, inputs)  # fmt: skip
        print(json.dumps(document(report), indent=1) if as_json else text(report), end="" if not as_json else "\n")

    _run(action, debug, time_limit_s=time_limit)
