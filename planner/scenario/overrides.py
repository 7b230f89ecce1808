"""One run's changes to a scenario file (`ScenarioOverrides`: the CLI's --deployment, --systems, --precisions,
--engines and the rest), applied to the validated file before it is resolved, and a site the file lacks derived from
the catalog's priced systems (`derived_site`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.catalog import Catalog
from planner.errors import PlannerInputError, clip_text
from planner.scenario.checks import (
    SITES_OF_DEPLOYMENT,
)
from planner.scenario.spec import (
    CloudSite,
    OnPremSite,
    ScenarioSpec,
)


def derived_site(spec: ScenarioSpec, catalog: Catalog, site: str) -> tuple[OnPremSite | CloudSite | None, str]:
    """A site the scenario does not have, made of the catalog's priced systems of the GPUs its other site runs, at
    catalog prices and defaults (`compare`'s other side, `--deployment` beyond the file's sites): (the site, what
    was derived) or (None, why none could be). On-prem needs a purchase price and a power figure; cloud an hourly
    price."""
    other = spec.sites.cloud if site == "on_prem" else spec.sites.on_prem
    gpus = sorted({catalog.systems[s].gpu for s in (other.systems if other is not None else ()) if s in catalog.systems})
    kind, label = ("on-prem", "on-prem servers") if site == "on_prem" else ("cloud", "cloud instances")
    priced = sorted(
        s for s, system in catalog.systems.items()
        if system.kind == kind and system.gpu in gpus
        and ((system.price_usd is not None and system.power_kw is not None) if site == "on_prem" else system.usd_per_hour is not None)
    )  # fmt: skip
    if not priced:
        return None, (f"the scenario has no {kind} site and the catalog no priced {label} of "
                      f"{', '.join(gpus) or 'its GPUs'}: give sites.{site} with the systems and prices to weigh")  # fmt: skip
    kinds = sorted({catalog.systems[s].price_source_kind or "unstated" for s in priced})
    note = (f"the scenario has no {kind} site: planned on the catalog's {label} of the same GPUs ({', '.join(gpus)}) "
            f"at catalog prices ({', '.join(kinds)}) and defaults: {', '.join(priced)}")  # fmt: skip
    return (OnPremSite(systems=priced) if site == "on_prem" else CloudSite(systems=priced)), note


@dataclass(frozen=True)
class ScenarioOverrides:
    """What one run changes of a scenario file (`--deployment`, `--systems`, `--precisions`, `--engines`), without a
    copied YAML. `systems` replaces both sites' systems (each system goes to the site of its kind; a site left
    without systems is dropped); `precisions` and `engines` replace every workload's."""

    deployment: str | None = None
    systems: tuple[str, ...] | None = None
    precisions: tuple[str, ...] | None = None
    engines: tuple[str, ...] | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.deployment, self.systems, self.precisions, self.engines))

    def describe(self) -> str:
        """'deployment cloud; systems a, b' for the echo on the output; each value clipped (`clip_text`: the echo
        comes before the values are checked, and a megabyte pasted into --systems is refused, not echoed)."""
        parts = [(name, value if isinstance(value, str) else ", ".join(value))
                 for name, value in (("deployment", self.deployment), ("systems", self.systems),
                                     ("precisions", self.precisions), ("engines", self.engines)) if value is not None]  # fmt: skip
        return "; ".join(f"{name} {clip_text(value)}" for name, value in parts)

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items() if v is not None}


