"""The notebook's simpler engine models (the seeds' lesson), kept beside `ServingEngine` (planner/simulate/engines.py)
for comparison and the tests that walk through them by hand:

- `BatchingEngine`: in-flight or static batching, whole prompts prefilled in one iteration and KV reserved for
  ISL + OSL at admission (no preemption); stretches of pure decoding are taken in one jump. Step times come from a
  `steps` model (planner/simulate/steps.py).
- `SlotEngine`: C parallel slots of a fixed service time with a FIFO queue in front (an M/D/C queue).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np


class BatchingEngine:
    """One engine instance with iteration-level batching (see the module docstring)."""

    def __init__(self, steps, max_batch: int, kv_tokens: float | None, in_flight: bool = True):
        self.steps, self.max_batch, self.kv_tokens, self.in_flight = steps, max_batch, kv_tokens, in_flight
        self.clock = 0.0
        self.queue: deque[int] = deque()
        self.running: list[int] = []  # request indices
        self.remaining = np.zeros(0, dtype=np.int64)  # tokens still to generate, per running request
        self.reserved_tokens = 0.0
        self.context_sum = 0.0
        self.static_batch_size = 0
        self.queue_samples: list[tuple[float, int]] = []
        self.requests = None  # planner.simulate.traffic.Requests, set by the run
        self._next_event: float | None = None

    def outstanding(self) -> int:
        return len(self.queue) + len(self.running)

    def submit(self, index: int) -> None:
        self._next_event = None
        if not self.running and not self.queue:
            self.clock = max(self.clock, float(self.requests.arrival_s[index]))
        self.queue.append(index)

    def advance_to(self, time_s: float) -> None:
        """Run iterations that start before `time_s`. Stretches of pure decoding (nothing to admit) are taken in
        one jump up to the next completion or `time_s`: the per-iteration loop would dominate long runs."""
        while (self.running or self.queue) and self.clock < time_s:
            self._next_event = None
            if self._can_admit() or not self.running:
                self._iterate()
            else:
                self._jump(time_s)

    def drain(self) -> None:
        self.advance_to(math.inf)

    def next_event_s(self) -> float:
        """When the number of outstanding requests may next change (a completion), or now if work is waiting.
        Cached until the engine's state changes: the balancer asks every engine at every arrival."""
        if self._next_event is None:
            self._next_event = self._compute_next_event()
        return self._next_event

    def _compute_next_event(self) -> float:
        if self._can_admit():
            return self.clock
        if not self.running:
            return math.inf
        return self.clock + self._steps_to_next_completion() * self._decode_ms() / 1e3

    def _steps_to_next_completion(self) -> int:
        if self.in_flight:
            return int(self.remaining.min())
        # static batching keeps finished sequences (remaining <= 0) in the batch until the last one is done
        generating = self.remaining[self.remaining > 0]
        return int(generating.min()) if len(generating) else 1

    def _can_admit(self) -> bool:
        if not self.queue or len(self.running) >= self.max_batch or (self.running and not self.in_flight):
            return False
        if self.kv_tokens is None or not self.running:
            return True
        index = self.queue[0]
        return self.reserved_tokens + float(self.requests.isl[index] + self.requests.osl[index]) <= self.kv_tokens

    def _decode_ms(self, steps_ahead: float = 0.0) -> float:
        decoding = len(self.running)
        batch = self.static_batch_size if not self.in_flight else decoding
        return self.steps.decode_ms(batch, (self.context_sum + steps_ahead * decoding) / decoding)

    def _jump(self, time_s: float) -> None:
        """k decode-only iterations at once; the step time is taken at the middle of the stretch (context grows
        by one token per sequence and iteration)."""
        to_completion = self._steps_to_next_completion()
        k = to_completion
        if math.isfinite(time_s):
            step_ms = self._decode_ms()
            k = max(1, min(k, math.ceil((time_s - self.clock) * 1e3 / step_ms - 1e-9)))
        self.queue_samples.append((self.clock, len(self.queue)))
        self.clock += k * self._decode_ms((k - 1) / 2) / 1e3
        self.remaining -= k
        self.context_sum += k * len(self.running)
        if k == to_completion:  # someone finished in this stretch
            self._retire(self.remaining <= 0)

    def _admit(self) -> list[int]:
        requests = self.requests
        admitted = []
        if not self.in_flight and self.running:
            return admitted
        while self.queue and len(self.running) + len(admitted) < self.max_batch:
            index = self.queue[0]
            need = float(requests.isl[index] + requests.osl[index])
            if self.kv_tokens is not None and self.reserved_tokens + need > self.kv_tokens and (self.running or admitted):
                break
            self.queue.popleft()
            self.reserved_tokens += need
            admitted.append(index)
        return admitted

    def _iterate(self) -> None:
        requests = self.requests
        self.queue_samples.append((self.clock, len(self.queue)))
        admitted = self._admit()
        decoding = len(self.running)
        duration_ms = 0.0
        if admitted:
            duration_ms += self.steps.prefill_ms([int(requests.isl[i]) for i in admitted])
        if decoding:
            batch = self.static_batch_size if not self.in_flight else decoding
            duration_ms += self.steps.decode_ms(batch, self.context_sum / decoding)
        self.clock += duration_ms / 1e3
        if decoding:
            self.remaining -= 1
            self.context_sum += decoding
        if len(admitted) == 1:  # the common case at moderate load: no array building
            index = admitted[0]
            requests.first_token_s[index] = self.clock
            self.running.append(index)
            self.remaining = np.append(self.remaining, requests.osl[index] - 1)
            self.context_sum += float(requests.isl[index]) + 1.0
            if not self.in_flight:
                self.static_batch_size = len(self.running)
        elif admitted:
            new = np.asarray(admitted, dtype=np.int64)
            requests.first_token_s[new] = self.clock
            self.running.extend(admitted)
            self.remaining = np.concatenate([self.remaining, requests.osl[new] - 1])
            self.context_sum += float(requests.isl[new].sum() + len(admitted))
            if not self.in_flight:
                self.static_batch_size = len(self.running)
        done = self.remaining <= 0
        if done.any():
            self._retire(done)

    def _retire(self, done: np.ndarray) -> None:
        requests = self.requests
        if not self.in_flight:
            # static: a sequence that is done keeps its slot until the whole batch is
            for i in np.flatnonzero(done):
                index = self.running[i]
                if np.isnan(requests.finish_s[index]):
                    requests.finish_s[index] = self.clock
            if not done.all():
                return
        positions = np.flatnonzero(done).tolist()
        for i in positions:
            index = self.running[i]
            if np.isnan(requests.finish_s[index]):
                requests.finish_s[index] = self.clock
            tokens = float(requests.isl[index] + requests.osl[index])
            self.reserved_tokens -= tokens
            self.context_sum -= tokens
        if len(positions) == 1:  # the common case in flight: one sequence ends
            del self.running[positions[0]]
            self.remaining = np.delete(self.remaining, positions[0])
        else:
            keep = ~done
            self.running = [r for r, k in zip(self.running, keep.tolist()) if k]
            self.remaining = self.remaining[keep]
        if not self.running:
            self.context_sum, self.reserved_tokens, self.static_batch_size = 0.0, 0.0, 0


