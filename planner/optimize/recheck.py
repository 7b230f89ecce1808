"""A saved plan file is a fleet: its figures are recomputed from the scenario and catalog, never trusted (issue 47).

`planner plan --json` writes a plan; `bom`, `compare`, `report` and `simulate` read it back with `--plan`. What the
file decides is the fleet: node counts per system, site, pricing and period, the engine instances on them and the
routes. Everything else in it follows from those and the scenario's prices: each line's GPUs, annual cost, capex
and power, the site's infrastructure lines, the totals and the objective. `recheck_plan` recomputes each of them
as the plan was made (`packing._node_line`, `infrastructure_lines`, `readback._totals`) and refuses the file,
naming the field, the value it holds and the value the scenario gives, where they disagree: a hand edit, a file
of another price list, or a copy that disagrees with itself. It also refuses lines repeated, instances that need
more GPUs than the lines' nodes hold, and routes that do not carry every workload's demand in every period.

The performance figures the simulator and the reports read (each assignment's requests/s per node, batch, latencies,
provenance and the measured point a row's engine is fitted to) are recomputed too (`check_performance`): every
assignment's configuration is priced again by the performance model, as the plan sized it (its `sizing` and
`perf_sources`), and a figure that differs is refused; requests/s per node may be lower than the model's (a plan derated by a
perf_margin or a robust band), never higher."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

from planner.candidates import offer_costs
from planner.catalog import Catalog
from planner.errors import PlannerInputError
from planner.infrastructure import infrastructure_lines
from planner.optimize.model import bucket_demand
from planner.optimize.packing import _ROLE
from planner.optimize.readback import _totals
from planner.plan import PER_PERIOD_ROLES, Plan
from planner.scenario import Scenario

_PRICING_OF_ROLE = {role: pricing for pricing, role in _ROLE.items()} | {"spare": "capex"}  # a line's role -> its offer
_MOST_LINES = 100_000  # lines of one plan: far beyond a real fleet's (one per system, pricing, period and configuration)


def _differs(held: float, expected: float) -> bool:
    """More than a cent (and a millionth) apart: the file was rounded to cents when written."""
    return not math.isclose(held, expected, rel_tol=1e-6, abs_tol=0.011)


def _refuse(field: str, held, expected, why: str) -> None:
    def shown(value) -> str:
        return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)

    raise PlannerInputError("--plan", field, f"holds {shown(held)}; the scenario and catalog give {shown(expected)} "
                                             f"({why}): a plan file is a fleet, its figures are recomputed; plan again "
                                             "if the scenario or its prices changed")  # fmt: skip


def check_lines(plan: Plan, scenario: Scenario, catalog: Catalog) -> None:
    """Each line's GPUs, cost, capex and power as the scenario's offer prices its nodes; no line twice."""
    if len(plan.lines) > _MOST_LINES:
        raise PlannerInputError("--plan", "lines", f"{len(plan.lines):,} lines; allowed: at most {_MOST_LINES:,}")
    seen: dict = {}
    offers = {(o.site, o.pricing, o.system): o for o in scenario.offers}
    periods = {p.name for p in scenario.periods}
    for index, line in enumerate(plan.lines):
        where = f"lines[{index}]"
        if line in seen:
            raise PlannerInputError("--plan", where, f"repeats lines[{seen[line]}] (the same nodes counted twice)")
        seen[line] = index
        offer = offers.get((line.site, _PRICING_OF_ROLE.get(line.role, ""), line.system))
        if offer is None:
            raise PlannerInputError("--plan", f"{where}.role", f"'{str(line.role)[:20]}' nodes of {line.system} are no offer of "
                                    "the scenario (its sites, pricing and systems)")  # fmt: skip
        system = catalog.systems[line.system]
        if line.gpu != system.gpu or line.gpus != line.nodes * system.gpus_per_node:
            _refuse(f"{where}.gpus", line.gpus, line.nodes * system.gpus_per_node,
                    f"{line.nodes} nodes of {line.system} with {system.gpus_per_node} {system.gpu} each")
        costs = offer_costs(offer, scenario)
        if line.role in PER_PERIOD_ROLES:
            if line.period not in periods:
                raise PlannerInputError("--plan", f"{where}.period", f"a {line.role} line is for one period of the scenario")
            hours = next(p.hours_per_year for p in scenario.periods if p.name == line.period)
            annual = costs["usd_per_hour"] * hours * line.nodes
            why = f"{line.nodes} nodes x {costs['usd_per_hour']:g} USD/h x {hours:g} h (starts and minimums: infrastructure)"
        else:
            annual = costs["annual_cost_usd"] * line.nodes
            why = f"{line.nodes} nodes x {costs['annual_cost_usd']:,.2f} USD/year ({costs['cost_note'][:80]})"
        for field, held, expected in (("annual_cost_usd", line.annual_cost_usd, annual),
                                      ("capex_usd", line.capex_usd, costs["capex_usd"] * line.nodes),
                                      ("power_kw", line.power_kw, costs["power_kw"] * line.nodes)):  # fmt: skip
            if _differs(held, expected):
                _refuse(f"{where}.{field}", held, round(expected, 2), why)


def check_instances(plan: Plan, catalog: Catalog) -> None:
    """The instances of each period fit in the GPUs of the lines' nodes there (bought and reserved nodes in every
    period, rented ones in theirs), per site and system."""
    room: dict[tuple, int] = defaultdict(int)
    fixed: dict[tuple, int] = defaultdict(int)
    for line in plan.lines:
        if line.role in PER_PERIOD_ROLES:
            room[(line.period, line.site, line.system)] += line.gpus
        elif line.role != "spare":
            fixed[(line.site, line.system)] += line.gpus
    need: dict[tuple, int] = defaultdict(int)
    for allocation in plan.instances:
        need[(allocation.period, allocation.site, allocation.system)] += allocation.gpus_per_instance * allocation.instances
    for (period, site, system), gpus in sorted(need.items()):
        held = room[(period, site, system)] + fixed[(site, system)]
        if gpus > held:
            raise PlannerInputError("--plan", "instances", f"the instances on {system} ({site}) in period {period} need "
                                    f"{gpus:,} GPUs; the plan's lines hold {held:,} there")  # fmt: skip


def check_routing(plan: Plan, scenario: Scenario) -> None:
    """Every workload's demand in every period is routed (a robust plan routes more: at least the demand)."""
    demand: dict[tuple[str, str], float] = defaultdict(float)
    for (workload, _, period), value in bucket_demand(scenario).items():
        demand[(workload, period)] += value
    routed: dict[tuple[str, str], float] = defaultdict(float)
    for route in plan.routing:
        if route.stage != "decode":  # a disaggregated request is counted where it starts
            routed[(route.workload, route.period)] += route.rps
    for (workload, period), value in sorted(demand.items()):
        if routed[(workload, period)] < value * (1 - 1e-6) - 1e-9:
            raise PlannerInputError("--plan", "routing", f"routes {routed[(workload, period)]:,.6g} rps of workload "
                                    f"'{workload}' in period {period}; its demand is {value:,.6g} rps")  # fmt: skip


