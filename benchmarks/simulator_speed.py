"""Simulator speed: one hour at 100 requests/s (about 360k requests) on one node, and 360k requests on 256 engines.

Case 1: one DGX H100 running Llama 3.1 8B in fp8 as 8 TP1 `ServingEngine`s (roofline steps, token budget 8192,
paged KV), 2000 tokens in / 200 out, power-of-two balancing. Case 2: the same requests at 3,200 rps on 256 engines
(32 nodes) for 112.5 s. Targets: each under 10 s on this project's 2-core machine (the whole `planner simulate`
of case 1 end to end: under 5 s, see docs/simulation.md).
Run:  python benchmarks/simulator_speed.py [--rate 100] [--duration 3600] [--balancer power-of-two]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from planner.catalog import load_catalog
from planner.perf.calibration import efficiency_for
from planner.perf.roofline import EngineShape, kv_bytes_for
from planner.perf.tables import instance_memory
from planner.simulate import (
    Requests,
    RooflineSteps,
    ServingEngine,
    poisson_arrivals,
    run,
    run_statistics,
)


def case(engines_count: int, rate: float, duration: float, balancer: str) -> None:
    catalog = load_catalog()
    model, gpu = catalog.models["llama-3.1-8b"], catalog.gpus["H100-SXM-80GB"]
    shape = EngineShape(model, gpu, 1, "fp8", kv_bytes_for("fp8"))
    memory = instance_memory(catalog, model.id, gpu.id, 1, "fp8", 2000, 200)
    steps = RooflineSteps(shape, efficiency_for(catalog, gpu.architecture))
    engines = [ServingEngine(steps, 256, memory.kv_token_capacity) for _ in range(engines_count)]
    arrivals = poisson_arrivals(rate, duration, np.random.default_rng(0))
    requests = Requests(arrivals, np.full(len(arrivals), 2000), np.full(len(arrivals), 200))
    started = time.perf_counter()
    run(engines, requests, balancer)
    seconds = time.perf_counter() - started
    stats = run_statistics(requests, [e.gaps for e in engines], (0.1 * duration, duration))
    print(f"{len(requests):,} requests over {duration:g} s at {rate:g} rps on {engines_count} engines ({balancer}): "
          f"{seconds:.2f} s, {len(requests) / seconds:,.0f} requests simulated per second; target < 10 s")  # fmt: skip
    print(f"  TTFT P50/P95/P99 {stats.ttft_ms.p50:.0f}/{stats.ttft_ms.p95:.0f}/{stats.ttft_ms.p99:.0f} ms, token gaps "
          f"P50/P99 {stats.itl_ms.p50:.1f}/{stats.itl_ms.p99:.1f} ms, throughput {stats.throughput_rps:.1f} rps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--balancer", default="power-of-two")
    args = parser.parse_args()
    case(8, args.rate, args.duration, args.balancer)
    case(256, args.rate * 32, args.duration / 32, args.balancer)


if __name__ == "__main__":
    main()
