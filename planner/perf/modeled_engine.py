"""One modeled engine as the roofline prices it, and its open-loop points: the step a plan sizes it on, shared with
the simulator.

`modeled_engine` gathers what a curve of one engine needs (its shape, calibrated factors, memory fit, KV capacity
and the measured rows that anchor it) or says why the roofline cannot model it. `open_loop_points` solves the
engine under requests arriving at random (planner/perf/open_loop.py) at a ladder of rates.

Where measured rows anchor the engine (planner/perf/anchor.py), an open-loop point runs the engine's step as the
rows scale it. At a running batch n the rows put factors f(n) = (a, b) on the model's mean TTFT and TPOT (each the
most it takes at any batch up to n: a latency never falls as the rate rises; `ModeledEngine.rows_factors`). A
request's decode gaps are whole steps (its own token and the others' prompt chunks), so the rows' TPOT factor b
scales the whole step (`Efficiency.step_scale`: throughput x 1/b, every gap x b); what the rows add to TTFT beyond
that is time outside the engine's steps (tokenizing, scheduling, the server), a per-request overhead:

    t0' = max(0, t0 + (a / b - 1) x (TTFT - slot wait)),   TTFT the scaled engine's mean at the rate

(the same TTFT x a the closed loop's means take, where a >= b or t0 covers the difference; never below the engine's
own steps). The batch the scaled engine runs at the rate and the factors at that batch are found together:

    n_0 = the unscaled engine's mean running batch at the rate,   (a_k, b_k) = f(n_k),
    n_k+1 = the mean running batch of the engine whose step is scaled by b_k, at the rate

until the factors settle (they move slowly with the batch); where the factors at n_k slow the engine past the rate
(rows of a KV-bound engine at a large batch), the next round starts from n_k / 2. The simulator, handed the same factors
(`step_efficiency`), runs the step and the overhead the plan sized the engine on. A closed-loop point (a
benchmark's view, planner/perf/layers.py) takes the factors on its means instead, exact at the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.catalog import Catalog
from planner.perf.anchor import AnchorSet, anchor_rows, build_anchors
from planner.perf.engines import DEFAULT_ENGINE, calibrated
from planner.perf.roofline import EngineShape, Speculation, concurrency_ladder, kv_bytes_for, steady_state_curve, supports_roofline
from planner.perf.shapes import tensor_split_refusal
from planner.perf.step import Efficiency
from planner.perf.tables import instance_memory, running_capacity
from planner.perf.types import Layout, MemoryFit, PerfQuery

# the rates an open-loop curve adds to the closed loop's throughputs: shares of the engine's highest (a plan
# sizes an instance at the highest rate that meets its limits; these make that rate fine near saturation)
OPEN_LOOP_LOADS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.91, 0.94, 0.97)
ANCHOR_ROUNDS = 12  # rounds of the batch-and-factors fixed point at most
ANCHOR_TOLERANCE = 1e-6  # ... until both factors move less than this (relative)
# running batches the factors' envelope is on: the rounded geometric grid without its repeats (rising, so a repeat
# is its neighbour's: np.unique's answer without its import of numpy.ma, 30-60 ms of every start)
_ROUNDED = np.round(np.geomspace(1.0, 65536.0, 160))
ENVELOPE_BATCHES = _ROUNDED[np.concatenate(([True], _ROUNDED[1:] != _ROUNDED[:-1]))]


def engine_shape(catalog: Catalog, model, gpu, layout: Layout, precision: str, speculation: Speculation | None = None,
                 hop_bytes_per_s: float = 0.0) -> EngineShape:  # fmt: skip
    """The roofline's engine for a layout; stages of a pipeline talk over the scale-out network of their node
    (`hop_bytes_per_s`, 0 where none is known: the hop then costs its latency only)."""
    return EngineShape(model, gpu, layout.tp, precision, kv_bytes_for(precision), layout.dp, layout.ep, layout.pp,
                       hop_bytes_per_s, speculation)  # fmt: skip


def engine_anchors(catalog: Catalog, shape: EngineShape, eff: Efficiency, engine: str = DEFAULT_ENGINE) -> AnchorSet | None:
    """The measured rows' anchors of one engine (kept per catalog), None without rows: rows of the serving
    `engine` only, against the model with that engine's factors `eff`."""
    key = ("anchors", shape.model.id, shape.gpu.id, shape.tp, shape.precision, engine, repr(eff))
    if key not in catalog.derived:
        catalog.derived[key] = build_anchors(
            catalog, shape, eff,
            lambda isl, osl: running_capacity(catalog, shape.model.id, shape.gpu.id, shape.tp, shape.precision, isl, osl),
            engine,
        )  # fmt: skip
    return catalog.derived[key]


