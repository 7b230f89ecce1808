"""Catalog holes that changed what a plan could choose, said in its warnings (issue 49): a system offered to the
scenario whose catalog entry lacks a field a kind of candidate needs gets no such candidates, and a plan that
silently rents a dearer instance because a cheaper one's entry is incomplete misleads the purchase. Each warning
names the system, the missing field, what was not tried for want of it and how to supply it."""

from __future__ import annotations

from planner.candidates import CandidateSet, pipeline_wanted
from planner.catalog import Catalog
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