_LATENCIES = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")  # as a plan writes them: rounded to 3 decimals


def _configuration(candidate, bucket) -> tuple:
    """What identifies an assignment's engine and bucket (the fields `readback._assignment` copies)."""
    return (candidate.system, candidate.site, candidate.pricing, candidate.tp, candidate.precision, candidate.max_batch,
            candidate.engine_isl, candidate.engine_osl, bucket.isl_tokens, bucket.osl_tokens, candidate.stage,
            candidate.layout_label, candidate.speculative, candidate.engine, candidate.engine_version)  # fmt: skip


def _rounded(value, digits: int):
    return None if value is None else round(value, digits)


def check_performance(plan: Plan, scenario: Scenario, catalog: Catalog, progress=None) -> None:
    """Each assignment's performance figures as the model gives its configuration today (module docstring), in
    `scenario` as the plan was made (its --precisions and --engines); `progress` as `enumerate_candidates` calls it."""
    from planner.candidates import enumerate_candidates

    sized = dataclasses.replace(scenario, sizing=plan.sizing, perf_sources=plan.perf_sources or scenario.perf_sources)
    if "aic" in sized.perf_sources:
        from planner.perf import aic_unavailable_message

        if aic_unavailable_message():
            raise PlannerInputError("--plan", "perf_sources", "the plan's figures came from aiconfigurator's tables, "
                                    f"which cannot recompute them here: {aic_unavailable_message()}")  # fmt: skip
    def told(done: int, total: int | None = None, phase: str | None = None) -> None:
        """The pricing's progress, said to be the plan file's recomputation."""
        progress(done, total, None if phase is None else f"recomputing the plan file's performance figures: {phase}")

    cset = enumerate_candidates(sized, catalog, told if progress is not None else None, keep_dominated=True)
    buckets = {w.name: w.buckets for w in scenario.workloads}
    priced: dict[tuple, object] = {}
    for option in cset.options:
        priced[(option.workload, *_configuration(cset.candidate(option.candidate), buckets[option.workload][option.bucket]))] = option
    for w_index, result in enumerate(plan.workloads):
        for a_index, held in enumerate(result.assignments):
            where = f"workloads[{w_index}].assignments[{a_index}]"
            key = (result.name, held.system, held.site, held.pricing, held.tp, held.precision, held.max_batch,
                   held.engine_isl, held.engine_osl, held.bucket_isl, held.bucket_osl, held.stage, held.layout,
                   held.speculative, held.engine, held.engine_version)  # fmt: skip
            option = priced.get(key)
            if option is None:
                raise PlannerInputError("--plan", where, f"its configuration ({held.engine} {held.layout} "
                                        f"{held.precision or ''} batch {held.max_batch} on {held.system}, "
                                        f"{held.bucket_isl}/{held.bucket_osl}) is none the scenario's performance model "
                                        "serves within its limits: a plan file is a fleet, its figures are recomputed; "
                                        "plan again if the scenario or its catalog changed")  # fmt: skip
            perf = option.perf
            model_rate = round(option.rps_per_node, 6)
            if held.rps_per_node > model_rate * (1 + 1e-9) + 1e-6:
                _refuse(f"{where}.rps_per_node", held.rps_per_node, model_rate,
                        "at most the performance model's requests/s per node for its configuration")
            expected = {"concurrency": perf.concurrency, "provenance": perf.provenance,
                        "point_rps_per_instance": _rounded(perf.point_rps_per_instance, 6),
                        **{name: _rounded(getattr(perf, name), 3) for name in _LATENCIES}}  # fmt: skip
            for field, value in expected.items():
                saved = getattr(held, field)
                unit = 1e-3 if field in _LATENCIES else 1e-6  # what the plan rounds the figure to
                same = (saved == value if value is None or saved is None or isinstance(value, str)
                        else math.isclose(float(saved), float(value), rel_tol=1e-9, abs_tol=unit))  # fmt: skip
                if not same:
                    _refuse(f"{where}.{field}", saved, value, "the performance model's figure for its configuration")


