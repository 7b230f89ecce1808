"""The plan: what the optimizer decided, as frozen objects the reports read (JSON names of design.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass


PER_PERIOD_ROLES = frozenset({"on-demand", "spot"})  # a count per period; bought, reserved and spare: all year


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
    period: str  # "all" for bought / reserved nodes, else the period an on-demand count applies to
    role: str  # bought (on-prem) | reserved (cloud, all year) | on-demand, spot (cloud, this period) | spare (N + k)
    annual_cost_usd: float
    capex_usd: float
    power_kw: float
    cost_note: str
    runs: str = ""  # what these nodes run in each period ("h00-h07: 2x llama-3.1-8b TP4 fp8 b256 2048/256 + ...")
    stage: str = "aggregated"  # aggregated | prefill | decode (disaggregated pools) | mixed
    layout: str = ""  # 'TP8', 'DP8 EP8', 'TP8 PP2' ('' where the nodes run several)
    speculative: bool = False
    engine: str = "trtllm"  # the serving engine (planner/perf/engines.py); 'mixed' where the nodes run several
    engine_version: str = ""  # the engine release its figures are for ('' where the nodes run several, or unstated)


@dataclass(frozen=True)
class InfrastructureLine:
    """A BOM line beyond the servers (planner/infrastructure.py): racks, PDUs, switches and links of the on-prem
    site, its support, facility, installation, and software licences on-prem or in the cloud. `count` of `unit`s
    at `unit_usd` each: `capex_usd` bought once (annualized by the annuity into `annual_cost_usd`), or a yearly
    cost; `origin` says whether its figures are the scenario's or catalog defaults (cited, estimate, placeholder)."""

    item: str  # racks | pdus | fabric switches | fabric links | front-end switches | front-end links | support | ...
    site: str  # on-prem | cloud
    count: float
    unit: str
    unit_usd: float
    capex_usd: float
    annual_cost_usd: float
    source: str
    origin: str
    # what it is, for the cost breakdown (planner.infrastructure.BREAKDOWN_OF_KIND): support | facility | software |
    # installation | rack | pdu | fabric | frontend | storage | on-demand | spot (rentals' start-up and minimum
    # billing); a plan file saved before the field: from its item
    kind: str = "other"


@dataclass(frozen=True)
class InstanceAllocation:
    """Engine instances of one configuration running in one period (the solved U[c,t] x k[c]), on the nodes of
    one hardware offer; `rps` is what was routed to them."""

    period: str
    site: str
    role: str  # bought | reserved | on-demand: the nodes they run on
    system: str
    gpu: str
    model: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    gpus_per_instance: int
    instances: int
    gpus: int
    rps: float
    stage: str = "aggregated"
    layout: str = ""
    speculative: bool = False
    engine: str = "trtllm"
    engine_version: str = ""


def configuration_key(item, role: str | None = None) -> tuple:
    """What identifies one engine configuration across a plan line, a route and a candidate (whose `role` comes
    from its pricing): site, role, system, model, TP, precision, batch cap, engine ISL and OSL, stage, layout,
    speculation and serving engine."""
    layout = item.layout_label if hasattr(item, "layout_label") else getattr(item, "layout", "")  # a candidate's, or the plan's
    return (item.site, role or item.role, item.system, item.model, item.tp, item.precision, item.max_batch,
            item.engine_isl, item.engine_osl, getattr(item, "stage", "aggregated"), layout,
            getattr(item, "speculative", False), getattr(item, "engine", "trtllm"), getattr(item, "engine_version", ""))  # fmt: skip


@dataclass(frozen=True)
class Assignment:
    """Part of a workload's demand (one length bucket) routed to one configuration (its busiest period)."""

    system: str
    site: str
    pricing: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    bucket_isl: int
    bucket_osl: int
    rps: float
    rps_per_node: float
    concurrency: int | None
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    provenance: str
    source: str
    why: str
    stage: str = "aggregated"
    layout: str = ""
    speculative: bool = False
    tpot_ms: float | None = None  # a request's mean gap; itl_ms is one token gap (planner/metrics.py)
    engine: str = "trtllm"
    engine_version: str = ""
    expected_error: dict | None = None  # planner/perf/engines.py: relative errors covering 80% of its class's
    # a model without an architecture sized for random arrivals: its measured point's closed-loop requests/s per
    # instance, which the engine's steps are fitted to (planner/perf/point_engine.py); None otherwise
    point_rps_per_instance: float | None = None


