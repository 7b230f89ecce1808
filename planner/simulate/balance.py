"""Feeding requests to engine instances through a load balancer.

- `round-robin` (default since issue 32): engine i mod n. With the plan's identical requests it is close to
  optimal (each engine sees every n-th arrival, far more regular than a random split), it is what common proxies do
  by default (NGINX, Envoy), and its engines never look at each other, so a large run is simulated on several
  processes (`_run_forked`, the same bytes out whatever their number).
- `random`: each request to an engine drawn uniformly at random, so each engine's arrivals are Poisson at 1/n of
  the rate (a Poisson stream split at random), the arrivals the performance model prices an instance for; what a
  Kubernetes Service does through kube-proxy in its iptables mode. Round-robin is smoother (each engine sees every
  n-th arrival, Erlang-n gaps), so a plan sized for Poisson arrivals holds with room under it (docs/simulation.md).
  Its engines never look at each other either.
- `power-of-two`: at each arrival, two engines drawn at random; the one where the new prompt would wait less takes
  it (`ServingEngine.expected_wait_ms`: the rest of the iteration in progress and the prefill of the prompt tokens
  already waiting; ties: less work left, below). O(1) per arrival, and it does not herd: engines that finish a batch
  together do not all take the next burst, because each arrival looks at only two of them. Until issue 32 it
  compared the work left (prompt tokens not yet prefilled and output tokens not yet made), which at the loads plans
  run (no prompt queue anywhere) does not see what delays a prompt, the long step an engine just began:
  chat-and-summarize's chat TTFT P50 37.0 ms against round-robin's 34.8 (now 35.4).
- `least-wait`: every engine advanced to the arrival, the least expected wait (as above) takes it: O(engines) per
  arrival; on chat-and-summarize chat TTFT P50 33.7 ms and summarize 257 ms, against round-robin's 34.8 and 264.
- `least-tokens` / `least-outstanding`: the engine with the least work left (tokens, as above) / fewest requests,
  kept in a heap; ties go to the engine chosen longest ago (they went to the lowest index, which herded: on
  chat-and-summarize, least-outstanding's summarize TTFT P95 over 3 seeds fell from 834-952 ms to 573-687 ms, chat's
  rose from 134-142 to 146-155 ms; round-robin gives 305 and 46 there, so counting requests still misleads);
  engines are advanced only when their next completion is due (a second heap), so an arrival costs O(log engines).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from planner import deadline
from planner.deadline import CHECK_EVERY
from planner.simulate.engines import Book, ServingEngine
from planner.workers import can_fork, worker_count

SIMULATION_STAGE = "simulating the plan"
BALANCERS = ("round-robin", "random", "power-of-two", "least-wait", "least-tokens", "least-outstanding")


def _load_tokens(engine) -> int:
    """Outstanding tokens (the notebook's engines count requests)."""
    return engine.load_tokens if isinstance(engine, ServingEngine) else engine.outstanding()


def _wait(engine, time_s: float) -> tuple[float, float]:
    """(what a new prompt would wait, ms; the work left) of an engine advanced to `time_s` (the notebook's engines:
    requests held)."""
    if isinstance(engine, ServingEngine):
        return engine.expected_wait_ms(time_s), engine.load_tokens
    return float(engine.outstanding()), 0.0


def run(engines: list, requests, balancer: str = "round-robin", seed: int = 0):
    """Simulate `requests` (planner.simulate.traffic.Requests) on `engines`; fills in their admission, first-token
    and finish times and returns them. `seed` drives the power-of-two draws (engines draw from their own seeds)."""
    if balancer not in BALANCERS:
        raise ValueError(f"balancer must be one of {', '.join(BALANCERS)}")
    book = Book(requests)
    serving = [e for e in engines if isinstance(e, ServingEngine)]
    if serving and len(serving) != len(engines):
        raise ValueError("one run simulates engines of one kind")
    for engine in engines:
        if serving:
            engine.book = book
        else:
            engine.requests = requests
    order = np.argsort(requests.arrival_s, kind="stable").tolist()
    arrival = book.arrival
    n = len(engines)
    if n == 1 or balancer in ("round-robin", "random"):
        _by_shares(engines, shares_of(order, n, balancer, seed), arrival, book if serving else None)
    elif balancer == "power-of-two":
        rng = np.random.default_rng(seed)
        first = rng.integers(0, n, size=len(order))
        second = (first + 1 + rng.integers(0, n - 1, size=len(order))) % n  # distinct from the first
        for position, (index, i, j) in enumerate(zip(order, first.tolist(), second.tolist())):
            if position % CHECK_EVERY == 0:
                deadline.check(SIMULATION_STAGE)
            a, b = engines[i], engines[j]
            t = arrival[index]
            a.advance_to(t)
            b.advance_to(t)
            if serving:  # the wait a prompt would see, then the work left (the hot path: no tuples)
                wait_a, wait_b = a.expected_wait_ms(t), b.expected_wait_ms(t)
                if wait_a == wait_b:
                    wait_a, wait_b = a.load_tokens, b.load_tokens
            else:
                wait_a, wait_b = a.outstanding(), b.outstanding()
            engine = a if wait_a < wait_b or (wait_a == wait_b and i < j) else b
            engine.submit(index)
    elif balancer == "least-wait":
        last_chosen = [-1 - i for i in range(n)]  # ties: the engine chosen longest ago
        for position, index in enumerate(order):
            if position % CHECK_EVERY == 0:
                deadline.check(SIMULATION_STAGE)
            t = arrival[index]
            best, best_key = 0, None
            for i, engine in enumerate(engines):
                engine.advance_to(t)
                key = (*_wait(engine, t), last_chosen[i])
                if best_key is None or key < best_key:
                    best, best_key = i, key
            engines[best].submit(index)
            last_chosen[best] = position
    else:
        _least_loaded(engines, order, arrival, tokens=balancer == "least-tokens")
    for engine in engines:
        engine.drain()
    if serving:
        book.write_back(requests)
    return requests


def shares_of(order: list[int], n: int, balancer: str, seed: int = 0) -> list[list[int]]:
    """The requests (in order of arrival) each of `n` engines takes where the balancer looks at none of them:
    round-robin, engine i takes arrivals i, i + n, i + 2n, ...; random, each arrival an engine drawn uniformly (the
    draws of `seed`)."""
    if n == 1 or balancer == "round-robin":
        return [order[i::n] for i in range(n)]
    picks = np.random.default_rng(seed).integers(0, n, size=len(order))
    ordered = np.asarray(order, dtype=int)
    return [ordered[picks == i].tolist() for i in range(n)]


def _by_shares(engines: list, shares: list[list[int]], arrival: list[float], book: Book | None) -> None:
    """Each engine takes its share (`shares_of`): the engines never look at each other, so each runs its share
    alone, and large runs of serving engines run on several processes (each engine draws from its own seed: the
    same results whatever the number of processes; tests/test_simulator_against_closed_forms.py)."""
    if book is not None and _run_forked(engines, shares, book):
        return
    for engine, share in zip(engines, shares):
        _feed(engine, share, arrival)


def _feed(engine, share: list[int], arrival: list[float]) -> None:
    """The engine takes its share of the requests in order of arrival, and finishes them."""
    advance, submit = engine.advance_to, engine.submit
    for start in range(0, len(share), CHECK_EVERY):
        deadline.check(SIMULATION_STAGE)
        for index in share[start:start + CHECK_EVERY]:
            advance(arrival[index])
            submit(index)
    engine.drain()


PARALLEL_MIN_REQUESTS = 20_000  # fewer are simulated in this process: forking costs more than it saves
_FORKED: tuple | None = None  # (engines, shares) a forked worker runs (inherited by fork, never pickled)
_SHARED = ("book", "steps", "classes", "speculation")  # what a worker reads and does not change: not sent back


def _run_forked(engines: list[ServingEngine], shares: list[list[int]], book: Book) -> bool:
    """Each engine's share on a forked process; its state and its requests' times come back into this process.
    False (nothing done) with one process, few requests, no fork on this platform, or a worker lost."""
    global _FORKED
    workers = min(worker_count(), len(engines))
    if workers < 2 or sum(map(len, shares)) < PARALLEL_MIN_REQUESTS or not can_fork():
        return False
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    _FORKED = (engines, shares)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(_run_share, range(len(engines))))
    except (BrokenProcessPool, OSError):  # a worker killed (memory) or no process to start: run them here
        return False
    finally:
        _FORKED = None
    for i, state, admitted, first, finish, rejected in results:
        engines[i].__dict__.update(state)
        for index, a, f, d in zip(shares[i], admitted, first, finish):
            book.admitted[index], book.first[index], book.finish[index] = a, f, d
        book.rejected.extend(rejected)
    book.rejected.sort()
    return True


