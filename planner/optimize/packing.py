"""Node packing: which units of which configuration each bought or rented node runs, and the plan lines of
identical nodes (what to buy or rent, and in words what those nodes run in each period)."""

from __future__ import annotations

from collections import defaultdict

from planner.candidates import Candidate, CandidateSet
from planner.optimize.model import FleetModel, Hardware
from planner.perf.serving import DEFAULT_ENGINE, engine_named
from planner.plan import PlanLine

_ROLE = {"capex": "bought", "reserved": "reserved", "on-demand": "on-demand", "spot": "spot"}


def pack_nodes(hardware: Hardware, nodes: int, running: list[tuple[Candidate, int]]) -> list[tuple[tuple[str, int], ...]]:
    """What each of `nodes` nodes runs; each node's content is ((configuration key, instances), ...).

    A unit over whole nodes (pipeline stages, an instance wider than a node) takes that many empty nodes, and
    lists its instances on each. The others go largest first into the nodes in order: unit sizes form a divisibility
    chain of the node size, so a node's free room is always a multiple of the size being placed and filling the
    nodes one after another never fails when the units' GPUs fit (the node-room constraint). Work is linear in
    the nodes per unit size, whatever the number of units."""
    node_gpus = hardware.gpus_per_node
    free = [node_gpus] * nodes
    content: list[dict[str, int]] = [defaultdict(int) for _ in range(nodes)]
    defect = f"units of {hardware.system} do not pack into {nodes} nodes: a planner defect"
    wide = [(c, n) for c, n in running if c.gpus_per_unit > node_gpus]
    narrow = [(c, n) for c, n in running if c.gpus_per_unit <= node_gpus]
    empty = 0  # whole nodes go first, from the start: every node before `empty` is taken
    for candidate, count in sorted(wide, key=lambda item: (-item[0].gpus_per_unit, item[0].key)):
        span = -(-candidate.gpus_per_unit // node_gpus)
        for _ in range(count):
            if empty + span > nodes:
                raise RuntimeError(defect)
            for node in range(empty, empty + span):
                free[node] = 0
                content[node][candidate.key] += candidate.instances_per_unit
            empty += span
    for candidate, count in sorted(narrow, key=lambda item: (-item[0].gpus_per_unit, item[0].key)):
        size, left, node = candidate.gpus_per_unit, count, empty
        while left:
            while node < nodes and free[node] < size:
                node += 1
            if node == nodes:
                raise RuntimeError(defect)
            placed = min(left, free[node] // size)
            free[node] -= placed * size
            content[node][candidate.key] += placed * candidate.instances_per_unit
            left -= placed
    return [tuple(sorted(c.items())) for c in content]


def node_lines(scenario, cset: CandidateSet, model: FleetModel, fixed: dict, rented: dict, units: dict) -> list[PlanLine]:
    """One plan line per group of identical nodes (the same instances in every period): what to buy or rent, and
    in `runs` what those nodes run. Bought/reserved nodes once for the year, on-demand ones per period."""
    def running(key, period):
        return [(c, units.get((c.key, period), 0)) for c in model.members[key] if units.get((c.key, period), 0) > 0]

    lines = []
    for key, hardware in model.hardware.items():
        if hardware.fixed:
            count = fixed.get(key, 0)
            if count <= 0:
                continue
            per_period = [pack_nodes(hardware, count, running(key, p.name)) for p in scenario.periods]
            schedules = [tuple(packing[i] for packing in per_period) for i in range(count)]
            for schedule, n in _groups(schedules):
                lines.append(_node_line(scenario, cset, hardware, schedule, n, "all", hardware.annual_cost_usd * n))
            continue
        for period in scenario.periods:
            count = rented.get((key, period.name), 0)
            if count <= 0:
                continue
            packing = pack_nodes(hardware, count, running(key, period.name))
            for schedule, n in _groups([(content,) for content in packing]):
                cost = hardware.usd_per_hour * period.hours_per_year * n  # starts and minimums: infrastructure_lines
                lines.append(_node_line(scenario, cset, hardware, schedule, n, period.name, cost, (period.name,)))
    return lines


def _groups(schedules: list[tuple]) -> list[tuple[tuple, int]]:
    """Identical node schedules counted, in the order nodes were filled."""
    counts: dict[tuple, int] = {}
    for schedule in schedules:
        counts[schedule] = counts.get(schedule, 0) + 1
    return list(counts.items())


def _engine_label(c: Candidate) -> str:
    engine = engine_named(c.engine, c.engine_version)
    engine = "" if engine == engine_named(DEFAULT_ENGINE) else engine  # the reference engine, its release unstated
    parts = [c.model, c.layout_label, c.precision or "", engine,
             f"b{c.max_batch}" if c.max_batch else "", "speculative" if c.speculative else "",
             c.stage if c.stage != "aggregated" else ""]  # fmt: skip
    return " ".join(p for p in parts if p) + f" {c.engine_isl}/{c.engine_osl}"


def _across(c: Candidate, gpus_per_node: int) -> str:
    """' across N nodes' for an instance wider than a node (pipeline stages): each of its nodes lists it."""
    span = -(-c.gpus_per_instance // gpus_per_node)
    return f" across {span} nodes" if span > 1 else ""


def _runs(cset: CandidateSet, schedule: tuple, periods: tuple[str, ...], gpus_per_node: int) -> str:
    """Consecutive periods with the same content, in words, with the GPUs left idle."""

    def words(content) -> str:
        idle = gpus_per_node - sum(n * min(cset.candidate(k).gpus_per_instance, gpus_per_node) for k, n in content)
        running = " + ".join(f"{n}x {_engine_label(cset.candidate(k))}" + _across(cset.candidate(k), gpus_per_node)
                             for k, n in content)  # fmt: skip
        if not running:
            return "idle"
        return running + (f" ({idle} GPU{'s' if idle > 1 else ''} idle)" if idle > 0 else "")

    spans: list[list] = []
    for period, content in zip(periods, schedule):
        if spans and spans[-1][2] == content:
            spans[-1][1] = period
        else:
            spans.append([period, period, content])
    if len(spans) == 1:
        return words(spans[0][2]) if len(periods) == 1 else f"all periods: {words(spans[0][2])}"
    return "; ".join(f"{a}{'' if a == b else ' to ' + b}: {words(content)}" for a, b, content in spans)


def _node_line(scenario, cset: CandidateSet, hardware: Hardware, schedule: tuple, nodes: int, period: str,
               annual_cost: float, periods: tuple[str, ...] | None = None) -> PlanLine:
    """A line of identical nodes; its engine fields are the configuration's when the nodes run one configuration
    all year, else what the configurations they run have in common (the models joined by '+')."""
    periods = periods or tuple(p.name for p in scenario.periods)
    configs = [cset.candidate(k) for k in sorted({k for content in schedule for k, _ in content})]

    def common(attribute, mixed):
        values = {getattr(c, attribute) for c in configs}
        return values.pop() if len(values) == 1 else mixed

    layouts = {c.layout_label for c in configs}

    return PlanLine(
        site=hardware.site, system=hardware.system, gpu=hardware.gpu,
        model="+".join(sorted({c.model for c in configs})) or "(idle)",
        tp=common("tp", None), precision=common("precision", None), max_batch=common("max_batch", None),
        engine_isl=common("engine_isl", 0), engine_osl=common("engine_osl", 0), nodes=nodes,
        gpus=hardware.gpus_per_node * nodes, period=period, role=_ROLE[hardware.pricing],
        annual_cost_usd=round(annual_cost, 2), capex_usd=round(hardware.capex_usd * nodes, 2),
        power_kw=round(hardware.power_kw * nodes, 6), cost_note=hardware.cost_note,
        runs=_runs(cset, schedule, periods, hardware.gpus_per_node),
        stage=common("stage", "mixed"), layout=next(iter(layouts)) if len(layouts) == 1 else "", speculative=common("speculative", False),
        engine=common("engine", "mixed"), engine_version=common("engine_version", ""),
    )  # fmt: skip