@dataclass(frozen=True)
class Route:
    """Requests/s of one workload bucket sent to one configuration in one period (the solved x[w,b,c,t])."""

    period: str
    workload: str
    bucket_isl: int
    bucket_osl: int
    site: str
    role: str  # bought | reserved | on-demand: matches the plan line that serves it
    system: str
    model: str
    tp: int | None
    precision: str | None
    max_batch: int | None
    engine_isl: int
    engine_osl: int
    rps: float
    rps_per_node: float
    rps_per_instance: float = 0.0  # one engine instance of the configuration, at this bucket's lengths
    stage: str = "aggregated"
    layout: str = ""
    speculative: bool = False
    engine: str = "trtllm"
    engine_version: str = ""


@dataclass(frozen=True)
class PeriodLoad:
    period: str
    demand_rps: float
    capacity_rps: float


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
    periods: tuple[PeriodLoad, ...]
    serving: str = "aggregated"  # aggregated | disaggregated (prefill and decode pools)
    prefill_gpus: int = 0  # at the busiest period, disaggregated only
    decode_gpus: int = 0
    tpot_ms: float | None = None  # a request's mean gap; itl_ms is one token gap (planner/metrics.py)
    percentile: float = 50.0  # the latencies' percentile: the workload's SLO percentile


@dataclass(frozen=True)
class CostBreakdown:
    """Annual cost by kind (USD/year): what finance asks for."""

    capex_amortized_usd: float
    energy_usd: float
    maintenance_usd: float
    space_usd: float
    cloud_reserved_usd: float
    cloud_on_demand_usd: float
    facility_usd: float = 0.0  # colocation: space, power and cooling plant per kW
    software_usd: float = 0.0  # licences per GPU, on-prem and rented
    infrastructure_usd: float = 0.0  # racks, PDUs, networks, storage and installation, annualized
    cloud_spot_usd: float = 0.0  # spot nodes, per hour rented


@dataclass(frozen=True)
class Totals:
    nodes_by_system: dict[str, int]
    gpus: int
    capex_usd: float
    power_kw: float
    rack_units: int
    annual_cost_usd: float
    cost_breakdown: CostBreakdown
    # nodes and GPUs running at once at the busiest period (bought, reserved and spare nodes, and that period's
    # on-demand ones); `nodes` adds each system's own peak, which may fall in different periods
    peak_concurrent_nodes: int = 0
    peak_concurrent_gpus: int = 0
    infrastructure_capex_usd: float = 0.0  # racks, PDUs, networks, storage and installation bought with the servers

    @property
    def nodes(self) -> int:
        """All nodes: bought, reserved and spare ones once, on-demand ones at their peak per system."""
        return sum(self.nodes_by_system.values())

    # the two capex figures, each by one name in every output (plan text and JSON, BOM, compare, report)
    @property
    def servers_capex_usd(self) -> float:
        """The bought and spare servers' capex: `capex_usd`."""
        return self.capex_usd

    @property
    def capex_incl_site_usd(self) -> float:
        """The servers' capex and the site's bought with them (racks, PDUs, networks, storage, installation)."""
        return round(self.capex_usd + self.infrastructure_capex_usd, 2)


@dataclass(frozen=True)
class CandidateStats:
    generated: int
    pruned_memory: int
    pruned_latency: int
    pruned_dominated: int
    kept: int
    options: int
    pruned: tuple[tuple[str, str, str], ...]  # (workload, system, reason)