def _run_share(i: int) -> tuple:
    """In a forked worker: engine i runs its share; its state (what it changed) and its requests' times."""
    engines, shares = _FORKED
    engine, share = engines[i], shares[i]
    book = engine.book
    _feed(engine, share, book.arrival)
    state = {name: value for name, value in vars(engine).items() if name not in _SHARED}
    return (i, state, [book.admitted[j] for j in share], [book.first[j] for j in share],
            [book.finish[j] for j in share], book.rejected)  # fmt: skip


def _least_loaded(engines: list, order: list[int], arrival: list[float], tokens: bool) -> None:
    """The least-loaded engine at each arrival, with two heaps: `due` (when each engine's load may next drop) and
    `light` (load, engine); entries carry a version so that stale ones are skipped when popped."""
    version = [0] * len(engines)
    last_chosen = [-1 - i for i in range(len(engines))]  # ties go to the engine chosen longest ago (never: in order)
    load = _load_tokens if tokens else (lambda e: e.outstanding())
    light = [(0, last_chosen[i], i, 0) for i in range(len(engines))]
    due: list[tuple[float, int, int]] = []

    def refresh(i: int) -> None:
        version[i] += 1
        engine = engines[i]
        heapq.heappush(light, (load(engine), last_chosen[i], i, version[i]))
        next_s = engine.next_event_s()
        if next_s < math.inf:
            heapq.heappush(due, (next_s, i, version[i]))

    for position, index in enumerate(order):
        if position % CHECK_EVERY == 0:
            deadline.check(SIMULATION_STAGE)
        t = arrival[index]
        while due and due[0][0] < t:
            _, i, v = heapq.heappop(due)
            if v == version[i]:
                engines[i].advance_to(t)
                refresh(i)
        while light[0][3] != version[light[0][2]]:
            heapq.heappop(light)
        i = light[0][2]
        engines[i].advance_to(t)
        engines[i].submit(index)
        last_chosen[i] = position
        refresh(i)
