"""How a plan is simulated (`SimulationOptions`): run length and seeds, the balancer, the spread of lengths and
arrivals, the token budget, the bounds on a run, and a trace to replay. Below every module that runs a plan (pools,
settling, verify), so that none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass

# The balancer `plan --verify` simulates by default: each request to an engine drawn at random, so each engine's
# arrivals are Poisson at its share of the rate, the arrivals the performance model sizes an instance for, and what a
# Kubernetes Service (kube-proxy's iptables mode, `planner deploy --target k8s`) does. Round-robin, the simulator's
# own default (NGINX, Envoy), hands each engine every n-th request: more regular, so latencies are lower than the
# plan's (docs/simulation.md).
VERIFY_BALANCER = "random"

@dataclass(frozen=True)
class SimulationOptions:
    """How to simulate. `duration_s` None: settle automatically (start at `start_duration_s`, double up to
    `max_duration_s`). `trace`: a planner.traces.Trace replayed for `trace_workload` (arrivals and lengths)."""

    duration_s: float | None = None
    seeds: int = 1
    seed: int = 0
    balancer: str = "round-robin"
    length_cv: float = 0.0
    arrival_cv: float = 1.0
    token_budget: int | None = None  # None: the scenario's engine.token_budget (the plan was sized with it)
    max_duration_s: float = 4 * 3600.0
    max_requests: int = 1_000_000
    trace: object | None = None
    trace_workload: str | None = None
    trace_period: str | None = None