def apply_overrides(spec: ScenarioSpec, overrides: ScenarioOverrides | None, catalog: Catalog,
                    file: str) -> tuple[ScenarioSpec, dict[str, str]]:  # fmt: skip
    """The scenario spec with one run's overrides (a bad value raises PlannerInputError naming its option), and a
    note per site it derived: `--deployment` naming a site the file lacks (and no `--systems`) plans it on the
    catalog's priced systems of the other site's GPUs, as `compare` does (`derived_site`)."""
    if not overrides:
        return spec, {}
    from planner.catalog import PRECISIONS
    from planner.perf.serving import ENGINES, EngineSpec as EngineChoice

    def engine_ok(value: str) -> bool:
        try:
            EngineChoice.parse(value)
        except ValueError:
            return False
        return True

    update: dict = {}
    derived: dict[str, str] = {}
    for option, values, ok, allowed in (
            ("--precisions", overrides.precisions, lambda v: v in PRECISIONS, ", ".join(PRECISIONS)),
            ("--engines", overrides.engines, engine_ok, f"{', '.join(ENGINES)}, each optionally pinned as engine@version")):
        wrong = [v for v in values or () if not ok(v)]
        if wrong or values == ():
            raise PlannerInputError(file, option, f"one or more of {allowed} (got {', '.join(wrong) or 'nothing'})")
    if overrides.deployment is not None:
        if overrides.deployment not in ("on-prem", "cloud", "hybrid"):
            raise PlannerInputError(file, "--deployment", f"on-prem, cloud or hybrid (got {overrides.deployment!r})")
        missing = [site for site in SITES_OF_DEPLOYMENT[overrides.deployment] if getattr(spec.sites, site) is None]
        if missing and overrides.systems is None:
            sites = {}
            for site in missing:
                made, note = derived_site(spec, catalog, site)
                if made is None:
                    raise PlannerInputError(file, "--deployment", f"{overrides.deployment}: {note}, or name its "
                                            "systems with --systems")  # fmt: skip
                sites[site], derived[site] = made, note
            spec = spec.model_copy(update={"sites": spec.sites.model_copy(update=sites)})
        update["deployment"] = overrides.deployment
    if overrides.systems is not None:
        if not overrides.systems:
            raise PlannerInputError(file, "--systems", "one or more system ids of the catalog")
        chosen = [catalog.resolve("system", name, file, "--systems") for name in overrides.systems]
        sites = {}
        for site, kind, model in (("on_prem", "on-prem", OnPremSite), ("cloud", "cloud", CloudSite)):
            mine = list(dict.fromkeys(s for s in chosen if catalog.systems[s].kind == kind))
            current = getattr(spec.sites, site)
            sites[site] = None if not mine else (_keep_systems(current, mine) if current else model(systems=mine))
        update["sites"] = spec.sites.model_copy(update=sites)
        have = {site for site, value in sites.items() if value is not None}
        deployment = update.get("deployment", spec.deployment)
        needs = set(SITES_OF_DEPLOYMENT[deployment])
        if not needs <= have:
            if overrides.deployment is not None:
                raise PlannerInputError(file, "--systems", f"deployment {deployment} needs "
                                        f"{' and '.join(k.replace('_', '-') for k in sorted(needs))} systems among them")
            update["deployment"] = "hybrid" if have == {"on_prem", "cloud"} else "cloud" if "cloud" in have else "on-prem"
    if overrides.precisions is not None or overrides.engines is not None:
        changes = {name: list(values) for name, values in (("precisions", overrides.precisions), ("engines", overrides.engines))
                   if values is not None}  # fmt: skip
        update["workloads"] = [w.model_copy(update=changes) for w in spec.workloads]
    return spec.model_copy(update=update), derived


def _keep_systems(site: OnPremSite | CloudSite, systems: list[str]) -> OnPremSite | CloudSite:
    """The site with `--systems`' systems, and its per-system entries (prices, reserved prices, commitments, spot)
    kept only for them: what the override removed leaves no reference behind (a spot list naming a system no longer
    offered would refuse the run)."""
    keep = set(systems)

    def only(prices: dict) -> dict:
        return {k: v for k, v in prices.items() if k in keep}

    update: dict = {"systems": systems}
    if isinstance(site, OnPremSite):
        update["price_usd"] = only(site.price_usd)
        return site.model_copy(update=update)
    update["usd_per_hour"] = only(site.usd_per_hour)
    update["reserved_usd_per_hour"] = only(site.reserved_usd_per_hour)
    update["commitments"] = [c.model_copy(update={"usd_per_hour": only(c.usd_per_hour)}) for c in site.commitments
                             if c.discount_fraction is not None or only(c.usd_per_hour)]  # fmt: skip
    if site.spot is not None:
        spot_systems = None if site.spot.systems is None else [s for s in site.spot.systems if s in keep]
        update["spot"] = None if spot_systems == [] else site.spot.model_copy(
            update={"systems": spot_systems, "usd_per_hour": only(site.spot.usd_per_hour)})
    return site.model_copy(update=update)
