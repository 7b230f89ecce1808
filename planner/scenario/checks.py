"""Checks of a scenario spec against the catalog: one function per rule, each raising PlannerInputError that
names the file, the field and what is allowed."""

from __future__ import annotations

from planner.catalog import Catalog
from planner.cloud import CommitmentSpec, SpotSpec, SystemOffer, cloud_offers  # noqa: F401 (SystemOffer: read as scenario.SystemOffer)
from planner.errors import PlannerInputError, did_you_mean, unknown_id_message
from planner.scenario.resolved import Workload
from planner.scenario.spec import HOURS_PER_YEAR, ScenarioSpec

# ---- checks against the catalog: one function per rule, all raising PlannerInputError ----


def resolve_names(spec: ScenarioSpec, catalog: Catalog, file: str) -> ScenarioSpec:
    """The spec with every model, system and GPU name replaced by its catalog id (an alias such as
    'meta-llama/Llama-3.3-70B-Instruct', 'p5.48xlarge' or 'H100' is accepted wherever an id is); an unknown name
    raises PlannerInputError with the closest id ("did you mean")."""
    workloads = [
        w.model_copy(update={"model": catalog.resolve("model", w.model, file, f"workloads[{i}:{w.name}].model")})
        for i, w in enumerate(spec.workloads)
    ]
    sites = {}
    for site_key, price_fields in (("on_prem", ("price_usd",)), ("cloud", ("usd_per_hour", "reserved_usd_per_hour"))):
        site = getattr(spec.sites, site_key)
        if site is None:
            continue
        update = {"systems": [catalog.resolve("system", name, file, f"sites.{site_key}.systems[{index}]")
                              for index, name in enumerate(site.systems)]}  # fmt: skip
        for price_field in price_fields:
            update[price_field] = {
                catalog.resolve("system", name, file, f"sites.{site_key}.{price_field}.{name}"): value
                for name, value in getattr(site, price_field).items()
            }
        if site_key == "cloud":
            update.update(_resolve_cloud_market(site, catalog, file))
        sites[site_key] = site.model_copy(update=update)
    max_gpus = {catalog.resolve("gpu", gpu, file, f"limits.max_gpus.{gpu}"): count for gpu, count in spec.limits.max_gpus.items()}
    engine = spec.engine
    if engine.speculative is not None and engine.speculative.draft_model is not None:
        draft = catalog.resolve("model", engine.speculative.draft_model, file, "engine.speculative.draft_model")
        engine = engine.model_copy(update={"speculative": engine.speculative.model_copy(update={"draft_model": draft})})
    return spec.model_copy(update={
        "workloads": workloads, "sites": spec.sites.model_copy(update=sites),
        "limits": spec.limits.model_copy(update={"max_gpus": max_gpus}), "engine": engine,
    })  # fmt: skip


def _resolve_cloud_market(cloud, catalog: Catalog, file: str) -> dict:
    """Catalog ids in the commitments' and spot's system names."""
    def ids(prices: dict, field: str) -> dict:
        return {catalog.resolve("system", name, file, f"{field}.{name}"): value for name, value in prices.items()}

    update = {"commitments": [c.model_copy(update={"usd_per_hour": ids(c.usd_per_hour, f"sites.cloud.commitments[{i}].usd_per_hour")})
                              for i, c in enumerate(cloud.commitments)]}  # fmt: skip
    if cloud.spot is not None:
        systems = cloud.spot.systems
        if systems is not None:
            systems = [catalog.resolve("system", name, file, f"sites.cloud.spot.systems[{i}]") for i, name in enumerate(systems)]
        update["spot"] = cloud.spot.model_copy(update={
            "systems": systems, "usd_per_hour": ids(cloud.spot.usd_per_hour, "sites.cloud.spot.usd_per_hour")})
    return update


