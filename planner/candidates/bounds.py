"""Engine curves never priced: those whose every candidate a candidate already made dominates, judged with an upper
bound of the curve's rates (docs/optimizer.md, "Curves dominated before pricing").

Every point of an open-loop curve sits at a rate of its ladder (planner/perf/modeled_engine.open_loop_rates: the
closed loop's throughputs below the KV capacity, as measured rows scale them, and fractions of the highest), so the
ladder's top, the curve's *ceiling*, bounds the rate of every candidate the curve gives. It costs the closed loop
over the concurrency ladder, a small part of pricing the curve's open loop.

The enumeration then runs twice (planner/candidates/__init__.py). First on the *leading* curves alone: for every
bucket, offer and engine, the LEADERS curves of the highest ceiling per GPU, and every curve without a ceiling;
their candidates are made as in the plan. Then a curve is left unpriced where every candidate c it could give is
dominated by one of those, c', by the enumeration's own rule (CandidateBuilder.drop_dominated) with the ceilings in
place of c's rates, which they bound, among the candidates of the same serving engine (a what-if that drops an
engine, `--engines`, then finds every curve it needs already priced): c' serves every bucket c could serve (each
bucket of a workload of the model on the offer, under the engine, within c's engine lengths) and m = ceil(max over
them of ceiling x k[c] / rho[c']) units of c' take no more GPUs than one unit of c (one configuration per node all
year: m = 1 on the same offer). The optimum is unchanged (c's units replaced by m units of c' each; dominance is
transitive), and a leading curve is never left unpriced, so each c' is made again in the plan's enumeration. The
plan counts a left curve's candidates dominated (or memory where its engine does not fit) and gives no reason line
for them.

A curve not left by its ceiling may have a *floor* (`curve_floors`): the highest rate such that, were the curve to
serve no rate above it, every candidate of it would be dominated by the same rule. The curve is then settled
(CandidateBuilder.settle_floor) on the piece of its ladder at the floor (planner/perf/engine_curve.py,
`_floor_piece`): left unpriced where that piece shows that its asks use no point above the floor, else priced with
that piece solved once. The verdict is the whole curve's (`PricedCurve.used_above`) whichever decides it.

No ceiling (the curve is priced): a closed-loop sizing (perf.sizing: closed-loop), an engine with measured rows
(their points stand beside the model's), a plain layout where aiconfigurator's tables may answer instead
(--perf-source auto with aic), an engine the roofline cannot model (its curve is a reason, at no cost).
"""

from __future__ import annotations

import math
import multiprocessing
from collections import defaultdict

from planner.candidates.curves import CurveAsk
from planner.candidates.offers import unit_shape
from planner.candidates.types import unit_rate
from planner.perf.modeled_engine import modeled_engine, open_loop_rates
from planner.perf.types import Layout
from planner.workers import can_fork, executor, worker_count

LEADERS = 2  # curves per bucket, offer and engine priced first, of the highest ceiling per GPU
CEILING_FORK_MIN = 64  # from this many ceilings to solve on, half are solved on a forked worker (`_ceilings`)
_FORKED = None  # (builder context, keys) the forked worker solves ceilings of (inherited by fork, never pickled)
BOUND_SLACK = 1e-9  # a ceiling is raised by this share: a candidate's rate is its point's, rounded on the way


def curve_ceiling(context: tuple, key: tuple) -> float | None:
    """The highest rate (requests/s per instance) of any point of the curve of memo `key`, or None where there is
    no such bound (module docstring); `context` is the builder's (catalog, aic answers, rows anchor)."""
    catalog, aic, anchored = context
    shape, layout, precision, _, speculation, hop_bytes_per_s = key
    if not shape.open_loop:
        return None
    if aic and layout == Layout(layout.tp) and speculation is None and shape.prefix_cache is None:
        return None
    engine = modeled_engine(shape, catalog, layout.tp, precision, None, anchored, layout, speculation, hop_bytes_per_s)
    if isinstance(engine, str) or engine.measured:
        return None
    return max(open_loop_rates(shape, engine)) * (1 + BOUND_SLACK)


def curve_ceilings(builder, keys) -> dict[tuple, float | None]:
    """`curve_ceiling` of every memo key in `keys`, kept with the catalog for this process's other enumerations (a
    plan's fp4 and cold-prefix re-plans) and between runs in the builder's curve cache."""
    store = builder.store
    known = builder.catalog.derived.setdefault(("curve ceilings", *builder.context[1:]), {})
    missing = []
    for key in dict.fromkeys(keys):
        if key not in known:
            found, value = store.get_ceiling(key) if store is not None else (False, None)
            if found:
                known[key] = value
            else:
                missing.append(key)
    for key, value in zip(missing, _ceilings(builder.context, missing)):
        if store is not None:
            store.put_ceiling(key, value)
        known[key] = value
    return {key: known[key] for key in keys}