class SlotEngine:
    """A measured operating point as C parallel slots with a FIFO queue (an M/D/C queue)."""

    def __init__(self, ttft_ms: float, itl_ms: float, request_throughput_rps: float, osl: int):
        e2e_ms = ttft_ms + (osl - 1) * itl_ms
        self.slots = max(1, math.ceil(request_throughput_rps * e2e_ms / 1e3 - 1e-9))
        service_ms = self.slots / request_throughput_rps * 1e3  # C / E2E' = measured throughput
        self.ttft_ms = ttft_ms
        self.itl_ms = (service_ms - ttft_ms) / max(osl - 1, 1) if osl > 1 else 0.0
        self.free_at = [0.0] * self.slots
        self.busy_until: list[float] = []  # finish times of requests not yet done, for 'outstanding'
        self.queue_samples: list[tuple[float, int]] = []
        self.requests = None  # planner.simulate.traffic.Requests, set by the run

    def outstanding(self) -> int:
        return len(self.busy_until)

    def next_event_s(self) -> float:
        return self.busy_until[0] if self.busy_until else math.inf

    def advance_to(self, time_s: float) -> None:
        while self.busy_until and self.busy_until[0] <= time_s:
            heapq.heappop(self.busy_until)

    def submit(self, index: int) -> None:
        requests = self.requests
        arrival = float(requests.arrival_s[index])
        free = heapq.heappop(self.free_at)
        start = max(arrival, free)
        first = start + self.ttft_ms / 1e3
        finish = first + (int(requests.osl[index]) - 1) * self.itl_ms / 1e3
        requests.first_token_s[index], requests.finish_s[index] = first, finish
        heapq.heappush(self.free_at, finish)
        heapq.heappush(self.busy_until, finish)
        self.queue_samples.append((arrival, max(0, len(self.busy_until) - self.slots)))

    def drain(self) -> None:
        self.busy_until.clear()