@dataclass(frozen=True)
class ModeledEngine:
    """What the roofline prices one engine with."""

    shape: EngineShape
    eff: Efficiency  # the calibrated factors of the GPU generation as the engine reaches them (unscaled)
    engine_cls: object  # planner.perf.engines' class of the engine and release
    memory: MemoryFit
    layout: Layout
    anchors: AnchorSet | None  # measured rows of this engine (None: none, or not used)
    measured: tuple  # the rows themselves
    capacity: int  # sequences its KV cache runs at the query's lengths
    _envelopes: dict = field(default_factory=dict, compare=False, repr=False)  # (isl, osl) -> `rows_factors` grid

    def rows_factors(self, isl: int, osl: int, running: float) -> tuple[float, float]:
        """The rows' (TTFT, TPOT) factors an open-loop engine at a mean running batch `running` steps with: the
        most each takes at any batch up to it (on ENVELOPE_BATCHES and at `running`). The rows' ratio to the model
        can fall as the batch grows (NIM's TTFT from x1.030 at concurrency 50 to x0.985 toward its queue-bound row
        at 100); a latency never falls as the arrival rate rises, so neither does the factor it is scaled by."""
        if (isl, osl) not in self._envelopes:
            grid = self.anchors.factors(self.shape, self.eff, isl, osl, ENVELOPE_BATCHES)
            self._envelopes[(isl, osl)] = tuple(np.maximum.accumulate(grid[m]) for m in ("ttft_ms", "tpot_ms"))
        here = self.anchors.factors(self.shape, self.eff, isl, osl, [running])
        below = int(np.searchsorted(ENVELOPE_BATCHES, running, side="right")) - 1
        return tuple(float(max(here[m][0], envelope[below])) if below >= 0 else float(here[m][0])
                     for m, envelope in zip(("ttft_ms", "tpot_ms"), self._envelopes[(isl, osl)]))  # fmt: skip


def modeled_engine(query: PerfQuery, catalog: Catalog, tp: int, precision: str,
                   engine_lengths: tuple[int, int] | None = None, anchored: bool = True, layout: Layout | None = None,
                   speculation: Speculation | None = None, hop_bytes_per_s: float = 0.0) -> ModeledEngine | str:  # fmt: skip
    """The engine a query asks the roofline for, or why the roofline cannot model it. A layout beyond TP (attention
    DP, expert parallelism, pipeline stages), speculative decoding or another serving engine than the reference is
    not anchored: benchmark rows are of TP engines. Another serving engine than the reference is anchored only on
    rows that state it (`BenchmarkRow.engine`: a user's calibration of it, `planner check`). An engine built for longer sequences
    (`engine_lengths`) must fit one of them; its paged KV cache then runs as many of the query's sequences as their
    tokens fill."""
    layout = layout or Layout(tp)
    if layout != Layout(tp) or speculation is not None:
        anchored = False
    model = catalog.models[query.model]
    if not supports_roofline(model):
        return f"architecture of {query.model} not published: the roofline cannot model it"
    if query.isl is None or query.osl is None:
        return "the roofline needs both ISL and OSL"
    gpu = catalog.gpus[query.gpu]
    if precision not in gpu.precisions:
        return f"{gpu.id} does not support {precision}"
    refusal = tensor_split_refusal(model, layout.tp)
    if refusal is not None:
        return refusal
    found = calibrated(catalog, query.model, query.gpu, query.engine, query.engine_version)
    if isinstance(found, str):
        return found
    eff, engine_cls = found
    engine_isl, engine_osl = engine_lengths or (query.isl, query.osl)
    memory = instance_memory(catalog, query.model, query.gpu, tp, precision, engine_isl, engine_osl,
                             layout.dp, layout.ep, layout.pp)  # fmt: skip
    if not memory.fits:
        return f"{layout.label} {precision}: does not fit: {memory.reason}"
    shape = engine_shape(catalog, model, gpu, layout, precision, speculation, hop_bytes_per_s)
    anchors = engine_anchors(catalog, shape, eff, query.engine) if anchored else None
    measured = tuple(anchor_rows(catalog, shape, query.engine)) if anchored else ()
    capacity = memory.running_limit(query.isl, query.osl, query.engine)
    return ModeledEngine(shape, eff, engine_cls, memory, layout, anchors, measured, capacity)


