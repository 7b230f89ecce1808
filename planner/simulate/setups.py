"""How the simulator runs one configuration's instances (`engine_setup`): the engines' step times, batch cap, KV
cache and count, for modeled engines (the calibrated roofline), measured or interpolated points (the roofline's
steps scaled to the point), models without an architecture (`steps.PointSteps`), disaggregated prefill and decode
pools and speculative engines (planner/simulate/verify.py says how each is chosen)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.perf.point_engine import fit_point_steps, pinned_release, point_batch
from planner.perf.serving import ADMISSION_TEXT, ENGINE_NAMES, instance_batch, instance_budget, kv_admission
from planner.perf.types import Layout
from planner.simulate.steps import RooflineSteps, saturated_rps

TP_CHOICES = (1, 2, 4, 8, 16, 32, 64, 72)


@dataclass(frozen=True)
class EngineSetup:
    """How one route's instances are simulated."""

    steps: object
    max_batch: int
    kv_tokens: float | None
    count: int
    description: str
    request_overhead_ms: float = 0.0  # the performance model's per-request overhead t0, added to TTFT and E2E
    stage: str = "aggregated"  # aggregated | prefill | decode (a disaggregated pool: `_hand_over`)
    token_budget: int | None = None  # None: the run's (a prefill pool's steps hold whole prompts; DP ranks: x DP)
    speculation: object | None = None  # planner.perf.roofline.Speculation of a speculative engine
    network_bytes_per_s: float = 0.0  # an instance's share of its node's scale-out NICs (KV transfers)
    kv_admission: str = "paged"  # how the engine admits into its KV cache (planner/perf/serving.py)


# ----------------------------------------------------------------------------------------------- engines
def _pinned(route) -> str | None:
    """The release the route's figures are for, where it names one (a row's 'not stated' is the class's current)."""
    return pinned_release(route.engine, getattr(route, "engine_version", ""))  # plans saved before versions have none


def instances_per_node(route, gpus_per_node: int) -> int:
    return gpus_per_node // route.tp if route.tp else 1  # rows of a whole system: one instance per node


def _layout(route) -> Layout:
    """The route's engine layout (attention DP, EP, PP beside TP), TP alone where the plan states none."""
    if route.layout and any(part in route.layout for part in ("DP", "EP", "PP")):
        return Layout.parse(route.layout)
    return Layout(route.tp or 1)


def _engine_shape(route, catalog):
    """(tp, precision, memory fit) of the engine: the route's own, or for rows measured on a whole node the smallest
    TP (bf16 first, then fp8) at which the model fits with a KV cache."""
    from planner.perf.roofline import supports_roofline
    from planner.perf.tables import instance_memory

    system = catalog.systems[route.system]
    gpu = catalog.gpus[system.gpu]
    if not supports_roofline(catalog.models[route.model]):
        return None
    layout = _layout(route)
    if layout.beyond_tp:  # attention DP / EP / pipeline stages: the plan's own engine
        memory = instance_memory(catalog, route.model, system.gpu, layout.tp, route.precision, route.engine_isl,
                                 route.engine_osl, layout.dp, layout.ep, layout.pp)  # fmt: skip
        return (layout.tp, route.precision, memory) if memory.fits else None
    precisions = [route.precision] if route.precision else [p for p in ("bf16", "fp8") if p in gpu.precisions]
    tps = [route.tp] if route.tp else [t for t in TP_CHOICES if t <= system.gpus_per_node and system.gpus_per_node % t == 0]
    for precision in precisions:
        for tp in tps:
            memory = instance_memory(catalog, route.model, system.gpu, tp, precision, route.engine_isl, route.engine_osl)
            if memory.fits and (memory.max_concurrency_by_memory or 0) >= 1:
                return tp, precision, memory
    return None


def _model_step(route, assignment, catalog, layout: Layout, precision: str, token_budget: int, speculation,
                hop_bytes_per_s: float, prefix_cache, open_loop: bool):  # fmt: skip
    """(factors, what measured rows set) of the engine as the plan sized it where the roofline priced its point for
    requests arriving at random (modeled, or interpolated between rows): the step and per-request overhead its rows
    give at the point's rate (planner/perf/modeled_engine.py), the model's own; None for a measured point, which
    the roofline's steps are scaled to instead."""
    from planner.perf import PerfQuery, is_modeled, step_efficiency

    if not (is_modeled(assignment.provenance) or (open_loop and assignment.provenance == "interpolated")):
        return None
    system = catalog.systems[route.system]
    query = PerfQuery(route.model, system.gpu, route.bucket_isl, route.bucket_osl, layout.tp, precision,
                      token_budget=token_budget, arrivals="poisson", rate_rps=route.rps_per_instance or None,
                      engine=route.engine, engine_version=_pinned(route), prefix_cache=prefix_cache)  # fmt: skip
    found = step_efficiency(query, catalog, layout.tp, precision, (route.engine_isl, route.engine_osl), layout,
                            speculation, hop_bytes_per_s)  # fmt: skip
    if isinstance(found, str):  # the plan's own engine: the roofline models it (unanchored, as without rows)
        from planner.perf.engines import engine_efficiency

        return engine_efficiency(catalog, route.model, system.gpu, route.engine, _pinned(route)), ""
    return found