def _forked_ceilings(indices: list[int]) -> tuple[list, dict]:
    """On the forked worker: the ceilings of the inherited keys at `indices`, and the rate-free arrays (the ladders)
    solved for them, for the parent to keep (the pricing workers it forks next then find them)."""
    from planner.perf.open_loop_laws import rate_free_keys, rate_free_since

    context, keys = _FORKED
    before = rate_free_keys()
    return [curve_ceiling(context, keys[i]) for i in indices], rate_free_since(before)


def _ceilings(context: tuple, keys: list[tuple]) -> list[float | None]:
    """`curve_ceiling` of each key. From CEILING_FORK_MIN keys on, every other one on one forked worker while this
    process solves the rest (a ceiling is a closed loop over the concurrency ladder: 2-3 ms, 360 of them in the
    AMD what-if case, on one core before pricing starts); the ladders it solved are kept here as if solved here, so
    every figure is the same whichever process solved it. Here alone with one process (PLANNER_WORKERS=1), on Ray,
    or where no process can be forked."""
    global _FORKED
    if len(keys) < CEILING_FORK_MIN or worker_count() < 2 or executor() == "ray" or not can_fork():
        return [curve_ceiling(context, key) for key in keys]
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from planner.perf.open_loop_laws import keep_rate_free

    theirs = list(range(1, len(keys), 2))
    out: list[float | None] = [None] * len(keys)
    _FORKED = (context, keys)
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
            handed = pool.submit(_forked_ceilings, theirs)
            for i in range(0, len(keys), 2):
                out[i] = curve_ceiling(context, keys[i])
            values, ladders = handed.result()
        keep_rate_free(ladders)
    except (BrokenProcessPool, OSError):  # the worker killed (memory), or no process to start: solved here
        values = [curve_ceiling(context, keys[i]) for i in theirs]
    finally:
        _FORKED = None
    for i, value in zip(theirs, values):
        out[i] = value
    return out


def _unit(builder, ask: CurveAsk) -> tuple[int, int]:
    """(GPUs, instances) of one allotment unit of the ask's engine on its offer (candidates.offers.unit_shape)."""
    layout = ask.key[1]
    return unit_shape(layout.gpus, builder.catalog.systems[ask.offer.system].gpus_per_node,
                      builder.scenario.share_nodes_across_models)  # fmt: skip


def _lengths(builder, ask: CurveAsk) -> list[tuple[int, int]]:
    """The engine lengths of the ask's model that cover its bucket and fit the offer's GPU (a candidate each)."""
    shape, layout, precision = ask.key[:3]
    need_isl, need_osl = ask.bucket.engine_lengths
    return [e for e in builder.engines[ask.workload.model] if e[0] >= need_isl and e[1] >= need_osl
            and builder.fit(ask.workload.model, shape.gpu, layout, precision, e).fits]  # fmt: skip


def leading_curves(builder, asks: list[CurveAsk], ceilings: dict) -> set[tuple]:
    """The curves the first enumeration prices: per bucket, offer and engine, the LEADERS of the highest ceiling per
    GPU among those an engine of which fits, and every curve without a ceiling."""
    ranked: dict[tuple, list] = defaultdict(list)
    leading = {ask.key for ask in asks if ceilings[ask.key] is None}
    for ask in asks:
        if ceilings[ask.key] is None or not _lengths(builder, ask):
            continue
        gpus, instances = _unit(builder, ask)
        cell = (ask.workload.name, ask.bucket_index, ask.offer, ask.label)
        ranked[cell].append((-ceilings[ask.key] * instances / gpus, repr(ask.key[1:3]), ask.key))
    for options in ranked.values():
        leading.update(key for _, _, key in sorted(options, key=lambda o: o[:2])[:LEADERS])
    return leading


def unpriced_curves(first, asks: list[CurveAsk], ceilings: dict, leading: set[tuple]) -> set[tuple]:
    """The curves (not leading) whose every candidate a candidate of the first enumeration `first` (a builder run on
    the leading curves, before dominated candidates are dropped) dominates by the ceilings (module docstring)."""
    rule = Dominance(first, asks, ceilings)
    return {key for key in rule.keys if key not in leading and rule.dominated(key)}


def curve_floors(first, asks: list[CurveAsk], ceilings: dict, priced: set[tuple]) -> dict[tuple, float]:
    """Per curve of `priced` (neither leading nor left unpriced, with a ceiling), its *floor* where it has one: the
    highest rate (requests/s per instance) such that, were the curve to serve no rate above it, a candidate of the
    first enumeration would dominate every candidate of it, its ceiling lowered to that rate (the other curves'
    kept: the rule is `Dominance`'s, and a lower ceiling only makes more candidates dominated). The ceiling x
    (1 + BOUND_SLACK) is lowered to floor x (1 + BOUND_SLACK): every rate a candidate takes from a point at or
    below the floor is within it."""
    rule = Dominance(first, asks, ceilings)
    floors = {}
    for key in sorted(priced, key=repr):
        if ceilings.get(key) is None or not rule.dominated(key, 0.0):
            continue
        values = sorted(set(rule.breakpoints(key)))
        low, high = -1, len(values)  # values[low] (0.0 at -1) keeps every candidate dominated, values[high] does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if rule.dominated(key, values[middle]) else (low, middle)
        floors[key] = (values[low] if low >= 0 else 0.0) / (1 + BOUND_SLACK)
    return floors


