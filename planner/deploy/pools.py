"""The pools of a plan: one engine configuration each (system x model x layout x precision x engine and version x
batch cap x engine lengths x stage x speculation), with its instance count per period and the workloads it serves.
What every target writes one launch file or manifest for."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from planner.errors import PlannerInputError
from planner.perf.types import Layout

_GPUS_ONLY = re.compile(r"(\d+) GPUs?")


@dataclass(frozen=True)
class Pool:
    name: str  # a DNS-1123 label: the file name part and the Kubernetes object name
    system: str
    gpu: str
    gpus_per_node: int
    model: str
    layout: Layout
    layout_label: str
    precision: str | None
    max_batch: int | None  # per attention-DP rank (planner/perf/serving.py); None: a measured row of a whole system
    engine_isl: int
    engine_osl: int
    stage: str  # aggregated | prefill | decode
    speculative: bool
    engine: str
    engine_version: str
    instances_by_period: tuple[tuple[str, int], ...]  # (period, instances), the plan's period order
    workloads: tuple[str, ...]  # the workloads routed to it, scenario order
    sites: tuple[str, ...]

    @property
    def gpus_per_instance(self) -> int:
        return self.layout.gpus

    @property
    def nodes_per_instance(self) -> int:
        """Nodes one instance spans: a pipeline stage per node beyond a node's GPUs."""
        return max(1, math.ceil(self.gpus_per_instance / max(self.gpus_per_node, 1)))

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_instance // self.nodes_per_instance

    @property
    def peak_instances(self) -> int:
        return max((count for _, count in self.instances_by_period), default=0)

    @property
    def max_model_len(self) -> int:
        return self.engine_isl + self.engine_osl


def _layout(label: str, gpus_per_instance: int, tp) -> Layout:
    """The plan's layout label ('TP8', 'DP8 EP8', 'TP8 PP2'); '8 GPUs' (a measured row of a whole system, TP not
    stated) is taken as TP over those GPUs."""
    if not label or _GPUS_ONLY.fullmatch(label.strip()):
        return Layout(tp or gpus_per_instance or 1)
    try:
        return Layout.parse(label)
    except ValueError as error:
        raise PlannerInputError("--plan", "instances.layout", str(error)) from None


def _config(item) -> tuple:
    return (item.system, item.model, item.tp, item.precision, item.max_batch, item.engine_isl, item.engine_osl,
            item.stage, item.layout, item.speculative, item.engine, item.engine_version)  # fmt: skip


def dns_label(text: str, limit: int = 52) -> str:
    """A Kubernetes object name part: lowercase letters, digits and '-', starting and ending alphanumeric."""
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", text.lower())).strip("-")
    return cleaned[:limit].strip("-") or "pool"


def plan_pools(plan, scenario, catalog) -> tuple[Pool, ...]:
    """The plan's pools, in a stable order (model, stage, system, layout, ...), each named once."""
    if not plan.instances:
        raise PlannerInputError("--plan", "instances", "the plan records no engine instances (a plan saved before "
                                "they were): plan the scenario again with `planner plan --json`")  # fmt: skip
    counts: dict[tuple, dict[str, int]] = {}
    first: dict[tuple, object] = {}
    sites: dict[tuple, set[str]] = {}
    for allocation in plan.instances:
        key = _config(allocation)
        first.setdefault(key, allocation)
        sites.setdefault(key, set()).add(allocation.site)
        per_period = counts.setdefault(key, {})
        periods = plan.periods if allocation.period == "all" else (allocation.period,)
        for period in periods:
            per_period[period] = per_period.get(period, 0) + allocation.instances
    order = {w.name: i for i, w in enumerate(scenario.workloads)}
    served: dict[tuple, set[str]] = {}
    for route in plan.routing:
        if route.rps > 0:
            served.setdefault(_config(route), set()).add(route.workload)
    pools, used = [], set()
    stage_order = {"prefill": 0, "decode": 1, "aggregated": 2}
    for key in sorted(first, key=lambda k: (k[1], stage_order.get(k[7], 3), k[0], str(k[8]), str(k[3]), str(k[4]),
                                            k[5], k[6], k[9], k[10], k[11])):  # fmt: skip
        item = first[key]
        system = catalog.systems[item.system]
        layout = _layout(item.layout, item.gpus_per_instance, item.tp)
        parts = [item.model, "" if item.stage == "aggregated" else item.stage, layout.label.replace(" ", ""),
                 item.precision or "", "spec" if item.speculative else "", item.engine]
        base = dns_label("-".join(p for p in parts if p))
        name, n = base, 2
        while name in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name)
        per_period = counts[key]
        pools.append(Pool(
            name=name, system=item.system, gpu=item.gpu, gpus_per_node=system.gpus_per_node, model=item.model,
            layout=layout, layout_label=item.layout or layout.label, precision=item.precision, max_batch=item.max_batch,
            engine_isl=item.engine_isl, engine_osl=item.engine_osl, stage=item.stage, speculative=item.speculative,
            engine=item.engine, engine_version=item.engine_version,
            instances_by_period=tuple((p, per_period.get(p, 0)) for p in plan.periods),
            workloads=tuple(sorted(served.get(key, ()), key=lambda w: order.get(w, len(order)))),
            sites=tuple(sorted(sites[key])),
        ))  # fmt: skip
    return tuple(pools)
