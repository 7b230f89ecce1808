"""The plan: what the optimizer decided, as frozen objects the reports read (JSON names of design.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PlanLine:
    """Nodes of one engine configuration to buy (on-prem) or rent (cloud)."""

    site: str
    system: str
    gpu: str
    model: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    nodes: int
    gpus: int
    period: str
    annual_cost_usd: float
    capex_usd: float
    power_kw: float
    cost_note: str


@dataclass(frozen=True)
class Assignment:
    """Part of a workload's demand routed to one configuration."""

    system: str
    site: str
    tp: int | None
    precision: str | None
    rps: float
    rps_per_node: float
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    provenance: str
    source: str


@dataclass(frozen=True)
class WorkloadResult:
    name: str
    model: str
    isl_tokens: int
    osl_tokens: int
    demand_rps: float
    demand_note: str
    capacity_rps: float
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    provenance: str
    why: str
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class Totals:
    nodes_by_system: dict[str, int]
    gpus: int
    capex_usd: float
    power_kw: float
    rack_units: int
    annual_cost_usd: float


@dataclass(frozen=True)
class CandidateStats:
    generated: int
    options: int
    pruned: tuple[tuple[str, str, str], ...]  # (workload, system, reason)


@dataclass(frozen=True)
class Plan:
    scenario: str
    status: str  # optimal | feasible (time limit hit, see mip_gap) | infeasible
    solver: str
    objective_usd_per_year: float
    solve_seconds: float
    mip_gap: float | None
    lines: tuple[PlanLine, ...]
    totals: Totals
    workloads: tuple[WorkloadResult, ...]
    binding_limits: tuple[str, ...]
    candidates: CandidateStats

    def to_dict(self) -> dict:
        """Plain JSON-ready dict with the names of design.md."""
        return asdict(self)
