"""One run of a pool of workloads on their engines (`run_pool_once`, planner/simulate/verify.py for what a pool is):
each route's requests drawn (or split from a trace), mixed on the engines of its configuration through the balancer,
and disaggregated requests carried from their prefill pool over the network to their decode pool."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.perf.disagg import kv_transfer_ms
from planner.perf.types import DEFAULT_TOKEN_BUDGET
from planner.simulate.balance import run
from planner.simulate.engines import ServingEngine
from planner.simulate.options import SimulationOptions
from planner.simulate.setups import EngineSetup
from planner.simulate.traffic import Requests, cached_prefixes, gamma_arrivals, lognormal_lengths


@dataclass(frozen=True)
class RouteRun:
    route: object
    setup: EngineSetup  # the engines its requests run on (its configuration's, in a pool)
    context_tokens: int | None = None  # the longest prompt + output its engines serve: the model's context

    def context(self) -> int | None:
        """The longest request (prompt + output tokens) the engines serve: the model's context (vLLM's and SGLang's
        default max_model_len; a TensorRT-LLM engine is taken as built for it), else the engines' whole KV cache;
        None where neither is known (a measured point of a model without an architecture)."""
        if self.context_tokens:
            return int(self.context_tokens)
        return int(self.setup.kv_tokens) if self.setup.kv_tokens else None


def _route_requests(route, duration_s: float, options: SimulationOptions, rng, caps, cache=None) -> Requests:
    """A route's requests over the run: arrivals, lengths drawn about the bucket's means within its caps
    (`_length_caps`: a prompt, and prompt + output, within the engine's context) and, with the workload's prefix
    cache (perf.types.PrefixCache), the prompt tokens each finds cached (drawn after the rest, so that a workload
    without one draws as before)."""
    arrivals = gamma_arrivals(route.rps, duration_s, options.arrival_cv, rng)
    isl_cap, osl_cap, context = caps
    isl = lognormal_lengths(route.bucket_isl, options.length_cv, len(arrivals), isl_cap, rng)
    room = np.minimum(osl_cap, context - isl) if context is not None else osl_cap
    osl = lognormal_lengths(route.bucket_osl, options.length_cv, len(arrivals), room, rng)
    return Requests(arrivals, isl, osl, cached_prefixes(isl, cache, rng))


def _trace_split(trace, runs: list[RouteRun], rng) -> list[Requests]:
    """The trace's requests (times from its first arrival) split across the routes whose engines take their
    prompts (within the engine's context, `RouteRun.context`: every request of a trace is replayed as it is, the
    engine's built lengths shape its batch and cap nothing), in proportion to the routes' rates; prompts beyond
    every engine's context are refused (counted as failed), outputs are cut where prompt + output reach the
    context. Returns one set per route, then the refused ones."""
    arrival = trace.arrival_s - trace.arrival_s[0]
    isl, osl = trace.isl_tokens.astype(np.int64), np.maximum(trace.osl_tokens.astype(np.int64), 1)
    isl = np.maximum(isl, 1)
    weights = np.array([r.route.rps for r in runs], dtype=float)
    contexts = [r.context() for r in runs]
    fits = np.array([isl < c if c is not None else isl <= r.route.engine_isl for r, c in zip(runs, contexts)])
    chosen = np.full(len(arrival), -1)
    draw = rng.uniform(size=len(arrival))
    cumulative = np.cumsum(fits * weights[:, None], axis=0)
    total = cumulative[-1] if len(runs) else np.zeros(len(arrival))
    served = total > 0
    chosen[served] = (cumulative[:, served] < (draw[served] * total[served])[None, :]).sum(axis=0)
    parts = []
    cached = trace.cached_tokens  # the prompt tokens each request found cached, where the trace names its blocks
    for i, r in enumerate(runs):
        mine = chosen == i
        room = contexts[i] - isl[mine] if contexts[i] is not None else r.route.engine_osl
        parts.append(Requests(arrival[mine], isl[mine], np.maximum(np.minimum(osl[mine], room), 1),
                              None if cached is None else np.minimum(cached[mine], isl[mine] - 1)))  # fmt: skip
    refused = Requests(arrival[~served], isl[~served], osl[~served])
    refused.rejected[:] = True
    parts.append(refused)
    return parts


def _length_caps(workload_spec, run: RouteRun) -> tuple[int, float, int | None]:
    """(longest prompt, longest output, context) of a route's requests: the bucket's stated maxima, within the
    engine's context (`RouteRun.context`: prompt + output, each request's output cut where they reach it). The
    engine's built lengths (ISL/OSL) shape its batch; they are not a clip: a bucket's mean with spread
    (--length-cv) is drawn as stated, its long requests served as a vLLM-class engine serves them. Where no
    context is known (a measured point of a model without an architecture), the engine's lengths, as before."""
    route, context = run.route, run.context()
    stated = next(((b.max_isl_tokens, b.max_osl_tokens) for b in workload_spec.buckets or ()
                   if (b.isl_tokens, b.osl_tokens) == (route.bucket_isl, route.bucket_osl)), (None, None))  # fmt: skip
    if context is None:
        return (min(stated[0] or route.engine_isl, route.engine_isl), min(stated[1] or route.engine_osl, route.engine_osl),
                None)  # fmt: skip
    isl_cap = min(stated[0] or context - 1, context - 1)
    return max(isl_cap, 1), (stated[1] or math.inf), context


@dataclass(frozen=True)
class Group:
    """The engines of one configuration and the routes (indices into the pool's `runs`) whose requests they take,
    mixed through one balancer."""

    setup: EngineSetup
    members: tuple[int, ...]


@dataclass(frozen=True)
class Pool:
    """Workloads that share engines in one period (`pools`): their routes (`runs`; `owners[i]`: the index of run i's
    workload), the engine groups (one per configuration), each workload's spec and rate. With a trace, `traced` is
    the workload that replays it; the others run at their own rates over the trace's span."""

    runs: tuple[RouteRun, ...]
    owners: tuple[int, ...]
    groups: tuple[Group, ...]
    specs: tuple
    rates: tuple[float, ...]
    traced: int = 0


def single_pool(runs: list[RouteRun], workload_spec, rate_rps: float) -> Pool:
    """One workload whose routes each run on their own engines."""
    return Pool(tuple(runs), (0,) * len(runs), tuple(Group(r.setup, (i,)) for i, r in enumerate(runs)),
                 (workload_spec,), (rate_rps,))  # fmt: skip


def _mixed(parts: list[Requests]) -> tuple[Requests, np.ndarray, np.ndarray]:
    """Several routes' requests as one set sorted by arrival (stable), the index of the part of each, and where each
    request of the parts (concatenated in order) sits in the set."""
    arrival = np.concatenate([p.arrival_s for p in parts])
    order = np.argsort(arrival, kind="stable")
    mixed = Requests(arrival[order], np.concatenate([p.isl for p in parts])[order],
                     np.concatenate([p.osl for p in parts])[order], np.concatenate([p.cached for p in parts])[order])  # fmt: skip
    source = np.repeat(np.arange(len(parts)), [len(p) for p in parts])[order]
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return mixed, source, position


def run_pool_once(pool: Pool, duration_s: float, seed: int, options: SimulationOptions):
    """One run of a pool: every route's requests (its own arrivals, lengths and caps) on the engines of its
    configuration, mixed with the other routes there. Returns per workload (its requests, the gaps its sequences
    received on each engine, its preemptions). A pool of one workload whose routes have their own engines draws and
    runs exactly as before pools existed (same seed, same results).

    Disaggregated routes run in two passes: the requests of prefill routes (and aggregated ones) first, on engines
    that make their first token only; then each prefilled request moves to a decode route of its bucket
    (`_hand_over`) and the decode engines run; `_join_stages` gives each request its first token (prefill, then the
    KV transfer) and its finish (the decode pool's)."""
    rng = np.random.default_rng(seed)
    count = len(pool.specs)
    parts: list[Requests | None] = [None] * len(pool.runs)
    tails = [Requests(np.zeros(0), np.zeros(0), np.zeros(0)) for _ in range(count)]  # a trace's refused requests
    entering = [i for i, r in enumerate(pool.runs) if r.setup.stage != "decode"]  # decode routes take hand-overs
    if options.trace is not None:
        mine = [i for i in entering if pool.owners[i] == pool.traced]
        split = _trace_split(options.trace, [pool.runs[i] for i in mine], rng)
        cache = getattr(pool.specs[pool.traced], "prefix_cache", None)
        for i, part in zip(mine, split):
            parts[i] = part
            if cache is not None and options.trace.cached_tokens is None:  # the workload's cache, drawn as elsewhere
                part.cached = cached_prefixes(part.isl, cache, rng)
        tails[pool.traced] = split[-1]
        arrival = options.trace.arrival_s
        duration_s = float(arrival.max() - arrival[0]) if len(arrival) else 0.0  # the others run over its span
    for i in entering:
        if parts[i] is None:
            r = pool.runs[i]
            spec = pool.specs[pool.owners[i]]
            parts[i] = _route_requests(r.route, duration_s, options, rng, _length_caps(spec, r), getattr(spec, "prefix_cache", None))
    # a prefill engine sees its requests with one output token: the prompt's (the decode pool makes the rest)
    staged = {i: Requests(parts[i].arrival_s, parts[i].isl, np.ones(len(parts[i]), dtype=np.int64), parts[i].cached)
              for i in entering if pool.runs[i].setup.stage == "prefill"}  # fmt: skip
    gaps: list[list] = [[] for _ in range(count)]
    preemptions = [0] * count
    view = lambda i: staged.get(i, parts[i])  # noqa: E731
    for g, group in enumerate(pool.groups):
        if group.setup.stage != "decode":
            _run_group(pool, g, view, seed, options, gaps, preemptions)
    if len(entering) < len(pool.runs):
        handed = _hand_over(pool, parts, staged, rng)
        for g, group in enumerate(pool.groups):
            if group.setup.stage == "decode":
                _run_group(pool, g, view, seed, options, gaps, preemptions)
        _join_stages(parts, staged, handed)
    out = []
    for w in range(count):
        mine = [parts[i] for i in entering if pool.owners[i] == w]
        out.append((Requests.merged(mine + [tails[w]]), gaps[w], preemptions[w]))
    return out


def _run_group(pool: Pool, g: int, view, seed: int, options: SimulationOptions, gaps, preemptions) -> None:
    """The engines of group `g` take the requests of its routes (`view(i)`: route i's requests as they see them),
    mixed through the balancer; their times are written back to each route's requests, their gaps and preemptions
    to each workload's lists."""
    group = pool.groups[g]
    setup = group.setup
    owners = list(dict.fromkeys(pool.owners[i] for i in group.members))  # its workloads, in order
    classes = None
    if len(group.members) == 1:
        requests, source, position = view(group.members[0]), None, None
    else:
        requests, source, position = _mixed([view(i) for i in group.members])
        if len(owners) > 1:
            local = np.array([owners.index(pool.owners[i]) for i in group.members])
            classes = local[source].tolist()
    budget = setup.token_budget or options.token_budget or DEFAULT_TOKEN_BUDGET
    engines = [ServingEngine(setup.steps, setup.max_batch, setup.kv_tokens, budget, setup.request_overhead_ms,
                             classes=classes, speculation=setup.speculation, seed=[seed, g, k],
                             continues=setup.stage == "decode", kv_admission=setup.kv_admission)
               for k in range(setup.count)]  # fmt: skip
    if len(requests):
        run(engines, requests, options.balancer, seed)
    if position is not None:  # back to each route's own requests
        offset = 0
        for i in group.members:
            part = view(i)
            at = position[offset:offset + len(part)]
            offset += len(part)
            for name in ("admitted_s", "first_token_s", "finish_s", "rejected"):
                setattr(part, name, getattr(requests, name)[at])
    if setup.stage == "prefill":
        return  # a prefill engine makes first tokens only: no gaps between tokens, no decode to preempt
    for c, owner in enumerate(owners):
        for engine in engines:
            if classes is None:
                gaps[owner].append(engine.gaps)
                preemptions[owner] += engine.preemptions
            else:
                gaps[owner].append(engine.class_gaps(c))
                preemptions[owner] += engine.class_preemptions[c] if c < len(engine.class_preemptions) else 0


def _transfer_ms(prefill: EngineSetup, decode: EngineSetup, isl) -> np.ndarray:
    """A prompt's KV cache from a prefill instance to a decode instance: its bytes at the slower of the two
    instances' networks (each its share of its node's scale-out NICs, line rate), plus one hop's latency: the
    model's formula (perf.disagg.kv_transfer_ms) at the slower rate, where the model's sizing takes the prefill
    side's."""
    links = [b for b in (prefill.network_bytes_per_s, decode.network_bytes_per_s) if b > 0]
    steps = prefill.steps
    return kv_transfer_ms(steps.shape, np.asarray(isl, dtype=float), min(links, default=math.inf), steps.efficiency)


def _hand_over(pool: Pool, parts, staged, rng) -> dict:
    """Each prefilled request (its first token made, the request not refused) of a workload's length bucket goes to
    one of the decode routes of that bucket, drawn in proportion to their rates (as the plan splits them). It
    arrives there when its first token is out plus its KV cache's transfer (`_transfer_ms`), holding its prompt and
    first token (cached: no prefill) and wanting OSL - 1 more tokens; requests of one output token are done at the
    prefill. Sets parts[j] of every decode route j; returns, per decode route, for each of its requests (sorted by
    arrival) the prefill route and the position there it came from."""
    handed = {}
    decode_routes = [j for j, r in enumerate(pool.runs) if r.setup.stage == "decode"]
    for j in decode_routes:
        parts[j] = Requests(np.zeros(0), np.zeros(0), np.zeros(0))
        handed[j] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    bucket = lambda i: (pool.owners[i], pool.runs[i].route.bucket_isl, pool.runs[i].route.bucket_osl)  # noqa: E731
    for key in dict.fromkeys(bucket(j) for j in decode_routes):
        targets = [j for j in decode_routes if bucket(j) == key]
        sources = [i for i in staged if bucket(i) == key]
        weights = np.array([pool.runs[j].route.rps for j in targets], dtype=float)
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(targets), 1.0 / len(targets))
        arrivals, isls, osls, origin, position = [], [], [], [], []
        for i in sources:
            part, prefilled = parts[i], staged[i]
            going = np.flatnonzero(~prefilled.rejected & ~np.isnan(prefilled.first_token_s) & (part.osl > 1))
            choice = rng.choice(len(targets), size=len(going), p=weights)
            for t, j in enumerate(targets):
                picked = going[choice == t]
                transfer = _transfer_ms(pool.runs[i].setup, pool.runs[j].setup, part.isl[picked])
                arrivals.append((t, prefilled.first_token_s[picked] + transfer / 1e3))
                isls.append(part.isl[picked] + 1)
                osls.append(part.osl[picked] - 1)
                origin.append(np.full(len(picked), i, dtype=np.int64))
                position.append(picked)
        for t, j in enumerate(targets):
            at = [k for k, (target, _) in enumerate(arrivals) if target == t]
            arrival = np.concatenate([arrivals[k][1] for k in at]) if at else np.zeros(0)
            order = np.argsort(arrival, kind="stable")
            isl = np.concatenate([isls[k] for k in at])[order] if at else np.zeros(0)
            parts[j] = Requests(arrival[order], isl, np.concatenate([osls[k] for k in at])[order] if at else np.zeros(0), isl)
            handed[j] = (np.concatenate([origin[k] for k in at])[order] if at else np.zeros(0, dtype=np.int64),
                         np.concatenate([position[k] for k in at])[order] if at else np.zeros(0, dtype=np.int64))  # fmt: skip
    return handed


def _join_stages(parts, staged, handed) -> None:
    """Each prefill route's requests as the user sees them: admitted at the prefill pool; the first token when the
    prefill's token has crossed to the decode pool (one output token: when the prefill made it); done when the
    decode pool made the last; refused if either pool refused it. Requests the decode pools never took are left
    unfinished (no finish time)."""
    for i, prefilled in staged.items():
        part = parts[i]
        part.admitted_s = prefilled.admitted_s.copy()
        part.rejected = prefilled.rejected.copy()
        single = part.osl <= 1
        part.first_token_s = np.where(single, prefilled.first_token_s, np.nan)
        part.finish_s = np.where(single, prefilled.finish_s, np.nan)
    for j, (origin, position) in handed.items():
        decoded = parts[j]
        for i in np.unique(origin).tolist():
            mine = origin == i
            part, at = parts[i], position[mine]
            part.first_token_s[at] = decoded.arrival_s[mine]
            part.finish_s[at] = decoded.finish_s[mine]
            part.rejected[at] |= decoded.rejected[mine]