class Dominance:
    """The enumeration's rule (CandidateBuilder.drop_dominated) on curves not priced, with their ceilings in place of
    their candidates' rates (module docstring): per curve, whether a candidate of the first enumeration `first`
    dominates every candidate the curve could give."""

    def __init__(self, first, asks: list[CurveAsk], ceilings: dict):
        self.first, self.ceilings = first, ceilings
        scenario = first.scenario
        self.per_node = not (scenario.share_nodes_across_models or scenario.reconfigure_between_periods)
        self.served: dict[str, dict] = defaultdict(dict)
        for (workload, bucket, key), option in first.options.items():
            self.served[key][(workload, bucket)] = unit_rate(option, first.candidates[key])
        self.rivals: dict[tuple, list[str]] = defaultdict(list)
        for key, c in first.candidates.items():
            if c.stage == "aggregated":
                self.rivals[(c.site, c.pricing, c.system, c.model, c.engine)].append(key)
        # the asks of one candidate family (an engine on an offer, whatever its lengths): their buckets and ceilings
        self.families: dict[tuple, list[CurveAsk]] = defaultdict(list)
        self.asks: dict[tuple, list[CurveAsk]] = defaultdict(list)
        for ask in asks:
            self.families[_family(ask)].append(ask)
            self.asks[ask.key].append(ask)
        self.keys = list(self.asks)

    def dominated(self, key: tuple, ceiling: float | None = None) -> bool:
        """Whether every candidate of the curve of `key` is dominated, its ceiling `ceiling` where one is given (not
        for a curve no ask reads)."""
        asks = self.asks.get(key)
        return bool(asks) and all(self._dominated(ask, lengths, key, ceiling) for ask in asks
                                  for lengths in _lengths(self.first, ask))  # fmt: skip

    def _cells(self, ask: CurveAsk, lengths: tuple[int, int], key: tuple, ceiling: float | None) -> dict | None:
        """The rate bound of each (workload, bucket) a candidate of the ask at `lengths` serves, per allotment unit;
        None where a curve it reads has no ceiling."""
        factor = _unit(self.first, ask)[1] * ask.offer.capacity_factor
        cells = {}
        for other in self.families[_family(ask)]:
            isl, osl = other.bucket.engine_lengths
            if isl <= lengths[0] and osl <= lengths[1]:
                bound = ceiling if other.key == key and ceiling is not None else self.ceilings[other.key]
                if bound is None:
                    return None
                cell = (other.workload.name, other.bucket_index)
                cells[cell] = max(cells.get(cell, 0.0), bound * factor)
        return cells

    def _rivals(self, ask: CurveAsk):
        """(served rates, allowed units) of each candidate of the first enumeration that may dominate the ask's: its
        rates per (workload, bucket), and how many of its units may stand for one of the ask's (m)."""
        gpus = _unit(self.first, ask)[0]
        offer = ask.offer
        for rival in self.rivals[(offer.site, offer.pricing, offer.system, ask.workload.model, ask.key[0].engine)]:
            yield self.served[rival], 1 if self.per_node else gpus // self.first.candidates[rival].gpus_per_unit

    def _dominated(self, ask: CurveAsk, lengths: tuple[int, int], key: tuple, ceiling: float | None) -> bool:
        cells = self._cells(ask, lengths, key, ceiling)
        if not cells:
            return False
        for rates, allowed in self._rivals(ask):
            if rates.keys() >= cells.keys():
                m = max(1, math.ceil(max(rate / rates[cell] for cell, rate in cells.items()) - 1e-9))
                if m <= allowed:
                    return True
        return False

    def breakpoints(self, key: tuple) -> list[float]:
        """The ceilings of the curve of `key` at which a rival's units needed (m) for a candidate of it step: a
        rival's rate in a (workload, bucket) the curve feeds x the units allowed / the candidate's units."""
        out = []
        for ask in self.asks.get(key, ()):
            factor = _unit(self.first, ask)[1] * ask.offer.capacity_factor
            cells = {(other.workload.name, other.bucket_index) for other in self.families[_family(ask)] if other.key == key}
            for rates, allowed in self._rivals(ask):
                out += [allowed * rates[cell] / factor for cell in cells & rates.keys() if allowed >= 1]
        return out


def _family(ask: CurveAsk) -> tuple:
    """What makes the asks' candidates one engine on one offer (candidates.offers.candidate_key, less the lengths
    and the batch cap)."""
    shape, layout, precision, _, speculation, hop_bytes_per_s = ask.key
    return (ask.offer, ask.workload.model, layout, precision, speculation is not None, hop_bytes_per_s, shape.engine,
            shape.engine_version)  # fmt: skip
