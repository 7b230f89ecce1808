"""A validated scenario file resolved against the catalog into the frozen `Scenario` (`build_scenario`): token
lengths from words, peak rates from users or means, periods and forecasts, latency limits at their percentile, the
sites' offers with their costs, the catalog's defaults where the file is silent (each with its source)."""

from __future__ import annotations

import math

from planner.catalog import Catalog
from planner.cloud import SystemOffer, cloud_offers
from planner.errors import PlannerInputError
from planner.infrastructure import (
    FINANCE_FIELDS,
    INFRASTRUCTURE_FIELDS,
    Figure,
    Infrastructure,
)
from planner.metrics import METRICS_VERSION
from planner.requirements import peak_rps_from_mean, rps_from_users, words_to_tokens
from planner.scenario.checks import (
    check_forecasts,
    check_lengths_fit_context,
    check_limits,
    check_periods,
    check_prices_known,
    check_site_systems,
    check_sites_match_deployment,
    check_speculation,
    check_unique_workload_names,
    resolve_names,
)
from planner.scenario.resolved import (
    Bucket,
    Limits,
    OnPremCosts,
    Period,
    Scenario,
    Slo,
    Workload,
)
from planner.scenario.spec import (
    HOURS_PER_YEAR,
    MAX_PERIOD_RPS,
    PrefixCacheSpec,
    ScenarioSpec,
    SpeculativeSpec,
    WorkloadSpec,
)


def perf_layers(source: str) -> tuple[str, ...]:
    from planner.perf import PERF_SOURCE_LAYERS

    return PERF_SOURCE_LAYERS[source]


def resolve_workload(spec: WorkloadSpec, words_per_token: float, default_quantile: float) -> Workload:
    """Lengths in tokens (words at `words_per_token`) and the peak rate to size for."""
    if spec.buckets is not None:
        buckets = tuple(Bucket(b.isl_tokens, b.osl_tokens, b.share, b.max_isl_tokens, b.max_osl_tokens) for b in spec.buckets)
    else:
        isl = spec.isl_tokens if spec.isl_tokens is not None else words_to_tokens(spec.words_in, words_per_token)
        osl = spec.osl_tokens if spec.osl_tokens is not None else words_to_tokens(spec.words_out, words_per_token)
        buckets = (Bucket(int(isl), int(osl), 1.0),)
    mean, quantile = None, None
    if spec.peak_rps is not None:
        peak, note = spec.peak_rps, "peak_rps as given"
    else:
        if spec.mean_rps is not None:
            mean, what = spec.mean_rps, f"mean {spec.mean_rps:g} rps"
        else:
            users = spec.users
            mean = rps_from_users(users.daily_active_users, users.requests_per_user, users.working_hours_per_day)
            what = (
                f"{users.daily_active_users:g} users x {users.requests_per_user:g} requests over "
                f"{users.working_hours_per_day:g} h = mean {mean:.6g} rps"
            )
        explicit_none = "peak_quantile" in spec.model_fields_set and spec.peak_quantile is None
        if explicit_none:
            peak, note = mean, f"{what}, sized for the mean (peak_quantile: null)"
        else:
            quantile = spec.peak_quantile if spec.peak_quantile is not None else default_quantile
            peak = peak_rps_from_mean(mean, quantile)
            note = f"{what}, Poisson {quantile:g} quantile -> {peak:g} rps"
    return Workload(
        name=spec.name,
        model=spec.model,
        isl_tokens=round(sum(b.isl_tokens * b.share for b in buckets)),
        osl_tokens=round(sum(b.osl_tokens * b.share for b in buckets)),
        buckets=buckets,
        peak_rps=_clean_rate(peak),
        mean_rps=mean,
        peak_quantile=quantile,
        requests_per_user=spec.users.requests_per_user if spec.users is not None else None,
        demand_note=note,
        mode=spec.mode,
        slo=Slo(spec.slo.ttft_ms, spec.slo.tpot_ms, spec.slo.itl_ms, spec.slo.e2e_ms, spec.slo.percentile),
        precisions=tuple(spec.precisions) if spec.precisions is not None else None,
        engines=tuple(dict.fromkeys(spec.engines)),
        prefix_cache=_prefix_cache(spec.prefix_cache),
    )


