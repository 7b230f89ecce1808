"""Does a plan hold its latency limits under random or real traffic? Every workload in every period, on the engines
the plan gives it (`simulate_plan`).

Workloads are simulated as the deployment runs them: in each period the routes (a workload bucket on one
configuration) form pools, the connected components of the graph linking workloads and the configurations their
routes use (`_pools`). A pool runs once per seed: every route's requests (its own arrivals, lengths and caps) go
through the balancer to the engines of its configuration (all its instances running in the period), mixed with the
other routes there; each workload's statistics come from its own requests and its own token gaps (the engines count
each class's running sequences, `ServingEngine(classes=...)`). A configuration that carries one route runs as
before pools existed (same seed, same results); a workload's several length buckets on one configuration mix on all
its engines too. The engines of a configuration are `ServingEngine`s:
- modeled configurations: the calibrated roofline's step times, the plan's batch cap, the instance's KV cache;
- configurations from a measured or interpolated point: the same roofline step shapes scaled by one factor so that
  an engine kept full at the point's concurrency delivers exactly the measured requests/s (`steps.saturated_rps`);
  the concurrency is the point's own when it records one, else Little's law over its decode time (requests/s x
  OSL x TPOT, a request's mean gap), else the roofline's smallest batch reaching the measured rate. Rows measured
  on a whole node are run as the smallest tensor-parallel engine the model fits, that many per node. Models
  without an architecture get `steps.PointSteps` fitted to the point;
- disaggregated routes: prefill engines (whole prompts, the first token only), the KV transfer at the slower of the
  two instances' networks, decode engines that take each request with its prompt cached (`pools.run_pool_once`,
  `_hand_over`, `_join_stages`);
- speculative routes: the scenario's speculation, accepted tokens drawn per step (`ServingEngine`);
- a workload's prefix cache: each request's cached prompt tokens drawn at its hit rate, or a trace's own.

Verdicts (planner/simulate/verdicts.py): each limit the SLO sets at the scenario's percentile over the measured
window, with a 95% interval: it `holds`, `misses` or is `inconclusive`. How long and how many seeds each pool runs
before it is judged (a pilot run settles the length, extra seeds for inconclusive verdicts, a seed being a run of
the whole pool): planner/simulate/settling.py.
"""

from __future__ import annotations

import dataclasses
import math
import time

from planner.errors import PlannerInputError
from planner.plan import PER_PERIOD_ROLES, configuration_key, route_matches
from planner.simulate.options import SimulationOptions
from planner.simulate.pools import Group, Pool, RouteRun
from planner.simulate.settling import simulate_pool, within_run_bound
from planner.simulate.setups import engine_setup, instances_per_node
from planner.simulate.verdicts import HOLDS, NOT_SIMULATED, WorkloadCheck, workload_verdict


def simulate_plan(plan, scenario, catalog, options: SimulationOptions | None = None, progress=None) -> tuple[WorkloadCheck, ...]:
    """Every workload in every period (with a trace: the traced workload in its busiest period, or the one named),
    on the engines the plan gives it; see the module docstring. Workloads whose routes share a configuration are
    simulated together, as the deployment runs them (`_pools`): every route's requests go to all the instances of its
    configuration running in the period, mixed with the other workloads' there, and each workload's statistics and
    verdicts come from its own requests and token gaps."""
    options = options or SimulationOptions()
    if options.token_budget is None:
        options = dataclasses.replace(options, token_budget=scenario.token_budget)
    options = within_run_bound(options)  # a trace longer than one run holds: its first requests
    specs = {w.name: w for w in scenario.workloads}
    jobs = []
    for period in scenario.periods:
        routes = [r for r in plan.routing if r.period == period.name]
        for workload in plan.workloads:
            mine = [r for r in routes if r.workload == workload.name]
            if mine and sum(r.rps for r in mine) > 0:
                jobs.append((period.name, workload, mine, routes))
    pool_of = {(job[0], job[1].name): pool for pool in _pools(jobs) for job in pool}
    if options.trace is not None:
        jobs = _trace_jobs(jobs, options)
    checks, done = [], {}
    for number, (period, workload, _, _) in enumerate(jobs):
        if progress is not None:
            progress(number, len(jobs))
        key = (period, workload.name)
        if key not in done:
            traced = workload.name if options.trace is not None else None
            done.update(_simulate_pool_jobs(plan, catalog, specs, pool_of[key], options, traced, scenario.speculation))
        checks.append(done[key])
    if progress is not None:
        progress(len(jobs), len(jobs))
    return tuple(checks)


