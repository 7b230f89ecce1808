"""Serving groups of the router targets (llm-d, Dynamo): what one llm-d release or one Dynamo graph deploys.

An aggregated pool is a group of its own. The prefill and decode pools of disaggregated serving group by what they
share: same model and engine and a workload in common (a prefill pool feeds the decode pools of its workloads), so
a group holds every prefill and decode pool one router must see together. A pool can serve several workloads, so a
group is a set of pools, not a workload: a workload-per-file layout would start a shared pool twice. A group with
prefill pools and no decode pool (or the reverse) cannot serve and is not generated; the README says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.deploy.pools import Pool


@dataclass(frozen=True)
class ServingGroup:
    pools: tuple[Pool, ...]  # plan order: an aggregated pool alone, or prefill then decode pools

    @property
    def serving(self) -> tuple[Pool, ...]:
        """The pools that answer requests: the aggregated pool, or the decode pools."""
        return tuple(p for p in self.pools if p.stage != "prefill")

    @property
    def prefills(self) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.stage == "prefill")

    @property
    def name(self) -> str:
        return self.serving[0].name

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefills)

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(w for p in self.serving for w in p.workloads))


def _linked(a: Pool, b: Pool) -> bool:
    return a.model == b.model and a.engine == b.engine and bool(set(a.workloads) & set(b.workloads))


def serving_groups(pools) -> tuple[tuple[ServingGroup, ...], dict[str, str]]:
    """The groups of `pools` (those a target generates), ordered by their first pool, and why each pool of a group
    that cannot serve is left out."""
    staged = [p for p in pools if p.stage in ("prefill", "decode")]
    component = {p.name: i for i, p in enumerate(staged)}
    changed = True
    while changed:  # join linked pools into one component (few pools: a fixed point is cheap)
        changed = False
        for a in staged:
            for b in staged:
                if component[a.name] != component[b.name] and _linked(a, b):
                    low = min(component[a.name], component[b.name])
                    for name, value in list(component.items()):
                        if value in (component[a.name], component[b.name]):
                            component[name] = low
                    changed = True
    groups, skipped, seen = [], {}, set()
    for pool in pools:
        if pool.stage == "aggregated":
            groups.append(ServingGroup((pool,)))
            continue
        if pool.stage not in ("prefill", "decode") or component[pool.name] in seen:
            continue
        seen.add(component[pool.name])
        members = tuple(p for p in staged if component[p.name] == component[pool.name])
        stages = {p.stage for p in members}
        if stages == {"prefill", "decode"}:
            groups.append(ServingGroup(members))
            continue
        missing = "decode" if "decode" not in stages else "prefill"
        for member in members:
            skipped[member.name] = (f"a {member.stage} pool with no {missing} pool of the same model and engine "
                                    "among the generated pools to pair it with")  # fmt: skip
    return tuple(sorted(groups, key=lambda g: [p.name for p in pools].index(g.pools[0].name))), skipped