def _check_prefix_fits(workload: Workload, index: int, file: str) -> None:
    """A cached prefix is part of a prompt: one as long as every prompt (its longest bucket's) cannot be, and would
    be cut to the prompt silently (a 6,000-token prefix of 2,000-token prompts)."""
    cache = workload.prefix_cache
    longest = max(b.isl_tokens for b in workload.buckets)
    if cache is not None and cache.tokens >= longest:
        raise PlannerInputError(
            file, f"workloads[{index}:{workload.name}].prefix_cache.prefix_tokens",
            f"{cache.tokens:,} tokens; allowed: fewer than the prompt ({longest:,} tokens, its longest bucket's isl): "
            "the prefix is the cached start of each prompt",
        )  # fmt: skip


def _prefix_cache(spec: PrefixCacheSpec | None):
    from planner.perf.types import PrefixCache

    return None if spec is None else PrefixCache(spec.prefix_tokens, spec.hit_rate)


def _clean_rate(value: float) -> float:
    return round(float(value), 9)  # float noise must not buy a node: 678720 x 3 / 28800 is 70.7


def period_demand_rps(workload: Workload, factor: float) -> float:
    """Peak demand of a workload in a period: factor x peak, or the Poisson quantile of factor x mean."""
    if workload.mean_rps is None:
        return _clean_rate(workload.peak_rps * factor)
    mean = workload.mean_rps * factor
    if workload.peak_quantile is None:
        return _clean_rate(mean)
    return _clean_rate(peak_rps_from_mean(mean, workload.peak_quantile))


def resolve_periods(spec: ScenarioSpec, workloads: list[Workload], file: str) -> tuple[Period, ...]:
    """The scenario's periods (default: one period, the whole year at peak demand)."""
    if spec.periods is None:
        whole_year = [Period("all", HOURS_PER_YEAR, {w.name: w.peak_rps for w in workloads}, _traffic(workloads, {}))]
        _check_forecast_demand(spec, whole_year, file)
        return tuple(whole_year)
    names = {w.name for w in workloads}
    periods = []
    for index, period in enumerate(spec.periods):
        for name, factor in period.demand_factor.items():
            field = f"periods[{index}:{period.name}].demand_factor.{name}"
            if name not in names:
                raise PlannerInputError(file, field, f"unknown workload; allowed: {', '.join(sorted(names))}")
            if factor < 0:
                raise PlannerInputError(file, field, f"must be >= 0 (got {factor:g})")
        demand = {w.name: period_demand_rps(w, period.demand_factor.get(w.name, 1.0)) for w in workloads}
        for name, rps in demand.items():
            _check_demand_rps(rps, file, f"periods[{index}:{period.name}].demand_factor.{name}",
                              f"the period's demand of {name}", "this factor")  # fmt: skip
        periods.append(Period(period.name, period.hours_per_year, demand, _traffic(workloads, period.demand_factor)))
    _check_forecast_demand(spec, periods, file)
    return tuple(periods)


def _check_racks_hold_a_node(infrastructure: Infrastructure, systems: list, file: str) -> None:
    """A rack the scenario sizes holds whole nodes: one smaller than an offered node (in rack units or power) would
    be priced as fractions of nodes (a 0.1 kW rack: 1,326 racks for 13 DGX H100), so it is refused, naming the
    field. The catalog's default rack (41 kW, 42U) is a typical site's: a rack-scale system larger than it (GB200
    NVL72, 132 kW) is counted as the racks its power and height fill, as before."""
    for name, attribute, unit in (("kw_per_rack", "power_kw", "kW"), ("rack_units_per_rack", "rack_units", "RU")):
        figure = infrastructure.figures[name]
        if figure.kind != "user":
            continue
        largest = max((s for s in systems if getattr(s, attribute) is not None), key=lambda s: getattr(s, attribute), default=None)
        if largest is not None and getattr(largest, attribute) > figure.value:
            raise PlannerInputError(
                file, f"sites.on_prem.infrastructure.{name}", f"a rack of {figure.value:g} {unit} holds no {largest.id} node ({getattr(largest, attribute):g} "
                f"{unit}); allowed: at least the largest node's {getattr(largest, attribute):g} {unit}",
            )  # fmt: skip