def check_speculation(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    """Speculative decoding applies to every workload's engines, so each workload's model must be able to run it:
    `method: mtp` drafts with the model's own multi-token-prediction layers (catalog `mtp_layers`); a draft model
    proposes tokens the target verifies, so it must have an architecture the roofline can time and the target's
    vocabulary (catalog `vocab`: a draft of another tokenizer proposes tokens the target cannot accept)."""
    speculative = spec.engine.speculative
    if speculative is None:
        return
    from planner.perf.roofline import supports_roofline

    field = "engine.speculative.draft_model"
    draft = catalog.models[speculative.draft_model] if speculative.draft_model is not None else None
    if draft is not None and not supports_roofline(draft):
        raise PlannerInputError(file, field, f"'{draft.id}' has no published architecture (layers, hidden, heads) to "
                                "time its draft steps; allowed: a catalog model with one")  # fmt: skip
    for index, workload in enumerate(spec.workloads):
        model = catalog.models[workload.model]
        whose = f"workload {workload.name}'s model {model.id}"
        if speculative.method == "mtp" and not model.mtp_layers:
            raise PlannerInputError(
                file, "engine.speculative.method",
                f"'mtp' drafts with the model's multi-token-prediction layers, and the catalog states none for {whose} "
                "(catalog field mtp_layers); allowed: method 'draft' with a draft_model, or 'mtp' for models whose "
                f"entry gives mtp_layers ({', '.join(m for m, a in sorted(catalog.models.items()) if a.mtp_layers) or 'none'}); "
                "add mtp_layers to the model's entry where its config.json has num_nextn_predict_layers or "
                "mtp_num_hidden_layers > 0",
            )  # fmt: skip
        if draft is None:
            continue
        unknown = [m.id for m in (draft, model) if m.vocab is None]
        if unknown:
            raise PlannerInputError(
                file, field,
                f"the catalog does not state the vocabulary of {' and '.join(unknown)} (catalog field vocab), so draft "
                f"model {draft.id} cannot be checked to share the tokenizer of {whose}; add vocab to the entry",
            )  # fmt: skip
        if draft.vocab != model.vocab:
            same = [m for m, a in sorted(catalog.models.items())
                    if a.vocab == model.vocab and m != model.id and supports_roofline(a)]  # fmt: skip
            raise PlannerInputError(
                file, field,
                f"draft model {draft.id} has a vocabulary of {draft.vocab:,} tokens and {whose} one of "
                f"{model.vocab:,}: a draft must share the target's tokenizer; allowed: a model of vocab "
                f"{model.vocab:,} ({', '.join(same) or 'none in the catalog'})",
            )  # fmt: skip


def check_unique_workload_names(spec: ScenarioSpec, file: str) -> None:
    seen: set[str] = set()
    for index, workload in enumerate(spec.workloads):
        if workload.name in seen:
            raise PlannerInputError(file, f"workloads[{index}].name", f"duplicate workload name '{workload.name}'")
        seen.add(workload.name)


def check_lengths_fit_context(spec: ScenarioSpec, workloads: list[Workload], catalog: Catalog, file: str) -> None:
    for index, workload in enumerate(workloads):
        context = catalog.models[workload.model].max_context
        for bucket_index, bucket in enumerate(workload.buckets):
            if context is not None and bucket.isl_tokens + bucket.osl_tokens > context:
                field = "isl_tokens" if spec.workloads[index].buckets is None else f"buckets[{bucket_index}]"
                raise PlannerInputError(
                    file,
                    f"workloads[{index}:{workload.name}].{field}",
                    f"input + output = {bucket.isl_tokens} + {bucket.osl_tokens} tokens exceeds the context of "
                    f"{workload.model} ({context} tokens); allowed: isl + osl <= {context}",
                )


SITES_OF_DEPLOYMENT = {"on-prem": ("on_prem",), "cloud": ("cloud",), "hybrid": ("on_prem", "cloud")}  # sites.<key> each needs


def check_sites_match_deployment(spec: ScenarioSpec, file: str) -> None:
    for site in SITES_OF_DEPLOYMENT[spec.deployment]:
        if getattr(spec.sites, site) is None:
            raise PlannerInputError(file, f"sites.{site}", f"deployment '{spec.deployment}' needs a sites.{site} block")


def check_site_systems(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    for site_key, kind in (("on_prem", "on-prem"), ("cloud", "cloud")):
        site = getattr(spec.sites, site_key)
        if site is None:
            continue
        ids_of_kind = [s for s, v in catalog.systems.items() if v.kind == kind]
        for index, system_id in enumerate(site.systems):
            field = f"sites.{site_key}.systems[{index}]"
            if system_id not in catalog.systems:  # resolve_names has mapped known names to ids
                raise PlannerInputError(
                    file, field, unknown_id_message(f"{kind} system", system_id, ids_of_kind, "planner catalog systems")
                )
            if catalog.systems[system_id].kind != kind:
                raise PlannerInputError(
                    file, field, f"'{system_id}' is a {catalog.systems[system_id].kind} system, not {kind}; "
                    f"list it under sites.{'cloud' if kind == 'on-prem' else 'on_prem'}"
                )
        price_fields = ("price_usd",) if site_key == "on_prem" else ("usd_per_hour", "reserved_usd_per_hour")
        for price_field in price_fields:
            _check_price_overrides(site, site_key, price_field, file)
        if site_key == "cloud":
            _check_cloud_market(site, file)


def _check_cloud_market(cloud, file: str) -> None:
    """Commitment and spot prices, and spot systems, name systems the cloud site lists."""
    named = [(f"sites.cloud.commitments[{i}].usd_per_hour.{s}", s) for i, c in enumerate(cloud.commitments) for s in c.usd_per_hour]
    if cloud.spot is not None:
        named += [(f"sites.cloud.spot.usd_per_hour.{s}", s) for s in cloud.spot.usd_per_hour]
        named += [(f"sites.cloud.spot.systems[{i}]", s) for i, s in enumerate(cloud.spot.systems or ())]
    for field, system_id in named:
        if system_id not in cloud.systems:
            raise PlannerInputError(file, field, f"'{system_id}' is not listed in sites.cloud.systems "
                                    f"({', '.join(cloud.systems)}); list it there first")  # fmt: skip


def _check_price_overrides(site, site_key: str, price_field: str, file: str) -> None:
    for system_id, value in getattr(site, price_field).items():
        if system_id not in site.systems:
            raise PlannerInputError(
                file, f"sites.{site_key}.{price_field}.{system_id}",
                f"price given for a system not listed in sites.{site_key}.systems ({', '.join(site.systems)})",
            )
        if value <= 0:
            raise PlannerInputError(file, f"sites.{site_key}.{price_field}.{system_id}", f"must be > 0 (got {value})")


def check_prices_known(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    """A system the scenario allows must have a price (catalog or override), and on-prem ones a power figure."""
    if spec.sites.on_prem is not None:
        for system_id in spec.sites.on_prem.systems:
            system = catalog.systems[system_id]
            if system.price_usd is None and system_id not in spec.sites.on_prem.price_usd:
                raise PlannerInputError(
                    file, f"sites.on_prem.systems: {system_id}",
                    f"the catalog has no purchase price for '{system_id}' (none public); "
                    f"give one as sites.on_prem.price_usd.{system_id}: <USD> or remove the system",
                )
            if system.power_kw is None:
                raise PlannerInputError(
                    file, f"sites.on_prem.systems: {system_id}",
                    f"the catalog has no power figure for '{system_id}'; add power_kw to its catalog entry or remove it",
                )
    if spec.sites.cloud is not None:
        for system_id in spec.sites.cloud.systems:
            if catalog.systems[system_id].usd_per_hour is None and system_id not in spec.sites.cloud.usd_per_hour:
                raise PlannerInputError(
                    file, f"sites.cloud.systems: {system_id}",
                    f"the catalog has no hourly price for '{system_id}'; give sites.cloud.usd_per_hour.{system_id}",
                )


def check_forecasts(spec: ScenarioSpec, file: str) -> None:
    names = {w.name for w in spec.workloads}
    seen: set[str] = set()
    for index, forecast in enumerate(spec.robustness.demand_forecasts):
        where = f"robustness.demand_forecasts[{index}:{forecast.name}]"
        if forecast.name in seen:
            raise PlannerInputError(file, f"{where}.name", f"duplicate forecast name '{forecast.name}'")
        seen.add(forecast.name)
        for workload, factor in forecast.scale.items():
            if workload not in names:
                raise PlannerInputError(
                    file, f"{where}.scale.{workload}",
                    f"unknown workload '{workload}'.{did_you_mean(workload, names)} Workloads: {', '.join(sorted(names))}",
                )  # fmt: skip
            if factor < 0:
                raise PlannerInputError(file, f"{where}.scale.{workload}", f"must be >= 0 (got {factor:g})")


def check_periods(spec: ScenarioSpec, file: str) -> None:
    if spec.periods is None:
        return
    seen: set[str] = set()
    for index, period in enumerate(spec.periods):
        if period.name in seen:
            raise PlannerInputError(file, f"periods[{index}].name", f"duplicate period name '{period.name}'")
        seen.add(period.name)
    total = sum(p.hours_per_year for p in spec.periods)
    if total > HOURS_PER_YEAR + 1e-6:
        raise PlannerInputError(
            file, "periods", f"hours_per_year add up to {total:g}; allowed: at most {HOURS_PER_YEAR:g} (a year)"
        )


def check_limits(spec: ScenarioSpec, catalog: Catalog, file: str) -> None:
    for gpu, count in spec.limits.max_gpus.items():
        field = f"limits.max_gpus.{gpu}"
        if gpu not in catalog.gpus:
            raise PlannerInputError(file, field, unknown_id_message("GPU", gpu, catalog.gpus, "planner catalog gpus"))
        if count < 0:
            raise PlannerInputError(file, field, f"must be >= 0 (got {count})")