def _linking_keys(mine) -> set:
    """The configurations through which a workload's routes share engines: those its simulated routes send requests
    to (a route of no requests links nothing)."""
    return {configuration_key(r) for r in mine if r.rps > 0}


def _pools(jobs) -> list[list]:
    """The jobs (period, workload, its routes, the period's routes) grouped into pools: per period, the connected
    components of the graph linking workloads and the configurations their routes use (a workload on A and B and
    another on B form one pool). Each pool in job order; a workload alone on its configurations is a pool of one."""
    keys = [_linking_keys(job[2]) for job in jobs]
    assigned = [False] * len(jobs)
    out = []
    for i, job in enumerate(jobs):
        if assigned[i]:
            continue
        component, reach = {i}, set(keys[i])
        grown = True
        while grown:
            grown = False
            for j, other in enumerate(jobs):
                if j not in component and not assigned[j] and other[0] == job[0] and keys[j] & reach:
                    component.add(j)
                    reach |= keys[j]
                    grown = True
        for j in component:
            assigned[j] = True
        out.append([jobs[j] for j in sorted(component)])
    return out


def _trace_jobs(jobs, options):

    names = sorted({w.name for _, w, _, _ in jobs})
    name = options.trace_workload
    if name is None:
        if len(names) != 1:
            raise PlannerInputError("--workload", "workload", f"the plan has several workloads; name the traced one: {', '.join(names)}")
        name = names[0]
    mine = [j for j in jobs if j[1].name == name]
    if not mine:
        raise PlannerInputError("--workload", "workload", f"no workload '{name[:100]}' is served in the plan; allowed: {', '.join(names)}")
    if options.trace_period is not None:
        chosen = [j for j in mine if j[0] == options.trace_period]
        if not chosen:
            raise PlannerInputError("--period", "period", f"'{options.trace_period[:100]}' is not a period of the plan; allowed: "
                                    f"{', '.join(j[0] for j in mine)}")  # fmt: skip
        return chosen
    return [max(mine, key=lambda j: sum(r.rps for r in j[2]))]


def _instance_load(route) -> float:
    """Instances of its configuration a route keeps busy (its requests/s where its rate per instance is unknown)."""
    return route.rps / route.rps_per_instance if route.rps_per_instance else route.rps


