"""`planner deploy`: the plan's pools as engine launch scripts, Kubernetes manifests, llm-d values or Dynamo graphs
(docs/deploy.md)."""

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
    "planner deploy scenarios/moe-engines.yaml --target vllm --out deploy/",
    "planner plan scenarios/agent-prefix-cache.yaml --json > plan.json && "
    "planner deploy scenarios/agent-prefix-cache.yaml --plan plan.json --target k8s --out k8s/",
    "planner deploy scenarios/agent-prefix-cache.yaml --plan plan.json --target dynamo --out dynamo/",
))
def deploy(
    scenario: ScenarioArgument,
    target: Annotated[str, typer.Option("--target", help="vllm | sglang (a serve-<pool>.sh per pool planned on that "
                                                         "engine) | k8s (Deployments, LeaderWorkerSets, Services) | "
                                                         "llm-d (llm-d-modelservice Helm values per serving group, "
                                                         "vLLM pools) | dynamo (NVIDIA Dynamo DynamoGraphDeployments, "
                                                         "vLLM and SGLang pools). trtllm is not built: see "
                                                         "docs/deploy.md.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the files and their README.md.")],
    force: Annotated[bool, typer.Option("--force", help="Write into a non-empty folder that holds no previous deploy.")] = False,
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
    """Write the plan's engine launch commands (vLLM, SGLang), Kubernetes manifests, llm-d values or Dynamo graphs, with flags checked against the planned engine version's own argument list, and a README of what the plan assumed."""

    def action() -> None:
        from planner.cli.planning import _plan_document

        inputs = files.scenario_inputs(scenario, catalog, plan_file)
        overrides = _overrides(deployment, systems, precisions, engines)
        document = _plan_document(plan_file)
        with _progress(progress_mode) as progress:
            result = api.deploy(scenario, target, out, document, catalog, solver.value if solver else None, time_limit,
                                progress, overrides, force, inputs)  # fmt: skip
        made = len(result.generated)
        print(f"deploy ({result.target}) written to {out}: {len(result.files)} files, {made} of {len(result.pools)} "
              f"pools generated (see {out / 'README.md'})")  # fmt: skip

    _run(action, debug, time_limit_s=time_limit)
