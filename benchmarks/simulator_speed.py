"""Simulator speed: one hour at 100 requests/s (about 360k requests) on one node.

One DGX H100 running Llama 3.1 8B in fp8 as 8 TP1 instances with in-flight batching (roofline step times),
2000 tokens in / 200 out, least-outstanding load balancing. Target: under 10 s on 2 cores.
Run:  python benchmarks/simulator_speed.py [--rate 100] [--duration 3600]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from planner.catalog import load_catalog
from planner.perf.calibration import efficiency_for
from planner.perf.roofline import EngineShape, kv_bytes_for
from planner.perf.tables import instance_memory
from planner.simulate import BatchingEngine, Requests, RooflineSteps, poisson_arrivals, run, statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--balancer", default="least-outstanding")
    args = parser.parse_args()
    catalog = load_catalog()
    model, gpu = catalog.models["llama-3.1-8b"], catalog.gpus["H100-SXM-80GB"]
    shape = EngineShape(model, gpu, 1, "fp8", kv_bytes_for("fp8"))
    memory = instance_memory(catalog, model.id, gpu.id, 1, "fp8", 2000, 200)
    steps = RooflineSteps(shape, efficiency_for(catalog, gpu.architecture))
    engines = [BatchingEngine(steps, 256, memory.max_concurrency_by_memory * 2200) for _ in range(8)]
    rng = np.random.default_rng(0)
    arrivals = poisson_arrivals(args.rate, args.duration, rng)
    requests = Requests(arrivals, np.full(len(arrivals), 2000, dtype=np.int64), np.full(len(arrivals), 200, dtype=np.int64))
    started = time.perf_counter()
    run(engines, requests, args.balancer)
    seconds = time.perf_counter() - started
    stats = statistics(requests, engines, args.duration, ttft_limit_ms=500)
    print(f"{len(requests):,} requests over {args.duration:g} s at {args.rate:g} rps on 8 engines: simulated in {seconds:.1f} s "
          f"({len(requests) / seconds:,.0f} requests/s of wall time); target < 10 s")  # fmt: skip
    print(f"TTFT P50/P95/P99 {stats.ttft_ms.p50:.0f}/{stats.ttft_ms.p95:.0f}/{stats.ttft_ms.p99:.0f} ms, "
          f"ITL P50 {stats.itl_ms.p50:.1f} ms, throughput {stats.throughput_rps:.1f} rps")


if __name__ == "__main__":
    main()
