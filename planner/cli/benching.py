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
