"""Discrete-event simulation: does a plan hold its latency limits under random (Poisson or burstier) arrivals or a
real trace? The optimizer sizes on steady-state averages; this package replays requests one by one.

From the bottom up:
- `steps`: step times of an engine iteration (the calibrated roofline as O(1) tables, or fixed times);
- `engines`: `ServingEngine` (vLLM-like: token budget, chunked prefill, paged KV with preemption) and its `Book`;
- `simple_engines`: the notebook's simpler `BatchingEngine` (in-flight or static batching) and `SlotEngine` (an
  M/D/C queue);
- `traffic`: requests, arrival processes and length distributions;
- `balance`: `run`, requests fed to engines through a load balancer (round-robin by default);
- `stats`: percentiles, token gaps, time averages, warm-up and batch-means intervals;
- `setups`: `engine_setup`, how one configuration's instances run (step times, batch cap, KV cache, count);
- `options`: `SimulationOptions`, how a plan is simulated;
- `pools`: one run of a pool of workloads on their engines, disaggregated requests carried between pools;
- `verdicts`: `LimitCheck`, `WorkloadCheck` and how a limit's verdict is judged from a pool's runs;
- `wording`: how verdicts read in the reports;
- `settling`: `simulate_pool`, a pool's runs (the length settled on a pilot, seeds, extra seeds for inconclusive
  verdicts);
- `verify`: `simulate_plan`, every workload and period of a plan on its engines, grouped into pools;
- `against_model`: one engine simulated beside the performance model's answer for it.
"""

from planner.simulate.balance import BALANCERS, run
from planner.simulate.engines import ServingEngine
from planner.simulate.simple_engines import BatchingEngine, SlotEngine
from planner.simulate.stats import Percentiles, RunStats, run_statistics
from planner.simulate.steps import FixedSteps, RooflineSteps, saturated_rps
from planner.simulate.traffic import (
    Requests,
    deterministic_arrivals,
    gamma_arrivals,
    lognormal_lengths,
    poisson_arrivals,
)
from planner.simulate.setups import engine_setup
from planner.simulate.options import SimulationOptions
from planner.simulate.verdicts import LimitCheck, WorkloadCheck
from planner.simulate.verify import simulate_plan

__all__ = [
    "BALANCERS", "BatchingEngine", "FixedSteps", "LimitCheck", "Percentiles", "Requests", "RooflineSteps", "RunStats",
    "ServingEngine", "SimulationOptions", "SlotEngine", "WorkloadCheck", "deterministic_arrivals", "engine_setup",
    "gamma_arrivals", "lognormal_lengths", "poisson_arrivals", "run", "run_statistics", "saturated_rps",
    "simulate_plan",
]
