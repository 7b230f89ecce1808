"""The fleet program by brute force, written from docs/optimizer.md and nothing of planner.optimize; the random
small fleets it is checked on. Shared by test_optimizer_brute_force.py (the planner's optimum equals it under every
fleet switch and limit) and test_decomposition.py (the two-stage warm start against it).

It enumerates bought node counts, the engine variants allowed and, per period, rented node counts; whole engine
instances cover a demand when some choice of them on the nodes does (a Pareto frontier of the two workloads'
capacities over the systems). A unit is an instance's GPUs when nodes are shared, a whole node running one engine
when not; on bought nodes one count all year when not reconfigured, while rented nodes follow each period. A rental
of consecutive periods is billed its start-up lead time and at least the minimum billing per rental, and rented
capacity holds the start-up headroom.
"""

from __future__ import annotations

import itertools

from helpers import cloud_system, instance_row, on_prem_system
from hypothesis import strategies as st

GPUS = ("H100-SXM-80GB", "H200-SXM-141GB")
TPS = {"llama-3-8b": (1, 2), "llama-2-70b": (4, 8)}  # TPs that fit each model on both GPUs
WORKLOADS = {"chat": "llama-3-8b", "batch": "llama-2-70b"}
GPUS_PER_NODE = 8
HOURS = 8760 / 2


@st.composite
def cases(draw):
    systems, rows, engines = [], [], []
    for index, gpu in enumerate(GPUS):
        system_id = f"sys-{index}"
        systems.append(on_prem_system(system_id, gpu, draw(st.integers(50, 400)) * 1000.0, power_kw=draw(st.integers(2, 12))))
        for model, tps in TPS.items():
            if index == 0 or draw(st.booleans()):  # system 0 serves both models
                tp = draw(st.sampled_from(tps))
                rps = float(f"{draw(st.integers(10, 120)) / 10 * tp ** 0.8:.3g}")
                rows.append(instance_row(model, gpu, tp, rps))
                engines.append((system_id, model, gpu, tp, rps))
    market = {}
    if draw(st.booleans()):  # rented by the hour, the same GPU (and engines) as sys-0
        systems.append(cloud_system("cloud-0", GPUS[0], draw(st.integers(1, 16))))
        engines += [("cloud-0", *e[1:]) for e in engines if e[0] == "sys-0"]
        market = {"start_up_minutes": draw(st.sampled_from((0, 0, 15, 90))),
                  "minimum_billing_hours": draw(st.sampled_from((0, 0, 6, 16, 20))),
                  "demand_growth_per_hour": draw(st.sampled_from((0, 0, 0.4)))}  # fmt: skip
    demand = {
        name: [draw(st.integers(0, 10)) / 10 * peak for _ in range(2)]
        for name, peak in (("chat", draw(st.integers(1, 250)) / 10), ("batch", draw(st.integers(1, 120)) / 10))
    }  # fmt: skip
    limits = {}
    if draw(st.booleans()):
        limits["max_engine_variants"] = draw(st.integers(1, 3))
    if draw(st.booleans()):
        limits["power_kw"] = draw(st.integers(10, 80))
    if draw(st.booleans()):
        limits["max_gpus"] = {GPUS[draw(st.sampled_from((0, 0, 1)))]: 8 * draw(st.integers(1, 4))}  # mostly the rented GPU
    if draw(st.booleans()):
        limits["spare_nodes_per_system"] = 1
    return systems, rows, engines, demand, limits, market


