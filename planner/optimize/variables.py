"""The fleet program's variables: the hardware offers (`Hardware`) and `FleetModel`, the PuLP problem with its
named variables, which the `define_*` functions (optimize/model.py) fill and the `add_*` families (model.py,
billing.py) constrain."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import pulp

from planner.candidates import Candidate, CandidateSet


@dataclass(frozen=True)
class Hardware:
    """One hardware offer: what is bought or rented, with its per-node figures."""

    key: tuple[str, str, str]  # (site, pricing, system)
    site: str
    pricing: str
    system: str
    gpu: str
    gpus_per_node: int
    annual_cost_usd: float
    usd_per_hour: float | None
    capex_usd: float
    power_kw: float
    rack_units: int
    cost_note: str

    @property
    def fixed(self) -> bool:
        return self.pricing in ("capex", "reserved")


def hardware_of(candidate: Candidate) -> tuple[str, str, str]:
    return (candidate.site, candidate.pricing, candidate.system)


def members_by_hardware(cset: CandidateSet) -> dict[tuple[str, str, str], list[Candidate]]:
    """The configurations of each hardware offer, in candidate order."""
    members: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cset.candidates:
        members[hardware_of(c)].append(c)
    return members


def hardware_list(cset: CandidateSet) -> dict[tuple[str, str, str], Hardware]:
    """The hardware offers the candidates run on (their per-node figures come from the offer)."""
    hardware = {}
    for c in cset.candidates:
        key = hardware_of(c)
        if key not in hardware:
            hardware[key] = Hardware(
                key, c.site, c.pricing, c.system, c.gpu, c.gpus_per_node, c.annual_cost_usd, c.usd_per_hour,
                c.capex_usd, c.power_kw, c.rack_units, c.cost_note,
            )  # fmt: skip
    return dict(sorted(hardware.items()))


@dataclass
class FleetModel:
    """The PuLP problem with its named variables, as built by the `define_*` / `add_*` functions below."""

    problem: pulp.LpProblem
    hardware: dict[tuple, Hardware] = field(default_factory=dict)
    members: dict[tuple, list[Candidate]] = field(default_factory=dict)  # configurations c of each h
    fixed_nodes: dict[tuple, pulp.LpVariable] = field(default_factory=dict)  # N[h]
    period_nodes: dict[tuple[tuple, str], pulp.LpVariable] = field(default_factory=dict)  # M[h,t]
    units: dict[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)  # U[c,t] (the same var for all t if fixed)
    routed: dict[tuple[str, int, str, str], pulp.LpVariable] = field(default_factory=dict)  # x[w,b,c,t]
    spares: dict[str, pulp.LpVariable] = field(default_factory=dict)  # S[s]
    system_used: dict[str, pulp.LpVariable] = field(default_factory=dict)  # used[s]
    variant_used: dict[tuple, pulp.LpVariable] = field(default_factory=dict)  # use[v]
    spare_figures: dict[str, dict[str, float]] = field(default_factory=dict)  # per-node figures of spare systems
    unit_bounds: dict[tuple[str, str], int] = field(default_factory=dict)  # ceil(all the load c can take in t)
    split: dict[str, pulp.LpVariable] = field(default_factory=dict)  # split[w]: w served disaggregated
    infrastructure: dict[str, pulp.LpVariable] = field(default_factory=dict)  # racks, switches (add_site_infrastructure)
    infrastructure_cost: list = field(default_factory=list)  # their annual cost terms
    starts: dict[tuple[tuple, str], pulp.LpVariable] = field(default_factory=dict)  # s[h,t] (add_rentals)
    stops_short: dict[tuple[tuple, str], pulp.LpVariable] = field(default_factory=dict)  # y[h,t] (add_rentals)
    rental_cost: list = field(default_factory=list)  # start-up and minimum billing terms (add_rentals)

    def nodes(self, hardware: tuple, period: str):
        """N[h] for bought/reserved hardware, M[h,t] for on-demand."""
        if self.hardware[hardware].fixed:
            return self.fixed_nodes[hardware]
        return self.period_nodes.get((hardware, period), 0)