def little_scale(mean, ttft_factor: float, tpot_factor: float, osl: int) -> float:
    """How much faster (>1) an engine whose latencies the rows scale by (TTFT, TPOT) factors puts requests through
    at the same sequences in flight (Little's law on the corrected means; the wait for a KV slot left out)."""
    decode_tokens = max(osl - 1, 0)
    engine_ttft = mean.ttft_ms - mean.slot_wait_ms
    modeled_ms = engine_ttft + decode_tokens * mean.tpot_ms
    return modeled_ms / (engine_ttft * ttft_factor + decode_tokens * mean.tpot_ms * tpot_factor)


def open_loop_rates(query: PerfQuery, engine: ModeledEngine) -> list[float]:
    """An open-loop curve's ladder of rates, ascending: the closed loop's throughputs below the KV capacity and
    fractions of its highest (as the rows scale them, where rows anchor the engine). An unanchored engine's ladder
    is kept with the open loop's rate-free arrays (open_loop_laws.rate_free, keyed by everything it reads): the
    bound that leaves curves unpriced reads each curve's ladder before the curve is priced, on workers forked after
    it (planner/candidates/bounds.py)."""
    if engine.anchors is not None:
        return _open_loop_rates(query, engine)
    from planner.perf.open_loop_laws import rate_free  # scipy: imported where the model runs

    key = repr(("ladder", query.isl, query.osl, query.prefix_cache, engine.shape, engine.eff, engine.capacity))
    return rate_free(key, lambda: _open_loop_rates(query, engine)).tolist()


def _open_loop_rates(query: PerfQuery, engine: ModeledEngine) -> list[float]:
    shape, eff, capacity = engine.shape, engine.eff, engine.capacity
    closed = steady_state_curve(shape, eff, query.isl, query.osl, concurrency_ladder(capacity), capacity,
                                cache=query.prefix_cache)  # fmt: skip
    rates = np.array([s.request_throughput_rps for s in closed])
    if engine.anchors is not None:
        factors = engine.anchors.factors(shape, eff, query.isl, query.osl, [s.running for s in closed])
        rates = rates * np.array([little_scale(s, a, b, query.osl) for s, a, b in zip(closed, factors["ttft_ms"], factors["tpot_ms"])])
    top = float(rates.max())
    return sorted({float(r) for r in rates} | {top * f for f in OPEN_LOOP_LOADS})


def rate_chunks(rates: list[float]) -> list[list[float]]:
    """A ladder priced in pieces (a reach may stop it): three rates at a time, in ascending rate. Every ladder is
    priced in these pieces, stopped or not: a rate's figures then come from the same arrays to the last bit whether
    its curve was priced whole or up to a reach. Small pieces, because most curves a plan prices stop early (on a
    scenario of MoE and 16,000-token prompts, 166 of 313 within the ladder's lower half); a piece's solve costs about
    3 ms plus 2-6 ms a rate, so pieces of 2-4 priced it in 0.75-0.8x the CPU of the lower half in one piece
    (docs/optimizer.md, 2026-12-05)."""
    return [rates[i : i + 3] for i in range(0, len(rates), 3)]


@dataclass(frozen=True)
class Anchoring:
    """How measured rows set one open-loop point's engine: their factors on TTFT and TPOT at its running batch, and
    the engine's factors with the step and per-request overhead they give (module docstring)."""

    ttft_factor: float
    tpot_factor: float
    running: float
    eff: Efficiency

    def describe(self) -> str:
        return (f"the engine's step x{self.eff.step_scale:.3f} (their TPOT factor at its running batch of "
                f"{self.running:.1f}) and {self.eff.ttft_overhead_ms:.3g} ms per request outside its steps (their TTFT "
                f"factor x{self.ttft_factor:.3f}); the simulator runs the same")


