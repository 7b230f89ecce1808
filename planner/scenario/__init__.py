"""Scenarios: the workloads to serve, their latency limits, where nodes may come from, and the limits.

`load_scenario(path, catalog)` reads YAML, validates its structure (pydantic, unknown fields rejected) and then
checks it against the catalog (one `check_*` function per rule). The result is a frozen `Scenario` whose
workloads carry resolved token lengths and peak request rates.
"""

from __future__ import annotations

from pathlib import Path

from planner.catalog import Catalog
from planner.cloud import SystemOffer  # noqa: F401 (read as scenario.SystemOffer)
from planner.errors import PlannerInputError
from planner.loading import read_yaml, validate_model
from planner.scenario.build import (  # noqa: F401 (re-exported)
    build_scenario,
    migrate_metrics,
    period_demand_rps,
    perf_layers,
    resolve_periods,
    resolve_workload,
    start_up_minutes,
)
from planner.scenario.checks import SITES_OF_DEPLOYMENT
from planner.scenario.overrides import ScenarioOverrides, apply_overrides, derived_site  # noqa: F401 (re-exported)
from planner.scenario.resolved import (  # noqa: F401 (re-exported)
    Bucket,
    Limits,
    OnPremCosts,
    Period,
    Scenario,
    Slo,
    Workload,
)
from planner.scenario.spec import (  # noqa: F401 (re-exported)
    HOURS_PER_YEAR,
    MAX_FACTOR,
    MAX_MS,
    MAX_NODES,
    MAX_PERIOD_RPS,
    MAX_RPS,
    MAX_USD,
    PER_PERIOD_PRICING,
    BucketSpec,
    CloudSite,
    DemandFactor,
    Deployment,
    EngineSpec,
    FleetSpec,
    ForecastSpec,
    InfrastructureSpec,
    LabelName,
    LimitsSpec,
    OnPremSite,
    PerfSource,
    PerfSourceChoice,
    PerfSpec,
    PeriodSpec,
    PositiveUsd,
    PositiveUsdPerHour,
    PrefixCacheSpec,
    RobustnessSpec,
    ScenarioSpec,
    SitesSpec,
    SloSpec,
    SolverName,
    SolverSpec,
    SpeculativeSpec,
    UsersSpec,
    WorkloadMode,
    WorkloadSpec,
)


def _spec(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None) -> tuple[ScenarioSpec, dict[str, str]]:
    """A scenario file read and validated, with one run's overrides; and a note per site the overrides derived."""
    file = str(path)
    return apply_overrides(validate_model(ScenarioSpec, read_yaml(Path(path)), file), overrides, catalog, file)


def _deployment_variants(spec: ScenarioSpec, catalog: Catalog, file: str,
                         notes: dict[str, str] | None = None) -> dict[str, Scenario]:  # fmt: skip
    """The scenario once per deployment whose sites it has (each with the notes of the derived sites it uses)."""
    notes = notes or {}
    return {
        deployment: build_scenario(spec.model_copy(update={"deployment": deployment}), catalog, file,
                                   tuple(notes[s] for s in sites if s in notes))  # fmt: skip
        for deployment, sites in SITES_OF_DEPLOYMENT.items() if all(getattr(spec.sites, s) is not None for s in sites)
    }  # fmt: skip


def load_scenario_deployments(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None = None) -> dict[str, Scenario]:
    """The scenario once per deployment its sites allow (on-prem, cloud, hybrid), for side-by-side comparison."""
    spec, notes = _spec(path, catalog, overrides)
    return _deployment_variants(spec, catalog, str(path), notes)


def comparable_deployments(path: Path | str, catalog: Catalog,
                           overrides: ScenarioOverrides | None = None) -> tuple[dict[str, Scenario], dict[str, str]]:  # fmt: skip
    """What `compare` sets side by side: on-prem, cloud and hybrid, both ways. A site the scenario lacks is made of
    the catalog's priced systems of the GPUs its other site runs (`derived_site`: cloud instances for an on-prem
    scenario, servers for a cloud one), at catalog prices and defaults, the scenario's own site as it is. Returns
    (scenarios, a note per deployment that says what was derived, or why a deployment is missing)."""
    spec, derived = _spec(path, catalog, overrides)
    notes: dict[str, str] = {}
    for site, deployment in (("cloud", "cloud"), ("on_prem", "on-prem")):
        if getattr(spec.sites, site) is not None:
            continue
        made, note = derived_site(spec, catalog, site)
        if made is None:
            notes[deployment] = notes["hybrid"] = f"not compared: {note}"
            continue
        spec = spec.model_copy(update={"sites": spec.sites.model_copy(update={site: made})})
        derived[site] = note
    for deployment, sites in SITES_OF_DEPLOYMENT.items():
        said = [derived[s] for s in sites if s in derived]
        if said and deployment not in notes:
            notes[deployment] = "; ".join(said)
    return _deployment_variants(spec, catalog, str(path), derived), notes


def scenario_catalog_dirs(path: Path | str) -> list[Path]:
    """The user catalog directories a scenario names (`catalog:`), relative to the scenario file."""
    path = Path(path)
    data = read_yaml(path)
    named = data.get("catalog") if isinstance(data, dict) else None
    if named is None:
        return []
    entries = [named] if isinstance(named, str) else named
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise PlannerInputError(str(path), "catalog", "expected a directory path or a list of them")
    directories = []
    for index, entry in enumerate(entries):
        directory = Path(entry) if Path(entry).is_absolute() else path.parent / entry
        if not directory.is_dir():
            where = "catalog" if isinstance(named, str) else f"catalog[{index}]"
            raise PlannerInputError(str(path), where, f"catalog directory '{entry}' not found (relative to the scenario file)")
        directories.append(directory)
    return directories


def load_scenario(path: Path | str, catalog: Catalog, overrides: ScenarioOverrides | None = None) -> Scenario:
    """Read, validate and resolve a scenario file, with one run's overrides if any; any problem raises
    PlannerInputError (file, field, allowed)."""
    spec, notes = _spec(path, catalog, overrides)
    return build_scenario(spec, catalog, str(path), tuple(notes.values()))