def recheck_plan(plan: Plan, scenario: Scenario, catalog: Catalog, progress=None, as_planned: Scenario | None = None) -> Plan:
    """The plan with its infrastructure and totals as the scenario gives them, once every figure the file holds
    agrees (else PlannerInputError naming the first field that does not); its performance figures are recomputed
    in `as_planned` (the scenario with the options the plan was made with) where given."""
    check_lines(plan, scenario, catalog)
    check_instances(plan, catalog)
    check_routing(plan, scenario)
    check_performance(plan, as_planned or scenario, catalog, progress)
    lines = list(plan.lines)
    try:
        infrastructure = infrastructure_lines(scenario, catalog, lines)
    except ValueError as error:  # rented counts that end a rental within its minimum billing
        raise PlannerInputError("--plan", "lines", f"the rented nodes do not follow the scenario's billing: {error}") from None
    held = {(i.site, i.item): i for i in plan.infrastructure}
    for item in infrastructure:
        saved = held.pop((item.site, item.item), None)
        if saved is None:
            _refuse("infrastructure", "no line", f"{item.item} ({item.site})", "the lines' nodes need it")
        for field in ("count", "unit_usd", "capex_usd", "annual_cost_usd"):
            if _differs(getattr(saved, field), getattr(item, field)):
                where = f"infrastructure[{plan.infrastructure.index(saved)}].{field}"
                _refuse(where, getattr(saved, field), getattr(item, field), f"{item.item} for the lines' nodes")
    if held:
        site, item = next(iter(held))
        _refuse("infrastructure", f"{item} ({site})", "no such line", "the lines' nodes do not need it")
    totals = _totals(scenario, None, catalog, lines, infrastructure)
    objective = round(sum(line.annual_cost_usd for line in lines) + sum(i.annual_cost_usd for i in infrastructure), 2)
    for field, saved, expected in (("totals.annual_cost_usd", plan.totals.annual_cost_usd, totals.annual_cost_usd),
                                   ("totals.capex_usd", plan.totals.capex_usd, totals.capex_usd),
                                   ("totals.gpus", plan.totals.gpus, totals.gpus),
                                   ("objective_usd_per_year", plan.objective_usd_per_year, objective)):  # fmt: skip
        if _differs(saved, expected):
            _refuse(field, saved, expected, "the sum over the plan's lines")
    if plan.totals.nodes_by_system != totals.nodes_by_system:
        _refuse("totals.nodes_by_system", plan.totals.nodes_by_system, totals.nodes_by_system, "the plan's lines")
    return plan
