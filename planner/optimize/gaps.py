"""What a plan chose silently, said in its warnings (issue 49). Catalog holes that changed what it could choose: a
system offered to the scenario whose catalog entry lacks a field a kind of candidate needs gets no such candidates,
and a plan that silently rents a dearer instance because a cheaper one's entry is incomplete misleads the purchase
(each warning names the system, the missing field, what was not tried for want of it and how to supply it). And
what renting per period assumed of the cloud: nodes there when asked, their lead time, their billing."""

from __future__ import annotations

from planner.candidates import CandidateSet, pipeline_wanted
from planner.catalog import Catalog
from planner.plan import PER_PERIOD_ROLES
from planner.scenario import Scenario

NETWORK_FIELD = "network_gbit_per_s"


def catalog_gap_warnings(scenario: Scenario, catalog: Catalog, cset: CandidateSet) -> tuple[str, ...]:
    """One warning per offered system and missing field that dropped candidates: the scale-out network
    (`network_gbit_per_s`: pipeline stages across nodes for a model no node holds, disaggregated prefill/decode
    pools) and, on a bought server, its height (`rack_units`: racks and floor space counted without it)."""
    warnings = []
    for system_id in sorted({offer.system for offer in scenario.offers}):
        system = catalog.systems[system_id]
        if system.network_gbit_per_s is None:
            dropped = []
            models = sorted({w.model for w in scenario.workloads if pipeline_wanted(scenario, catalog, w.model, system_id)})
            if models:
                dropped.append(f"engines spanning nodes (pipeline stages) for {', '.join(models)} (weights no "
                               "single node holds)")  # fmt: skip
            if any(p.system == system_id and NETWORK_FIELD in p.reason for p in cset.pruned):
                dropped.append("disaggregated prefill/decode pools (their KV caches cross the network)")
            if dropped:
                warnings.append(
                    f"{system_id} has no {NETWORK_FIELD} in the catalog (its scale-out network): "
                    f"{' and '.join(dropped)} were not tried on it, and the plan may rent or buy a dearer system "
                    f"instead: add {NETWORK_FIELD} to its catalog entry (a scenario's own catalog may) to compare them"
                )  # fmt: skip
        if system.kind == "on-prem" and system.rack_units is None:
            warnings.append(
                f"{system_id} has no rack_units in the catalog: its floor space and racks are counted as zero; add "
                "rack_units to its catalog entry"
            )  # fmt: skip
    return tuple(warnings)


def rental_assumptions(scenario: Scenario, lines) -> tuple[str, ...]:
    """Where the plan rents nodes per period (on demand or spot): what it assumed of them, so that an advantage
    resting on elastic GPUs is read with its premises (capacity there whenever asked, the lead time and its source,
    the billing, no unforeseen rise of demand)."""
    rented = sorted({line.system for line in lines if line.role in PER_PERIOD_ROLES})
    if not rented:
        return ()
    minutes = scenario.cloud_start_up_hours * 60
    lead = (f"each started {minutes:g} min before its period and billed from then"
            + ("" if scenario.cloud_start_up_source == "scenario" else " (the catalog's default, an estimate: "
               "sites.cloud.start_up_minutes gives yours)"))  # fmt: skip
    billing = (f"billed at least {scenario.cloud_minimum_billing_hours:g} h per rental" if scenario.cloud_minimum_billing_hours
               else "billed per second beyond that (sites.cloud.minimum_billing_hours: 0)")  # fmt: skip
    growth = (f"demand rising {scenario.cloud_demand_growth_per_hour:.0%} an hour beyond the periods' figures absorbed "
              "by the nodes running" if scenario.cloud_demand_growth_per_hour
              else "no rise of demand beyond the periods' figures while nodes start (sites.cloud.demand_growth_per_hour: 0)")  # fmt: skip
    return (f"nodes rented per period ({', '.join(rented)}) are assumed available whenever the plan asks for them "
            f"(on-demand GPU capacity is not guaranteed: limits.max_gpus caps what you can get), {lead}, {billing}; "
            f"{growth}",)