def _check_forecast_demand(spec: ScenarioSpec, periods: list[Period], file: str) -> None:
    """A forecast scales every period's demand: bounded as the periods' own demand is (MAX_PERIOD_RPS), by name."""
    for index, forecast in enumerate(spec.robustness.demand_forecasts):
        for name, factor in forecast.scale.items():
            rps = max((p.demand_rps.get(name, 0.0) * factor for p in periods), default=0.0)
            _check_demand_rps(rps, file, f"robustness.demand_forecasts[{index}:{forecast.name}].scale.{name}",
                              f"the forecast's demand of {name}", "this scale")  # fmt: skip


def _check_demand_rps(rps: float, file: str, field: str, what: str, knob: str) -> None:
    """One bound on a demand after its factors: finite and at most MAX_PERIOD_RPS, named by the field that set it."""
    if not math.isfinite(rps) or rps > MAX_PERIOD_RPS:
        raise PlannerInputError(file, field, f"{what} comes to {rps:.4g} rps; allowed: a finite rate up to "
                                             f"{MAX_PERIOD_RPS:,.0f} rps (check the workload's rate and {knob})")  # fmt: skip


def _traffic(workloads: list[Workload], factors: dict[str, float]) -> dict[str, float]:
    return {
        w.name: (w.mean_rps if w.mean_rps is not None else w.peak_rps) * factors.get(w.name, 1.0) for w in workloads
    }


def start_up_minutes(spec: ScenarioSpec, catalog: Catalog) -> tuple[float, str]:
    """A rented node's lead time and where it comes from: the scenario's sites.cloud.start_up_minutes ('scenario';
    0 without a cloud site), else the catalog default ('catalog default (kind): its source')."""
    given = spec.sites.cloud.start_up_minutes if spec.sites.cloud is not None else 0.0
    if given is not None:
        return given, "scenario"
    default = catalog.defaults.cloud_start_up_minutes
    return default.value, f"catalog default ({default.kind}): {default.source}"


def _offers(spec: ScenarioSpec, catalog: Catalog, file: str) -> tuple[SystemOffer, ...]:
    offers = []
    use_on_prem = spec.deployment in ("on-prem", "hybrid") and spec.sites.on_prem is not None
    use_cloud = spec.deployment in ("cloud", "hybrid") and spec.sites.cloud is not None
    if use_on_prem:
        for system_id in spec.sites.on_prem.systems:
            system = catalog.systems[system_id]
            override = spec.sites.on_prem.price_usd.get(system_id)
            offers.append(
                SystemOffer(
                    system=system_id, site="on-prem", pricing="capex",
                    price_usd=override if override is not None else system.price_usd,
                    usd_per_hour=None, power_kw=system.power_kw, rack_units=system.rack_units,
                    price_note="scenario override" if override is not None else f"catalog ({system.price_source_kind or 'source'})",
                )
            )
    if use_cloud:
        offers.extend(cloud_offers(spec.sites.cloud, catalog, file, start_up_minutes(spec, catalog)[0] / 60.0))
    return tuple(offers)