def _simulate_pool_jobs(plan, catalog, specs, jobs, options, traced: str | None = None, speculation=None) -> dict:
    """The WorkloadChecks of one pool's workloads, by (period, workload): each configuration's engines (all its
    instances running in the period, or the share of them its routes here take when routes of the pool's workloads
    leave some to workloads outside the pool) take the requests of every route of the pool on it; each workload is
    judged on its own requests and gaps. With a trace, `traced` replays it and only its check is meaningful."""
    started = time.perf_counter()
    period, routes = jobs[0][0], jobs[0][3]
    # a configuration several routes share is split by the instances each route's load takes (its rate over what
    # one instance serves at its lengths), not by requests/s: a long-prompt route needs more engines per request;
    # the routes of one pool on one configuration take their shares together (all of it when they are all its routes)
    config_total: dict[tuple, float] = {}
    for r in routes:
        config_total[configuration_key(r)] = config_total.get(configuration_key(r), 0.0) + _instance_load(r)
    names = [job[1].name for job in jobs]
    rates = [sum(r.rps for r in job[2] if r.stage != "decode") for job in jobs]  # a disaggregated request is routed twice
    routed = list(rates)  # a traced workload's rate becomes the trace's
    entries: list[list] = [[] for _ in jobs]  # per workload, in route order: a note, or the index of a candidate
    candidates = []  # (workload, route, assignment)
    by_key: dict[tuple, list[int]] = {}
    for w, (_, workload, mine, _) in enumerate(jobs):
        for route in mine:
            assignment = next(a for a in workload.assignments if route_matches(a, route))
            entries[w].append(len(candidates))
            by_key.setdefault(configuration_key(route), []).append(len(candidates))
            candidates.append((w, route, assignment))
    setups, described = {}, {}  # candidate -> the setup of its group; (workload, candidate) -> the text
    groups = []
    open_loop = getattr(plan, "sizing", "random-arrivals") != "closed-loop"  # how the plan sized its engines

    def setup_of(i: int, shared_with: str = ""):
        w, route, assignment = candidates[i]
        cache = getattr(specs[names[w]], "prefix_cache", None)  # test doubles may lack it
        return engine_setup(route, assignment, instances, share, catalog, options.token_budget, shared_with,
                            speculation, cache, open_loop)  # fmt: skip

    for key, members in by_key.items():
        total = config_total[key]
        share = sum(_instance_load(candidates[i][1]) for i in members) / total if total > 0 else 0.0
        lead = max(members, key=lambda i: _instance_load(candidates[i][1]))  # the first of the largest load
        _, route, assignment = candidates[lead]
        instances = _running_instances(plan, route, catalog)
        setup = setup_of(lead)
        owners = list(dict.fromkeys(candidates[i][0] for i in members))
        if isinstance(setup, str):
            for i in members:
                described[(candidates[i][0], i)] = f"{candidates[i][1].system}: {setup}"
            continue
        differs = len(members) > 1 and any(_setup_signature(setup_of(i)) != _setup_signature(setup) for i in members)
        for w in owners:
            others = ", ".join(names[v] for v in owners if v != w)
            text = setup.description
            if others:
                text = setup_of(lead, others).description
            buckets = sum(1 for i in members if candidates[i][0] == w)
            if buckets > 1:
                text += f" (its {buckets} length buckets mixed on them)"
            if differs:
                text += (f"; step times and batch from {names[candidates[lead][0]]}'s {route.bucket_isl}/{route.bucket_osl} "
                         "route, the largest load on them")  # fmt: skip
            first = next(i for i in members if candidates[i][0] == w)
            described[(w, first)] = f"{route.system}: {text}"
        for i in members:
            setups[i] = setup
        groups.append(members)
    # the pool's runs: its simulated routes in workload and route order, each workload numbered among those that run
    active = [w for w in range(len(jobs)) if any(isinstance(e, int) and e in setups for e in entries[w])]
    number = {w: k for k, w in enumerate(active)}
    index, runs, owners = {}, [], []
    for w in active:
        for e in entries[w]:
            if isinstance(e, int) and e in setups:
                index[e] = len(runs)
                runs.append(RouteRun(candidates[e][1], setups[e], _context_tokens(catalog, candidates[e][1])))
                owners.append(number[w])
    pool_groups = tuple(Group(setups[members[0]], tuple(index[i] for i in members)) for members in groups)
    notes = ["" for _ in jobs]
    for w, (_, workload, _, _) in enumerate(jobs):
        cache = getattr(specs[workload.name], "prefix_cache", None)  # test doubles may lack it
        if cache is not None:
            notes[w] = (f"prefix cache: the first {cache.tokens:,} prompt tokens found cached by {cache.hit_rate:.0%} of "
                        "requests, drawn per request")  # fmt: skip
    if options.trace is not None and traced in names:
        t = names.index(traced)
        trace = options.trace
        trace_rate = trace.requests / trace.duration_s if trace.duration_s > 0 else math.nan
        cached = ("; prefix cache: each request's cached tokens from the trace's block hashes"
                  if trace.cached_tokens is not None else f"; {notes[t]}" if notes[t] else "")  # fmt: skip
        notes[t] = (f"trace {trace.path}: {trace.requests:,} requests at {trace_rate:.4g} rps mean (the plan routes {rates[t]:.4g} "
                    "rps here)" + cached + "".join(f"; {note}" for note in trace.notes))  # fmt: skip
        rates[t] = trace_rate
        if len(active) > 1:
            notes[t] += f"; {', '.join(names[w] for w in active if w != t)} ran on the shared engines at the plan's rates"
    outcomes = []
    traced_number = number.get(names.index(traced)) if traced in names else 0  # None: the traced workload cannot run
    if active and traced_number is not None:
        pool = Pool(tuple(runs), tuple(owners), pool_groups, tuple(specs[names[w]] for w in active),
                     tuple(rates[w] for w in active), traced_number)  # fmt: skip
        outcomes = simulate_pool(pool, options)
    else:
        number = {}
    wall = time.perf_counter() - started
    simulated = sum(o.requests_simulated for o in outcomes)
    out = {}
    for w, (_, workload, _, _) in enumerate(jobs):
        texts = [e if isinstance(e, str) else described.get((w, e)) for e in entries[w]]
        engines = "; ".join(t for t in texts if t)
        if w not in number:
            out[(period, workload.name)] = WorkloadCheck(workload.name, period, routed[w], 0, engines, None, (), None,
                                                         "not simulated", verdict=NOT_SIMULATED)  # fmt: skip
            continue
        outcome = outcomes[number[w]]
        stats, note = outcome.stats, notes[w]
        if stats.rejected:
            note = (note + "; " if note else "") + f"{stats.rejected} requests refused (prompt longer than any engine takes)"
        verdict = workload_verdict(outcome.checks, stats)
        mine = {index[e] for e in entries[w] if isinstance(e, int) and e in index}
        instances = sum(g.setup.count for g in pool_groups if mine & set(g.members))
        out[(period, workload.name)] = WorkloadCheck(
            workload.name, period, rates[w], instances, engines, stats, outcome.checks, verdict == HOLDS, note,
            duration_s=outcome.duration_s, seeds=outcome.seeds, settled=outcome.settled,
            requests_simulated=outcome.requests_simulated,
            wall_s=wall * outcome.requests_simulated / simulated if simulated else wall, verdict=verdict,
            extra_seeds=outcome.extra_seeds, seeds_note=outcome.seeds_note, balancer=options.balancer,
        )  # fmt: skip
    return out


def _context_tokens(catalog, route) -> int | None:
    """The model's context (the longest prompt + output its engines serve), where the catalog states it."""
    model = catalog.models.get(route.model)
    return getattr(model, "max_context", None) if model is not None else None


def _setup_signature(setup) -> tuple:
    """What makes two routes' engines the same engines (a string: why they cannot be simulated)."""
    if isinstance(setup, str):
        return (setup,)
    return setup.max_batch, setup.kv_tokens, setup.request_overhead_ms, setup.count, setup.description


def _running_instances(plan, route, catalog) -> int:
    """Instances of the route's configuration running in its period (plans saved before instances were
    recorded: the nodes of its plan line x instances per node)."""
    if plan.instances:
        for allocation in plan.instances:
            if configuration_key(allocation) == configuration_key(route) and allocation.period == route.period:
                return allocation.instances
        raise ValueError(f"no instances serve route {route}")
    per_node = instances_per_node(route, catalog.systems[route.system].gpus_per_node)
    for line in plan.lines:
        if configuration_key(line) == configuration_key(route) and (line.role not in PER_PERIOD_ROLES or line.period == route.period):
            return line.nodes * per_node
    raise ValueError(f"no plan line serves route {route}")