def open_loop_points(query: PerfQuery, engine: ModeledEngine, percentile: float | None,
                     rates: list[float]) -> tuple[list, list, list]:  # fmt: skip
    """Open-loop states of the engine at `rates` (ascending): (states at the percentile, means, the `Anchoring` of
    each, None where no rows anchor it). A rate the engine cannot serve is left out. On a ladder (the query states no
    rate) the ladder ends at the first rate the engine cannot serve or whose batch reaches the KV capacity (beyond,
    sequences wait for memory in bursts the model does not follow, benchmarks/model_vs_sim.py, and a plan does not
    size an engine there): the states are of the rates before it, so fewer states than rates says the ladder ended
    (`engine_curve._priced_curve` prices no more of it)."""
    from planner.perf.open_loop import open_loop_states  # scipy.stats/sparse: imported where the model runs

    shape, eff, capacity = engine.shape, engine.eff, engine.capacity

    def solve(efficiency: Efficiency, at: list[float], level: float | None):
        return open_loop_states(shape, efficiency, query.isl, query.osl, at, capacity, level, query.token_budget,
                                query.prefix_cache)  # fmt: skip

    if engine.anchors is None:
        states, means = solve(eff, rates, percentile)
        anchorings = [None] * len(states)
    else:
        plain = solve(eff, rates, None)[1]
        states, means, anchorings = [], [], []
        for rate, start in zip(rates, plain):
            found = _anchored_at(engine, query, rate, start, percentile, solve)
            state, mean, anchoring = found if found is not None else (start, start, None)
            states.append(state)
            means.append(mean)
            anchorings.append(anchoring)
    served = [math.isfinite(s.e2e_ms) and math.isfinite(means[i].e2e_ms)
              and (query.rate_rps is not None or s.concurrency < capacity) for i, s in enumerate(states)]  # fmt: skip
    kept = (range(served.index(False)) if query.rate_rps is None and not all(served)
            else [i for i, ok in enumerate(served) if ok])  # fmt: skip
    return [states[i] for i in kept], [means[i] for i in kept], [anchorings[i] for i in kept]


def _anchored_at(engine: ModeledEngine, query: PerfQuery, rate: float, start, percentile, solve):
    """(state, mean, Anchoring) of the engine at `rate` as its rows set it (module docstring), from the unscaled
    mean `start`; None where the scaled engine cannot serve the rate."""
    eff = engine.eff
    running = start.running if math.isfinite(start.e2e_ms) else float(engine.capacity)
    factors = None
    for _ in range(ANCHOR_ROUNDS):
        found = engine.rows_factors(query.isl, query.osl, max(running, 1.0))
        settled = factors is not None and all(abs(f / g - 1.0) <= ANCHOR_TOLERANCE for f, g in zip(found, factors))
        factors = found
        if settled:
            break
        mean = solve(eff.anchored(factors[1], eff.ttft_overhead_ms), [rate], None)[1][0]
        if math.isfinite(mean.e2e_ms):
            running = mean.running
        elif running > 1.0:  # the rows' factors at so large a batch slow the engine past the rate: a smaller one
            running, factors = running / 2, None
        else:
            return None
    if factors is None:  # the last round found the engine too slow at the rate: no batch it serves it at
        return None
    ttft_factor, tpot_factor = factors
    scaled = eff.anchored(tpot_factor, eff.ttft_overhead_ms)
    mean = solve(scaled, [rate], None)[1][0]
    if not math.isfinite(mean.e2e_ms):
        return None
    overhead = max(0.0, eff.ttft_overhead_ms + (ttft_factor / tpot_factor - 1.0) * (mean.ttft_ms - mean.slot_wait_ms))
    anchored = eff.anchored(tpot_factor, overhead)
    states, means = solve(anchored, [rate], percentile)
    return states[0], means[0], Anchoring(ttft_factor, tpot_factor, running, anchored)


def step_efficiency(query: PerfQuery, catalog: Catalog, tp: int, precision: str,
                    engine_lengths: tuple[int, int] | None = None, layout: Layout | None = None,
                    speculation: Speculation | None = None, hop_bytes_per_s: float = 0.0,
                    anchored: bool = True) -> tuple[Efficiency, str] | str:  # fmt: skip
    """The engine's factors as a plan sizes it at the query's rate (`query.rate_rps`, requests arriving at random):
    calibrated, with the step and per-request overhead its measured rows give at that rate where rows anchor it
    (module docstring), and what the rows set (empty where nothing); or why the roofline cannot model the engine."""
    engine = modeled_engine(query, catalog, tp, precision, engine_lengths, anchored, layout, speculation, hop_bytes_per_s)
    if isinstance(engine, str):
        return engine
    if engine.anchors is None or not query.rate_rps:
        return engine.eff, ""
    _, _, anchorings = open_loop_points(query, engine, None, [query.rate_rps])
    if not anchorings or anchorings[0] is None:
        return engine.eff, ""
    return anchorings[0].eff, f"{engine.anchors.describe()}: {anchorings[0].describe()}"