def build_scenario(spec: ScenarioSpec, catalog: Catalog, file: str, site_notes: tuple[str, ...] = ()) -> Scenario:
    """Check a validated spec against the catalog and resolve it. `site_notes`: what a run derived of its sites
    (`derived_site`), said in the plan."""
    check_unique_workload_names(spec, file)
    spec = resolve_names(spec, catalog, file)
    check_sites_match_deployment(spec, file)
    check_site_systems(spec, catalog, file)
    check_prices_known(spec, catalog, file)
    check_periods(spec, file)
    check_limits(spec, catalog, file)
    check_forecasts(spec, file)
    check_speculation(spec, catalog, file)
    spec, metrics_notes, metrics_migrated = migrate_metrics(spec, file)
    defaults = catalog.defaults
    words_per_token = spec.words_per_token if spec.words_per_token is not None else defaults.words_per_token.value
    workloads = [resolve_workload(w, words_per_token, defaults.peak_quantile.value) for w in spec.workloads]
    for index, workload in enumerate(workloads):
        _check_prefix_fits(workload, index, file)
    check_lengths_fit_context(spec, workloads, catalog, file)
    on_prem = spec.sites.on_prem
    costs = None
    if on_prem is not None:

        def pick(name: str) -> float:
            given = getattr(on_prem, name)
            return given if given is not None else getattr(defaults, name).value

        included = on_prem.infrastructure.include
        figures = {name: _figure(getattr(on_prem, name), getattr(defaults, name))
                   for name in ("amortization_years", "usd_per_kwh", "pue", "utilization_power_factor", *FINANCE_FIELDS)}
        if not included:  # the servers alone: no facility, software or infrastructure
            for name in ("software_usd_per_gpu_per_year", "facility_usd_per_kw_per_month"):
                figures[name] = Figure(0.0, "sites.on_prem.infrastructure.include: false", "user")
        infrastructure = Infrastructure({name: _figure(getattr(on_prem.infrastructure, name), getattr(defaults, name))
                                         for name in INFRASTRUCTURE_FIELDS}) if included else None  # fmt: skip
        if infrastructure is not None:
            _check_racks_hold_a_node(infrastructure, [catalog.systems[s] for s in on_prem.systems], file)
        costs = OnPremCosts(
            pick("amortization_years"), pick("usd_per_kwh"), pick("pue"),
            pick("utilization_power_factor"), pick("maintenance_fraction_per_year"),
            on_prem.space_usd_per_rack_unit_per_year,
            cost_of_capital_per_year=figures["cost_of_capital_per_year"].value,
            software_usd_per_gpu_per_year=figures["software_usd_per_gpu_per_year"].value,
            facility_usd_per_kw_per_month=figures["facility_usd_per_kw_per_month"].value,
            installation_fraction_of_capex=figures["installation_fraction_of_capex"].value,
            figures=figures, infrastructure=infrastructure,
        )
    limits = spec.limits
    lead_minutes, lead_source = start_up_minutes(spec, catalog)
    return Scenario(
        name=spec.name,
        file=file,
        description=spec.description,
        deployment=spec.deployment,
        words_per_token=words_per_token,
        workloads=tuple(workloads),
        periods=resolve_periods(spec, workloads, file),
        offers=_offers(spec, catalog, file),
        on_prem_costs=costs,
        cloud_software=(_figure(spec.sites.cloud.software_usd_per_gpu_per_year, defaults.software_usd_per_gpu_per_year)
                        if spec.sites.cloud is not None else None),
        cloud_minimum_billing_hours=spec.sites.cloud.minimum_billing_hours if spec.sites.cloud is not None else 0.0,
        cloud_start_up_hours=lead_minutes / 60.0,
        cloud_start_up_source=lead_source,
        cloud_demand_growth_per_hour=spec.sites.cloud.demand_growth_per_hour if spec.sites.cloud is not None else 0.0,
        spot_max_share=spec.sites.cloud.spot.max_share if spec.sites.cloud is not None and spec.sites.cloud.spot else 1.0,
        limits=Limits(
            limits.headroom_fraction, limits.power_kw, limits.rack_units, limits.capex_usd, dict(limits.max_gpus),
            limits.spare_nodes_per_system, limits.max_engine_variants, spare_fraction=limits.spare_fraction,
        ),
        perf_sources=perf_layers(spec.perf.source) if spec.perf.source else tuple(spec.perf.sources),
        max_batch_ladder=tuple(sorted(set(spec.engine.max_batch_ladder))),
        tp_ladder=tuple(sorted(set(spec.engine.tp_ladder))),
        solver=spec.solver.name,
        time_limit_s=spec.solver.time_limit_s,
        perf_margin=spec.robustness.perf_margin,
        sizing=spec.perf.sizing,
        confidence=spec.robustness.confidence,
        demand_forecasts=tuple(
            (f.name, tuple(sorted(f.scale.items()))) for f in spec.robustness.demand_forecasts
        ),
        reconfigure_between_periods=spec.fleet.reconfigure_between_periods,
        share_nodes_across_models=spec.fleet.share_nodes_across_models,
        disaggregated=spec.fleet.disaggregated,
        expert_parallel=spec.engine.expert_parallel,
        max_pipeline_nodes=spec.engine.max_pipeline_nodes,
        speculation=_speculation(spec.engine.speculative, catalog),
        token_budget=spec.engine.token_budget,
        metrics_version=spec.metrics_version or 1,
        metrics_notes=metrics_notes,
        site_notes=tuple(site_notes),
        metrics_migrated=metrics_migrated,
    )