def engine_setup(route, assignment, instances: int, share: float, catalog, token_budget: int = 8192,
                 shared_with: str = "", speculation=None, prefix_cache=None, open_loop: bool = True) -> EngineSetup | str:  # fmt: skip
    """The engines that serve `route` (module docstring), or why it cannot be simulated. `shared_with`: the other
    workloads whose requests the engines also take (said in the description: "3 x TP2 fp4 engines shared with code").
    `speculation`: the scenario's (planner.perf.roofline.Speculation), used where the route is speculative.
    `prefix_cache` (planner.perf.types.PrefixCache): the workload's, as the plan priced it; `open_loop`: the plan
    sized engines for requests arriving at random (its sizing), so an interpolated point is the model's."""
    from planner.perf import engine_shape
    from planner.perf.disagg import PREFILL_TOKEN_BUDGET
    from planner.perf.engines import engine_efficiency

    if route.speculative and speculation is None:
        return "the route is speculative but the scenario states no engine.speculative to simulate it with"
    speculation = speculation if route.speculative else None
    system = catalog.systems[route.system]
    found = _engine_shape(route, catalog)
    if found is None:
        return _point_setup(route, assignment, instances, share, catalog, token_budget, shared_with)
    tp, precision, memory = found
    gpu = catalog.gpus[system.gpu]
    layout = _layout(route)
    hop = 0.0
    if layout.beyond_tp:
        # one engine whose ranks step in lockstep (the all-to-all of every MoE layer waits for all of them), its
        # batch spread evenly over the attention-DP ranks and its experts evenly loaded: the performance model's own
        # step (perf.engine_shape, with the pipeline's hop over the node's network)
        hop = (system.network_bytes_per_s(layout.tp * layout.dp) or 0.0) if layout.pp > 1 else 0.0
        shape = engine_shape(catalog, catalog.models[route.model], gpu, layout, precision, speculation, hop)
    else:
        shape = engine_shape(catalog, catalog.models[route.model], gpu, Layout(tp), precision, speculation)
    modeled = None if route.stage in ("prefill", "decode") else _model_step(
        route, assignment, catalog, layout if layout.beyond_tp else Layout(tp), precision, token_budget, speculation,
        hop, prefix_cache, open_loop)  # fmt: skip
    efficiency, anchored = modeled or (engine_efficiency(catalog, route.model, gpu.id, route.engine, _pinned(route)), "")
    base = RooflineSteps(shape, efficiency)
    overhead = efficiency.ttft_overhead_ms
    admission = kv_admission(route.engine)
    if route.stage in ("prefill", "decode"):  # a disaggregated pool's engines (perf/disagg.py)
        prefill = route.stage == "prefill"
        kv_batch = memory.running_limit(route.bucket_isl, route.bucket_osl, route.engine) or 1
        batch = (route.max_batch if prefill else min(instance_batch(route.max_batch, layout.dp), kv_batch)) if route.max_batch \
            else (1 if prefill else kv_batch)
        budget = max(PREFILL_TOKEN_BUDGET, route.engine_isl) if prefill else None
        count = max(1, round(instances * share))
        label = layout.label if layout.beyond_tp else f"TP{tp}"
        shared = f" shared with {shared_with}" if shared_with else ""
        what = (f"<= {batch} prompt{'s' if batch != 1 else ''} per step, budget {budget} tokens" if prefill
                else f"batch <= {batch}, KV caches arriving from the prefill pool")  # fmt: skip
        return EngineSetup(
            base, batch, memory.kv_token_capacity or None, count,
            f"{count} x {label} {precision} {route.stage} engine{'s' if count != 1 else ''}{shared}, roofline steps, {what}"
            + (f"; {speculation.describe()}" if speculation else ""),
            overhead if prefill else 0.0, route.stage, budget or instance_budget(token_budget, layout.dp), speculation,
            system.network_bytes_per_s(layout.gpus) or 0.0, admission,
        )  # fmt: skip
    kv_tokens = memory.kv_token_capacity or (memory.max_concurrency_by_memory * (route.engine_isl + route.engine_osl))
    kv_batch = memory.running_limit(route.bucket_isl, route.bucket_osl, route.engine) or 1
    budget = instance_budget(token_budget, layout.dp)  # the per-rank budget of every attention-DP rank
    per_node = system.gpus_per_node // tp if route.tp is None else 1  # engines per plan instance
    count = max(1, round(instances * per_node * share))
    label = layout.label if layout.beyond_tp else f"TP{tp}"
    engine = f"{label} {precision} engine" + (f"s shared with {shared_with}" if shared_with else "")
    if layout.beyond_tp:
        engine += " (ranks in lockstep, experts evenly loaded)" if layout.dp > 1 or layout.ep > 1 else " (stages in lockstep)"
    if speculation is not None:
        engine += f"; {speculation.describe()}"
    if modeled is not None:
        # the plan's cap is per attention-DP rank (planner/perf/serving.py)
        batch = instance_batch(route.max_batch, layout.dp) if route.max_batch else kv_batch
        return EngineSetup(base, batch, kv_tokens, count,
                           f"{count} x {engine}, roofline steps, batch <= {batch}, budget {budget} tokens, "
                           f"{ENGINE_NAMES.get(route.engine, route.engine)} {ADMISSION_TEXT[admission]}"
                           + (f"; {anchored}" if anchored else ""),
                           overhead, token_budget=budget, speculation=speculation, kv_admission=admission)  # fmt: skip
    rps = _rps_per_engine(route, system, per_node)
    isl, osl = route.bucket_isl, route.bucket_osl
    batch, how = _point_batch(assignment, rps, osl, per_node)
    if batch is None:
        batch, how = _batch_reaching(base, rps, isl, osl, kv_batch), "the roofline's batch at that rate"
    batch = max(1, min(batch, kv_batch))
    scale = saturated_rps(base, batch, isl, osl) / rps
    return EngineSetup(base.scaled(scale), batch, kv_tokens, count, (
        f"{count} x {engine}, roofline steps x{scale:.3g} to deliver the {assignment.provenance} "
        f"{rps:.4g} rps per engine at batch {batch} ({how}), budget {budget} tokens"), overhead,
        token_budget=budget, speculation=speculation, kv_admission=admission)  # fmt: skip