def scenario_document(systems, demand, limits, reconfigure: bool, share: bool, market: dict | None = None) -> dict:
    peak = {name: max(values) or 0.1 for name, values in demand.items()}
    return {
        "name": "brute",
        "workloads": [{"name": name, "model": model, "isl_tokens": 1000, "osl_tokens": 100, "peak_rps": peak[name],
                       "slo": {"ttft_ms": 500}} for name, model in WORKLOADS.items()],
        "periods": [{"name": f"p{t}", "hours_per_year": HOURS,
                     "demand_factor": {name: values[t] / peak[name] for name, values in demand.items()}}
                    for t in range(2)],
        "sites": {"on_prem": {"systems": [s["id"] for s in systems if s["kind"] == "on-prem"], "amortization_years": 3,
                              "usd_per_kwh": 0.1},
                  **({"cloud": {"systems": ["cloud-0"], **(market or {})}} if any(s["kind"] == "cloud" for s in systems)
                     else {})},
        "deployment": "hybrid" if any(s["kind"] == "cloud" for s in systems) else "on-prem",
        "perf": {"sources": ["measured"]},
        "limits": limits,
        "fleet": {"reconfigure_between_periods": reconfigure, "share_nodes_across_models": share},
    }  # fmt: skip


def node_cost(system: dict, defaults) -> float:
    """Annual cost of one bought node: straight-line capital over 3 years, energy at 0.1 USD/kWh, maintenance."""
    price, power = system["price_usd"], system["power_kw"]
    return (price / 3 + power * defaults.utilization_power_factor.value * defaults.pue.value * 0.1 * 8760
            + defaults.maintenance_fraction_per_year.value * price)  # fmt: skip