@dataclass(frozen=True)
class RobustnessSummary:
    """A robust plan's terms (capacity derate, demand forecasts) and its cost against the nominal plan."""

    perf_margin: float
    demand_scales: dict[str, float]  # per workload: the largest factor of any forecast
    forecasts: tuple[str, ...]
    nominal_objective_usd_per_year: float | None  # None: the nominal scenario has no feasible plan
    cost_of_robustness_usd_per_year: float | None
    nominal_demand_multiplier_limit: float | None  # the nominal plan holds iff demand x d / throughput x t <= this
    confidence: float | None = None  # lines sized at the edge of their expected-error band covering this share


@dataclass(frozen=True)
class Plan:
    scenario: str
    deployment: str
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
    periods: tuple[str, ...]
    routing: tuple[Route, ...]
    robustness: RobustnessSummary | None = None
    instances: tuple[InstanceAllocation, ...] = ()
    infrastructure: tuple[InfrastructureLine, ...] = ()  # BOM lines beyond the servers (in the objective and totals)
    fleet: dict[str, bool] | None = None  # reconfigure_between_periods, share_nodes_across_models
    warnings: tuple[str, ...] = ()  # what a reader must know before trusting the plan (a workload without limits)
    # what the workloads' stated prefix caches save: the same scenario planned with every prompt prefilled whole
    # (None: no workload states one; the note says what was found, or why there is no figure)
    prefix_cache_saving_usd_per_year: float | None = None
    prefix_cache_note: str = ""
    # the precision decision (docs/optimizer.md, "Precision"): per workload (scenario order) the precisions its routes
    # run (`runs`), those it was allowed (`allowed`) and why (`basis`: asked | default | lower), the lower formats
    # its quality-keeping default left out (`left_out`) and a one-line `note`; None in plans saved before it
    workload_precisions: dict[str, dict] | None = None
    # what allowing those lower formats (fp4) would save: the same scenario planned once more with them (None: no
    # workload's default left one out, or no figure: the note says why)
    precision_saving_usd_per_year: float | None = None
    precision_note: str = ""
    # what engines' capacities were read off (perf.sizing): "random-arrivals" (the open loop) or "closed-loop" (the
    # course's method), and what the other method gives where the plan states it (the seed cases: both)
    sizing: str = "random-arrivals"
    sizing_note: str = ""
    # the performance model's layers the figures came from (the scenario's perf sources, or --perf-source's): a
    # saved plan's figures are recomputed with them (optimize/recheck.py); () in plans saved before they were kept
    perf_sources: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain JSON-ready dict with the names of design.md."""
        return asdict(self)


SIZING_TEXT = {  # perf.sizing, as plans and reports say it
    "random-arrivals": "each engine's capacity for requests arriving at random (the open loop: docs/perf-model.md)",
    "closed-loop": "the course's method, each engine's closed-loop (benchmark) capacity at the limits",
}


DERIVED_TOTALS = ("servers_capex_usd", "capex_incl_site_usd")  # written by `plan --json`, recomputed on reading


def plan_from_document(document: dict) -> Plan:
    """A Plan back from its JSON document (`planner plan --json`), for `planner simulate --plan`."""
    totals = {k: v for k, v in document["totals"].items() if k not in DERIVED_TOTALS}
    totals["cost_breakdown"] = CostBreakdown(**totals["cost_breakdown"])
    candidates = dict(document["candidates"])
    candidates["pruned"] = tuple((p["workload"], p["system"], p["reason"]) for p in candidates["pruned"])
    workloads = []
    for w in document["workloads"]:
        w = dict(w)
        w["assignments"] = tuple(Assignment(**a) for a in w["assignments"])
        w["periods"] = tuple(PeriodLoad(**p) for p in w["periods"])
        workloads.append(WorkloadResult(**w))
    fields = dict(document)
    fields.update(
        lines=tuple(PlanLine(**line) for line in document["lines"]), totals=Totals(**totals),
        workloads=tuple(workloads), binding_limits=tuple(document["binding_limits"]),
        candidates=CandidateStats(**candidates), periods=tuple(document["periods"]),
        routing=tuple(Route(**r) for r in document["routing"]),
        instances=tuple(InstanceAllocation(**i) for i in document.get("instances", ())),
        infrastructure=tuple(InfrastructureLine(**_with_kind(i)) for i in document.get("infrastructure", ())),
        warnings=tuple(document.get("warnings", ())),
        perf_sources=tuple(document.get("perf_sources", ())),
    )  # fmt: skip
    known = {f.name for f in dataclasses.fields(Plan)}
    fields = {k: v for k, v in fields.items() if k in known}  # `verification`, `repair`, `overrides` ride along
    if fields.get("robustness"):
        robustness = dict(fields["robustness"])
        robustness["forecasts"] = tuple(robustness["forecasts"])
        fields["robustness"] = RobustnessSummary(**robustness)
    return Plan(**fields)


def _with_kind(item) -> dict:
    """An infrastructure line of a plan file; one saved before lines had a `kind` gets it from its item name (as
    those plans' cost breakdowns were made), 'other' where the name says nothing."""
    if not isinstance(item, dict) or "kind" in item:
        return item
    name = item.get("item")
    name = name if isinstance(name, str) else ""
    legacy = (("support contract", "support"), ("facility", "facility"), ("software licences", "software"),
              ("installation", "installation"), ("racks", "rack"), ("PDUs", "pdu"), ("compute fabric", "fabric"),
              ("front-end network", "frontend"))  # fmt: skip
    return {**item, "kind": next((kind for prefix, kind in legacy if name.startswith(prefix)), "other")}


def route_matches(assignment: Assignment, route: Route) -> bool:
    """Whether a route runs on the configuration of an assignment (system, TP, precision, batch cap, engine and
    bucket lengths, stage, layout, speculation)."""
    return (assignment.system, assignment.tp, assignment.precision, assignment.max_batch, assignment.engine_isl,
            assignment.engine_osl, assignment.bucket_isl, assignment.bucket_osl, assignment.stage, assignment.layout,
            assignment.speculative) == (
        route.system, route.tp, route.precision, route.max_batch, route.engine_isl, route.engine_osl,
        route.bucket_isl, route.bucket_osl, route.stage, route.layout, route.speculative)  # fmt: skip


# ---- a saved plan checked field by field (planner simulate|bom|report|compare --plan FILE) ----

MAX_PLAN_RPS = 1e7  # requests/s of one route or allocation: beyond any fleet (the simulator would draw them all)
MAX_PLAN_INSTANCES = 100_000  # engine instances of one allocation (each is simulated)
MAX_PLAN_TOKENS = 10_000_000  # an engine's or bucket's ISL/OSL
MAX_PLAN_GPUS = 100_000
_RANGES = {  # field -> (low, high): numbers a saved plan may hold where the simulator and reports use them
    "rps": (0.0, MAX_PLAN_RPS), "rps_per_node": (0.0, MAX_PLAN_RPS), "rps_per_instance": (0.0, MAX_PLAN_RPS),
    "instances": (0, MAX_PLAN_INSTANCES), "gpus_per_instance": (1, MAX_PLAN_GPUS), "gpus": (0, 10 * MAX_PLAN_GPUS),
    "max_batch": (1, 1_000_000), "tp": (1, MAX_PLAN_GPUS), "concurrency": (0, 10_000_000),
    "engine_isl": (0, MAX_PLAN_TOKENS), "engine_osl": (0, MAX_PLAN_TOKENS),  # 0 on a line running several
    "bucket_isl": (1, MAX_PLAN_TOKENS), "bucket_osl": (1, MAX_PLAN_TOKENS),
    "ttft_ms": (0.0, 1e9), "itl_ms": (0.0, 1e9), "e2e_ms": (0.0, 1e10), "tpot_ms": (0.0, 1e9),
    "point_rps_per_instance": (1e-9, MAX_PLAN_RPS),
}  # fmt: skip


def _allowed_types(hint) -> tuple[type, ...]:
    """The plain types a field's annotation allows (`int | None`: int and NoneType); none for a nested structure."""
    import types
    import typing

    args = typing.get_args(hint) if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union else (hint,)
    return tuple(arg for arg in args if isinstance(arg, type))


def _field_problem(value, allowed: tuple[type, ...], bounds) -> str | None:
    """Why `value` is not a field of one of the `allowed` types within `bounds`; None when it is."""
    import math

    if value is None:
        return None if type(None) in allowed else "a value (not null)"
    if isinstance(value, bool):
        return None if bool in allowed else f"a {'number' if {int, float} & set(allowed) else 'text'}, not true/false"
    if float in allowed and isinstance(value, int | float) or int in allowed and isinstance(value, int):
        if not math.isfinite(value):
            return "a finite number"
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            low, high = (f"{int(b):,}" if float(b).is_integer() else f"{b:g}" for b in bounds)
            return f"between {low} and {high}"
        return None
    if any(isinstance(value, t) for t in allowed if t is not type(None)):
        return None
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", dict: "an object"}
    return " or ".join(names.get(t, t.__name__) for t in allowed if t is not type(None))


def _precision_field_problems(plan: Plan) -> list[tuple[str, str]]:
    """The precision decision's fields of a saved plan (absent in plans saved before it: their defaults)."""
    problems = []
    saving = plan.precision_saving_usd_per_year
    problem = _field_problem(saving, (float, type(None)), (-1e15, 1e15))
    if problem is not None:
        problems.append(("precision_saving_usd_per_year", problem))
    if not isinstance(plan.precision_note, str):
        problems.append(("precision_note", "text"))
    if plan.sizing not in ("random-arrivals", "closed-loop"):
        problems.append(("sizing", "random-arrivals or closed-loop"))
    if not isinstance(plan.sizing_note, str):
        problems.append(("sizing_note", "text"))
    if not all(isinstance(layer, str) and layer in ("measured", "interpolated", "modeled", "aic") for layer in plan.perf_sources):
        problems.append(("perf_sources", "a list of the layers measured, interpolated, modeled and aic"))
    decisions = plan.workload_precisions
    if decisions is None:
        return problems
    if not isinstance(decisions, dict):
        return [*problems, ("workload_precisions", "an object (workload -> its precisions) or null")]
    for name, decision in decisions.items():
        where = f"workload_precisions.{str(name)[:60]}"
        if not isinstance(decision, dict):
            problems.append((where, "an object"))
            continue
        for key in ("runs", "allowed", "left_out"):
            values = decision.get(key, [])
            if not isinstance(values, list) or not all(v is None or isinstance(v, str) for v in values):
                problems.append((f"{where}.{key}", "a list of precisions (text or null)"))
        for key in ("basis", "note"):
            if not isinstance(decision.get(key, ""), str):
                problems.append((f"{where}.{key}", "text"))
    return problems


def plan_field_problems(plan: Plan) -> list[tuple[str, str]]:
    """(field path, what is allowed) of every field of the plan's lines, instances, routes and assignments whose
    value is not of its declared type, not finite, or out of the range the planner can use (`_RANGES`)."""
    import typing

    problems = []
    if not isinstance(plan.scenario, str):
        problems.append(("scenario", "text"))
    problems += [(f"periods[{i}]", "text") for i, period in enumerate(plan.periods) if not isinstance(period, str)]
    problems += _precision_field_problems(plan)
    groups = [("lines", plan.lines), ("instances", plan.instances), ("routing", plan.routing), ("workloads", plan.workloads),
              ("infrastructure", plan.infrastructure)]
    for w, workload in enumerate(plan.workloads):
        groups += [(f"workloads[{w}].assignments", workload.assignments), (f"workloads[{w}].periods", workload.periods)]
    for name, items in groups:
        for index, item in enumerate(items):
            hints = typing.get_type_hints(type(item))
            for field in dataclasses.fields(item):
                allowed = _allowed_types(hints[field.name])
                if not allowed:  # a nested structure (a workload's assignments): checked as its own group
                    continue
                problem = _field_problem(getattr(item, field.name), allowed, _RANGES.get(field.name))
                if problem is not None:
                    problems.append((f"{name}[{index}].{field.name}", problem))
    return problems