def _rps_per_engine(route, system, engines_per_instance: int) -> float:
    if route.tp is None:
        return route.rps_per_node / engines_per_instance
    return route.rps_per_instance or route.rps_per_node / instances_per_node(route, system.gpus_per_node)


def _point_batch(assignment, rps: float, osl: int, engines_per_instance: int) -> tuple[int | None, str]:
    """The concurrency of a measured point: its own, or Little's law over its decode time (OSL x TPOT, a request's
    mean gap between tokens: what keeps the engine's seats full; the point's TTFT includes the benchmark's queueing).
    A point with only a token-gap ITL uses it as the mean gap."""
    if assignment.concurrency:
        return math.ceil(assignment.concurrency / engines_per_instance), "the point's concurrency"
    tpot = getattr(assignment, "tpot_ms", None)  # plans saved before metrics version 2 have no tpot_ms
    batch = point_batch(None, tpot, assignment.itl_ms, rps, osl)
    return batch, f"Little's law over OSL x {'TPOT' if tpot is not None else 'ITL'} at the point" if batch else ""


def _point_setup(route, assignment, instances: int, share: float, catalog, token_budget: int,
                 shared_with: str = "") -> EngineSetup | str:  # fmt: skip
    """A model without an architecture, from its measured point (planner/perf/point_engine.py): one engine per plan
    instance, its steps fitted to the point's closed-loop rate (the plan's rate where the plan sized the point as
    the course does; the row's where it sized the point's engine for random arrivals)."""
    from planner.perf import is_modeled

    model = catalog.models[route.model]
    system = catalog.systems[route.system]
    if is_modeled(assignment.provenance) or not model.params_b:
        return f"{route.model} has no architecture (layers, heads) for step times and no measured point to scale"
    fitted_to = getattr(assignment, "point_rps_per_instance", None)
    rps = fitted_to or _rps_per_engine(route, system, 1)
    batch, how = _point_batch(assignment, rps, route.bucket_osl, 1)
    if batch is None:
        return f"the {assignment.provenance} point of {route.model} records neither TPOT/ITL nor concurrency: no step times"
    gpus = route.tp or system.gpus_per_node
    steps = fit_point_steps(catalog, route.model, system.gpu, route.engine, _pinned(route), gpus,
                            route.precision or "bf16", batch, rps, route.bucket_isl, route.bucket_osl)  # fmt: skip
    count = max(1, round(instances * share))
    shared = f"s shared with {shared_with}" if shared_with else ""
    return EngineSetup(steps, batch, None, count, (
        f"{count} x {gpus}-GPU engine{shared} from the {assignment.provenance} point ({route.model} has no architecture): "
        f"prefill {steps.prefill_per_token_ms * 1e3:.3g} us/token from 2 x {model.params_b:g} B params at the GPUs' "
        f"calibrated GEMM rate, decode step {steps.decode_step_ms:.3g} ms at any batch, so that batch {batch} ({how}) "
        f"delivers {rps:.4g} rps; KV cache not limited; budget {token_budget} tokens"))


def _batch_reaching(steps, rps: float, isl: int, osl: int, cap: int) -> int:
    """Smallest batch at which an engine kept full reaches `rps` (saturated throughput grows with the batch)."""
    low, high = 1, max(1, cap)
    if saturated_rps(steps, high, isl, osl) < rps:
        return high
    while low < high:
        middle = (low + high) // 2
        if saturated_rps(steps, middle, isl, osl) >= rps:
            high = middle
        else:
            low = middle + 1
    return low