def system_capacities(nodes: int, engines: list, share: bool) -> list[tuple[float, float]]:
    """Every way whole engines fill `nodes` nodes of one system (at most one engine per model): (chat, batch)
    requests/s. Shared nodes: instances of TP GPUs side by side; not shared: each node runs one engine, 8 // TP
    instances. Filling what is left with the second engine never hurts, so the first engine's count is the choice."""
    if not engines:
        return [(0.0, 0.0)]
    if share:
        slots = [(e, e[3], e[4]) for e in engines]  # (engine, GPUs per unit, rps per unit)
        room = GPUS_PER_NODE * nodes
    else:
        slots = [(e, 1, e[4] * (GPUS_PER_NODE // e[3])) for e in engines]
        room = nodes
    out = []
    first, *rest = slots
    for count in range(room // first[1] + 1):
        capacity = {first[0][1]: first[2] * count}
        if rest:
            (engine, size, rate), = rest
            capacity[engine[1]] = rate * ((room - count * first[1]) // size)
        out.append((capacity.get(WORKLOADS["chat"], 0.0), capacity.get(WORKLOADS["batch"], 0.0)))
    return out


def frontier(options_per_system: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The Pareto frontier of (chat, batch) capacities summed over systems, one option each."""
    points = [(0.0, 0.0)]
    for options in options_per_system:
        summed = sorted({(a + c, b + d) for a, b in points for c, d in options}, reverse=True)
        points, most = [], -1.0
        for a, b in summed:  # by chat capacity, descending: keep a point only if it adds batch capacity
            if b > most:
                points.append((a, b))
                most = b
    return points


def covered(points, need: dict[str, float]) -> bool:
    return any(a >= need["chat"] - 1e-9 and b >= need["batch"] - 1e-9 for a, b in points)


def rental_cost(usd_per_hour: float, counts: tuple[int, int], market: dict) -> float:
    """A year of renting counts[t] nodes in each of the two 12-hour periods of a day (the day wraps), a rental of D
    hours billed L + max(D, m - L), worked by hand: with a >= b nodes in the busy and the quiet period, a - b rentals
    start a day in the busy one (none where a = b). Each may go on through the quiet period into the next day where a
    quiet slot is free (the node stepping aside has run a whole day, past any minimum below 24 h): b of them can,
    and the max(0, a - 2b) others run 12 h, billed max(12, m - L). So a day bills 12 (a + b) hours of periods, L per
    start, and max(0, m - L - 12) for each 12-hour rental."""
    lead = market.get("start_up_minutes", 0) / 60
    minimum = market.get("minimum_billing_hours", 0)
    busy, quiet = max(counts), min(counts)
    short = max(0, busy - 2 * quiet)
    daily = 12 * (busy + quiet) + (busy - quiet) * lead + short * max(0.0, minimum - lead - 12)
    return usd_per_hour * 365 * daily


def brute_force(systems, engines, demand, limits, reconfigure: bool, share: bool, defaults, market=None) -> float | None:
    """The cheapest plan: bought node counts (with their spares), the engine variants allowed (at most V), and per
    period rented nodes at least as many as cover the period's demand with the engines on the bought nodes (bought
    nodes' engines one choice all year when not reconfigured), the pair of rented counts billed per rental
    (`rental_cost`); rented engines serve 1 / (1 + g L) of their rate (the start-up headroom)."""
    market = market or {}
    bought = [s for s in systems if s["kind"] == "on-prem"]
    rented = next((s for s in systems if s["kind"] == "cloud"), None)
    cost = {s["id"]: node_cost(s, defaults) for s in bought}
    headroom = 1 + market.get("demand_growth_per_hour", 0) * market.get("start_up_minutes", 0) / 60
    engines = [(*e[:4], e[4] / headroom) if rented and e[0] == rented["id"] else e for e in engines]
    power = {s["id"]: s["power_kw"] for s in bought}
    gpu = {s["id"]: s["gpu"] for s in systems}
    spares = limits.get("spare_nodes_per_system", 0)
    periods = [{w: demand[w][t] for w in demand} for t in range(2)]
    variants = sorted({(e[1], e[2], e[3]) for e in engines})
    limit = limits.get("max_engine_variants", len(variants))
    subsets = [set(s) for k in range(min(limit, len(variants)) + 1) for s in itertools.combinations(variants, k)]
    most = 12  # nodes per system: more than any drawn demand needs
    rented_gpu_cap = limits.get("max_gpus", {}).get(rented["gpu"]) if rented else None
    best = None
    for counts in itertools.product(range(most + 1), repeat=len(bought)):
        nodes = {s["id"]: n for s, n in zip(bought, counts)}
        held = {s: n + (spares if n > 0 else 0) for s, n in nodes.items()}  # spares cost, draw power, hold GPUs
        total = sum(cost[s] * n for s, n in held.items())
        if best is not None and total >= best - 1e-6:
            continue
        if "power_kw" in limits and sum(power[s] * n for s, n in held.items()) > limits["power_kw"] + 1e-9:
            continue
        if any(sum(GPUS_PER_NODE * n for s, n in held.items() if gpu[s] == g) > a for g, a in limits.get("max_gpus", {}).items()):
            continue
        most_rented = most
        if rented_gpu_cap is not None:  # rented GPUs of that type count beside the bought ones, every period
            most_rented = min(most, (rented_gpu_cap - sum(GPUS_PER_NODE * n for s, n in held.items() if gpu[s] == rented["gpu"])) // GPUS_PER_NODE)
        for chosen in subsets:
            allowed = [e for e in engines if (e[1], e[2], e[3]) in chosen]
            options = [system_capacities(n, [e for e in allowed if e[0] == s], share) for s, n in nodes.items()]
            rent_options = [system_capacities(m, [e for e in allowed if rented and e[0] == rented["id"]], share)
                            for m in range(most_rented + 1)] if rented else [[(0.0, 0.0)]]  # fmt: skip

            def fewest_rented(base_points, need):
                for m, rent in enumerate(rent_options):
                    if covered(frontier([base_points, rent]), need):
                        return m
                return None

            def cheapest_rental(extra):  # any counts at least the fewest serve (more rented never serve less)
                if None in extra:
                    return None
                if rented is None:
                    return 0.0
                return min(rental_cost(rented["usd_per_hour"], (a, b), market)
                           for a in range(extra[0], most_rented + 1) for b in range(extra[1], most_rented + 1))

            if reconfigure:
                base = frontier(options)
                found = cheapest_rental([fewest_rented(base, need) for need in periods])
                candidates_ = [] if found is None else [found]
            else:  # one choice of engines on the bought nodes for the year; rented nodes follow each period
                candidates_ = []
                for point in frontier(options):
                    found = cheapest_rental([fewest_rented([point], need) for need in periods])
                    if found is not None:
                        candidates_.append(found)
            if candidates_:
                plan_cost = total + min(candidates_)
                if best is None or plan_cost < best - 1e-6:
                    best = plan_cost
    return best