def migrate_metrics(spec: ScenarioSpec, file: str) -> tuple[ScenarioSpec, tuple[str, ...], bool]:
    """The one rule for files written before metrics version 2 (docs/metrics.md): without `metrics_version: 2`,
    `slo.itl_ms` meant a request's mean gap between tokens, so it is read as `slo.tpot_ms`. Returns the spec in
    today's metrics, what was read how (for `validate`), and whether a limit moved (the plan then says so too)."""
    if spec.metrics_version == METRICS_VERSION:
        return spec, (f"{file}: metrics_version {METRICS_VERSION}: itl_ms limits one gap between tokens, tpot_ms a "
                      "request's mean gap (docs/metrics.md)",), False  # fmt: skip
    workloads, moved = [], []
    for index, workload in enumerate(spec.workloads):
        slo = workload.slo
        if slo.itl_ms is not None and slo.tpot_ms is not None:
            raise PlannerInputError(
                file, f"workloads[{index}:{workload.name}].slo.itl_ms",
                "both itl_ms and tpot_ms in a file without metrics_version 2, where itl_ms means tpot_ms; "
                "add `metrics_version: 2` at the top of the file to limit single token gaps with itl_ms (docs/metrics.md)",
            )  # fmt: skip
        if slo.itl_ms is not None:
            moved.append(f"workload {workload.name}: itl_ms {slo.itl_ms:g} -> tpot_ms {slo.itl_ms:g}")
            slo = slo.model_copy(update={"tpot_ms": slo.itl_ms, "itl_ms": None})
        workloads.append(workload.model_copy(update={"slo": slo}))
    what = ("; its slo.itl_ms meant a request's mean gap between tokens, today's tpot_ms: " + "; ".join(moved)
            if moved else " (it sets no itl_ms limit, so nothing moves)")  # fmt: skip
    note = (f"{file}: no metrics_version, read as version 1{what}. Add `metrics_version: 2` to the file to use "
            "today's names (itl_ms = one gap between tokens; docs/metrics.md)")  # fmt: skip
    return spec.model_copy(update={"workloads": workloads}), (note,), bool(moved)


def _figure(given: float | None, default) -> Figure:
    """A cost figure as the scenario gives it, or the catalog default with its source and kind."""
    if given is not None:
        return Figure(float(given), "scenario", "user")
    return Figure(default.value, default.source, default.kind)


def _speculation(spec: SpeculativeSpec | None, catalog: Catalog):
    """The engine option as the roofline's Speculation (its draft model, resolved by `resolve_names` and checked by
    `check_speculation`, from the catalog)."""
    if spec is None:
        return None
    from planner.perf.roofline import Speculation

    draft = catalog.models[spec.draft_model] if spec.draft_model is not None else None
    return Speculation(spec.method, spec.draft_tokens, spec.acceptance_rate, draft)
