"""The Python API of `planner deploy`: a plan's pools as engine launch files, Kubernetes manifests, llm-d values or
Dynamo graphs."""

from __future__ import annotations

from pathlib import Path

from planner.catalog import CatalogDirs
from planner.scenario import ScenarioOverrides


def deploy(scenario_path: Path | str, target: str, out_dir: Path | str | None = None, plan_document: dict | None = None,
           catalog_dirs: CatalogDirs = None, solver: str | None = None, time_limit_s: float | None = None,
           progress=None, overrides: ScenarioOverrides | None = None, force: bool = False, inputs=()):  # fmt: skip
    """Plan the scenario (or take a saved plan, checked against it) and build the files of `target` (vllm, sglang,
    k8s, llm-d, dynamo: planner.deploy.build_deployment). With `out_dir` they are written there (a new or empty folder, a previous
    deploy's, or any with `force`; never over `inputs`, the files the command reads): checked before planning,
    written only once everything is built. Returns the planner.deploy.Deployment."""
    from planner.api.planning import plan_in_context
    from planner.deploy import build_deployment, check_target
    from planner.deploy.output import check_folder, write_folder
    from planner.report.files import scenario_inputs

    check_target(target)
    inputs = list(inputs) or scenario_inputs(scenario_path, catalog_dirs)
    if out_dir is not None:
        check_folder(Path(out_dir), ("README.md",), force, inputs, "deploy")
    planned = plan_in_context(scenario_path, catalog_dirs, solver, time_limit_s, progress, overrides=overrides,
                              plan_document=plan_document)  # fmt: skip
    deployment = build_deployment(planned, target)
    if out_dir is not None:
        write_folder(Path(out_dir), deployment.files, force, inputs, "deploy")
    return deployment
