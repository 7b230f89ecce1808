"""The engine plans are simulated on: what one instance of an engine like vLLM or TensorRT-LLM does with the
requests sent to it (`ServingEngine`), and the per-request book it reads and writes during a run (`Book`).

Every iteration decodes one token for each running sequence and fills the rest of a token budget with prompt chunks
(chunked prefill); requests are admitted FIFO while seats (the batch cap) and KV cache remain; the KV cache holds
each sequence's prompt and the tokens generated so far and grows as they decode; when it is full the most recently
admitted sequence is preempted (its cache freed, recomputed later as a prefill of prompt + generated tokens, like
vLLM's recompute preemption). With `kv_admission='reserve'` (TensorRT-LLM, planner/perf/serving.py) a request is
admitted only while its whole ISL + OSL fits beside the reservations of those admitted, and none is preempted. Step
times come from a `steps` model (planner/simulate/steps.py).

Time advances from event to event; stretches of pure decoding are taken in one jump. The notebook's simpler
engines (`BatchingEngine`, `SlotEngine`): planner/simulate/simple_engines.py.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np


class Book:
    """Per-request state as Python lists (numpy scalar access costs ~10x a list's in the engine's inner loop):
    what the run reads (arrival, lengths) and what the engines write (admission, first token, finish)."""

    def __init__(self, requests):
        self.arrival = requests.arrival_s.tolist()
        self.isl = requests.isl.tolist()
        self.osl = requests.osl.tolist()
        self.cached = requests.cached.tolist()
        n = len(self.arrival)
        self.admitted = [math.nan] * n
        self.first = [math.nan] * n
        self.finish = [math.nan] * n
        self.rejected: list[int] = []

    def write_back(self, requests) -> None:
        requests.admitted_s = np.array(self.admitted)
        requests.first_token_s = np.array(self.first)
        requests.finish_s = np.array(self.finish)
        requests.rejected = np.zeros(len(self.arrival), dtype=bool)
        requests.rejected[self.rejected] = True


class ServingEngine:
    """One engine instance like vLLM / TensorRT-LLM (see the module docstring).

    Sequences decode in lockstep, so a running sequence is kept as the iteration count at which it emits its last
    token (`running`, in admission order, and a heap of the same for the next completion): an iteration costs O(1)
    plus O(log batch) per completion, whatever the batch. With `i` iterations done, a running sequence that ends at
    iteration F holds isl + osl - (F - i) tokens, so the decoding context is S0 + n x i with S0 = sum(isl + osl - F).

    Cached prompts: a request's `cached` tokens (Requests.cached) are in the cache when it arrives; its prefill starts
    after them (the chunks attend to them: F(end) - F(cached)). With `continues` the engine is a disaggregated decode
    pool: its requests arrive with their whole prompt and first token cached (isl = prompt + 1, osl = tokens still to
    make), join the batch without a prefill, and the wait from their arrival (the first token) to their next token is
    recorded as a gap.

    Speculative decoding (`speculation`, planner.perf.roofline.Speculation): an iteration is the model's speculative
    step (k draft steps and a verify of k + 1 tokens per sequence) and yields each sequence 1 + min(G, k) tokens, G
    geometric (a draft token accepted with probability a, the first rejection ending the run). A sequence's
    iteration count is drawn when it starts decoding (its tokens reached or passed); its context and KV are counted
    at the mean e tokens per iteration, and each iteration's gap is recorded as step / e for e tokens per sequence
    (the performance model's ITL, docs/metrics.md).

    Classes (an engine shared by several workloads): with `classes` (the class, e.g. the workload, of every request
    of the run, by request index) the engine keeps how many running sequences each class has and records, with every
    gap, how many of its tokens each class received (`class_gaps(c)`), and counts preemptions per class. Without
    `classes` nothing of this is kept (the inner loop pays one attribute test per gap and per sequence joining or
    leaving the batch).
    """

    def __init__(self, steps, max_batch: int, kv_tokens: float | None = None, token_budget: int = 8192,
                 request_overhead_ms: float = 0.0, classes: list[int] | None = None, speculation=None, seed: int = 0,
                 continues: bool = False, kv_admission: str = "paged"):  # fmt: skip
        if max_batch < 1 or token_budget < 1 or not request_overhead_ms >= 0:
            raise ValueError("max_batch and token_budget must be >= 1, request_overhead_ms >= 0")
        self.steps, self.max_batch, self.token_budget = steps, int(max_batch), int(token_budget)
        self.speculation = speculation
        self.per_step = float(speculation.tokens_per_step) if speculation is not None else 1.0  # e
        self.rng = np.random.default_rng(seed) if speculation is not None else None
        self.continues = continues
        # what every request spends outside the engine's iterations (the performance model's per-request overhead
        # t0: tokenization, the HTTP round trip): a constant delay of every arrival shifts the whole run by it, so
        # it is added to the first token's and the finish time and changes nothing else
        self.request_overhead_s = request_overhead_ms / 1e3
        self.kv_capacity = math.inf if kv_tokens is None else float(kv_tokens)
        # admission (planner/perf/serving.py): 'paged' admits a prompt while its tokens fit and preempts when the
        # cache fills; 'reserve' admits a request only while its whole ISL + OSL fits beside the others' (TensorRT-LLM's
        # GUARANTEED_NO_EVICT), so that nothing is ever preempted
        self.reserves = kv_admission == "reserve"
        self.reserved = 0  # tokens reserved by the requests admitted (reserve admission)
        self.book: Book | None = None
        self.clock = 0.0
        self.iteration = 0
        self.queue: deque[int] = deque()
        self.prefilling: list[list] = []  # [request, tokens done, tokens to prefill]
        self.running: dict[int, int] = {}  # request -> iteration of its last token
        self.ends: list[tuple[int, int]] = []  # heap of (iteration of the last token, request); stale entries skipped
        self.s0 = 0  # sum over running of isl + osl - F x e
        self.prefill_reserved = 0  # KV tokens of the prompts being prefilled
        self.resume: dict[int, tuple[int, float]] = {}  # preempted request -> (tokens generated, time of its last token)
        self.restarted_with: dict[int, int] = {}  # speculative: tokens a resumed sequence had when it ran again
        # gaps between tokens, one entry per iteration (or jump): when it ended (s), the gap (ms), how many tokens
        self.gap_end_s: list[float] = []
        self.gap_ms: list[float] = []
        self.gap_tokens: list[int] = []
        self.preemptions = 0
        self.requests_outstanding = 0
        self.tokens_outstanding = 0  # prompt + output tokens of the requests held
        self.tokens_done = 0  # of those, the prompt tokens prefilled and output tokens made so far
        self.prompt_tokens_left = 0  # prompt tokens of the requests held still to prefill (what a new prompt waits for)
        self.samples: list[int] = []  # requests in this engine seen by each arrival sent to it
        self._next_event: float | None = None
        # per class (only with `classes`): running sequences, tokens of each gap (parallel to gap_ms), preemptions
        self.classes = classes
        count = (max(classes) + 1 if len(classes) else 0) if classes is not None else 0
        self.class_running: list[int] | None = [0] * count if classes is not None else None
        self.class_gap_tokens: list[list[int]] = [[] for _ in range(count)]
        self.class_preemptions: list[int] = [0] * count

    # -- what balancers read
    def outstanding(self) -> int:
        return self.requests_outstanding

    @property
    def load_tokens(self) -> int:
        """The work the engine still holds, in tokens: prompt tokens not yet prefilled and output tokens not yet
        made (a request near its end weighs little, a prompt waiting weighs its whole length)."""
        return self.tokens_outstanding - self.tokens_done

    def expected_wait_ms(self, time_s: float) -> float:
        """What a prompt arriving at `time_s` waits before its own prefill can start, as the engine stands (it has
        been advanced to `time_s`): the rest of the iteration in progress, the prefill of the prompt tokens already
        waiting (their work beside a running step, F) and, with every seat taken, the next completion for itself
        and each request queued ahead. What the `least-wait` and `power-of-two` balancers compare."""
        running = self.running
        if not (running or self.prefilling or self.queue):
            return 0.0
        wait_ms = (self.clock - time_s) * 1e3 if self.clock > time_s else 0.0
        if self.prompt_tokens_left:
            wait_ms += self.steps.fused_work_ms(self.prompt_tokens_left)
        if running and len(running) + len(self.prefilling) >= self.max_batch:
            # every seat taken: the next completion frees one, and each request queued ahead takes one too (at
            # about the same interval)
            wait_ms += max(self.next_event_s() - time_s, 0.0) * 1e3 * (1 + len(self.queue))
        return wait_ms

    def next_event_s(self) -> float:
        """A lower bound on when the requests outstanding may next change (now, when there is work to start)."""
        if self._next_event is None:
            if self.prefilling or self._can_admit():
                self._next_event = self.clock
            elif self.running:
                steps = self._first_end() - self.iteration
                n = len(self.running)
                context = (self.s0 + n * self.iteration * self.per_step) / n
                self._next_event = self.clock + steps * self.steps.decode_ms(n, context) / 1e3
            else:
                self._next_event = math.inf
        return self._next_event

    # -- what the run calls
    def submit(self, request: int) -> None:
        book = self.book
        self._next_event = None
        self.samples.append(self.requests_outstanding)
        if not (self.running or self.prefilling or self.queue):
            self.clock = max(self.clock, book.arrival[request])
        self.queue.append(request)
        self.requests_outstanding += 1
        self.tokens_outstanding += book.isl[request] + book.osl[request]
        start = self._prefill_start(request)
        self.tokens_done += start
        self.prompt_tokens_left += book.isl[request] - start

    def advance_to(self, time_s: float) -> None:
        """Run the iterations that start before `time_s`."""
        while self.clock < time_s and (self.running or self.prefilling or self.queue):
            self._next_event = None
            if self.prefilling or not self.running or self._can_admit():
                self._iterate()
            else:
                self._jump(time_s)

    def drain(self) -> None:
        self.advance_to(math.inf)

    # -- internals
    def _kv_used(self) -> float:
        return self.s0 + len(self.running) * self.iteration * self.per_step + self.prefill_reserved

    def _iterations_for(self, tokens: int) -> int:
        """Iterations a sequence needs to make `tokens` more tokens: as many without speculation; with it, drawn
        (class docstring)."""
        if self.rng is None or tokens <= 0:
            return tokens
        spec = self.speculation
        count, made = 0, 0
        while made < tokens:
            size = int((tokens - made) / self.per_step * 1.25) + 8
            if spec.acceptance >= 1:
                draws = np.full(size, spec.draft_tokens + 1)
            else:
                draws = 1 + np.minimum(self.rng.geometric(1.0 - spec.acceptance, size) - 1, spec.draft_tokens)
            reached = np.cumsum(draws) + made
            at = int(np.searchsorted(reached, tokens))
            if at < size:
                return count + at + 1
            count, made = count + size, int(reached[-1])
        return count

    def _prefill_start(self, request: int) -> int:
        """Prompt tokens already in the cache when the request's prefill starts: its cached prefix (at most the
        prompt), none after a preemption (the cache was freed)."""
        if request in self.resume:
            return 0
        return min(self.book.cached[request], self.book.isl[request])

    def _prompt_tokens(self, request: int) -> int:
        resumed = self.resume.get(request)
        return self.book.isl[request] + (resumed[0] if resumed else 0)

    def _can_admit(self) -> bool:
        if not self.queue or len(self.running) + len(self.prefilling) >= self.max_batch:
            return False
        if len(self.running) >= self.token_budget:
            return False
        if self.reserves:
            request = self.queue[0]
            need = self.book.isl[request] + self.book.osl[request]
            return self.reserved + need <= self.kv_capacity or not (self.running or self.prefilling)
        return self._kv_used() + self._prompt_tokens(self.queue[0]) <= self.kv_capacity or not (self.running or self.prefilling)

    def _first_end(self) -> int:
        ends, running = self.ends, self.running
        while running.get(ends[0][1]) != ends[0][0]:
            heapq.heappop(ends)
        return ends[0][0]

    def _preempt_for_decode(self) -> None:
        """Free the cache of the latest admitted sequences until every running one can store its next token."""
        book = self.book
        while self.running and self._kv_used() + len(self.running) * self.per_step > self.kv_capacity:
            victim = next(reversed(self.running))
            end = self.running.pop(victim)
            self.s0 -= book.isl[victim] + book.osl[victim] - end * self.per_step
            generated = book.osl[victim] - (end - self.iteration)
            if self.rng is not None:  # tokens made at the mean rate, never fewer than it had when it last ran again
                # (its drawn end may lie further than the mean rate: the estimate alone could go backwards and a
                # sequence preempted over and over would never finish), never all of them
                floor = self.restarted_with.pop(victim, 1)
                estimate = round(book.osl[victim] - (end - self.iteration) * self.per_step)
                generated = min(book.osl[victim] - 1, max(floor, estimate))
            self.tokens_done -= book.isl[victim] + generated  # its cache is gone: prompt and tokens are prefilled again
            self.resume[victim] = (generated, self.clock)
            if self.reserves:  # its reservation is released with its cache, taken again when it is readmitted
                self.reserved -= book.isl[victim] + book.osl[victim]
            self.prompt_tokens_left += book.isl[victim] + generated  # recomputed whole
            self.queue.appendleft(victim)
            self.preemptions += 1
            if self.class_running is not None:
                c = self.classes[victim]
                self.class_running[c] -= 1
                self.class_preemptions[c] += 1

    def _reject(self, request: int) -> None:
        """A prompt larger than the whole KV cache: the engine refuses it (the simulation counts it as failed)."""
        self.prompt_tokens_left -= self._prompt_tokens(request) - self._prefill_start(request)
        self.book.rejected.append(request)
        self.requests_outstanding -= 1
        self.tokens_outstanding -= self.book.isl[request] + self.book.osl[request]

    def _iterate(self) -> None:
        book, steps = self.book, self.steps
        if self.running and self.kv_capacity < math.inf:
            self._preempt_for_decode()
        decoding = len(self.running)
        budget = self.token_budget - decoding
        work_ms = 0.0
        # a step of prompts only: its first chunk reads the weights (W), the others ride along (F)
        alone = not decoding
        fused = steps.fused_work_ms

        for entry in self.prefilling:  # chunks of prompts already started go first
            if budget <= 0:
                break
            take = min(entry[2] - entry[1], budget)
            if alone:
                alone = False
                work_ms += steps.prompt_work_ms(entry[1] + take) - steps.prompt_work_ms(entry[1])
            else:
                work_ms += fused(entry[1] + take) - fused(entry[1])
            entry[1] += take
            self.tokens_done += take
            self.prompt_tokens_left -= take
            budget -= take
        queue = self.queue
        joining = 0  # requests whose whole prompt is cached: they make a token in this step without a prefill
        joining_context = 0
        while queue and budget > 0 and decoding + len(self.prefilling) < self.max_batch:
            request = queue[0]
            tokens = self._prompt_tokens(request)
            need = book.isl[request] + book.osl[request] if self.reserves else tokens
            if (self.reserved if self.reserves else self._kv_used()) + need > self.kv_capacity:
                if self.running or self.prefilling:
                    break
                if need > self.kv_capacity:
                    queue.popleft()
                    self._reject(request)
                    continue
            queue.popleft()
            if self.reserves:
                self.reserved += need
            if book.admitted[request] != book.admitted[request]:  # NaN: first admission
                book.admitted[request] = self.clock
            self.prefill_reserved += tokens
            start = self._prefill_start(request)
            take = min(tokens - start, budget)
            if take and alone:
                alone = False
                work_ms += steps.prompt_work_ms(start + take) - steps.prompt_work_ms(start)
            elif take:
                work_ms += fused(start + take) - fused(start)
            else:
                joining += 1
                joining_context += tokens
            self.prefilling.append([request, start + take, tokens])
            self.tokens_done += take
            self.prompt_tokens_left -= take
            budget -= take
        if decoding or (joining and not work_ms):  # a decode step (with the cached prompts' first tokens)
            emitting = decoding + joining
            context = (self.s0 + decoding * self.iteration * self.per_step + joining_context) / emitting
            duration_ms = steps.decode_ms(emitting, context) + work_ms
        elif self.prefilling:
            duration_ms = steps.prefill_base_ms + work_ms
        else:
            return  # everything waiting was rejected
        self.clock += duration_ms / 1e3
        if decoding:
            self.iteration += 1
            self.tokens_done += decoding * self.per_step
            self._gap(duration_ms / self.per_step, decoding * self.per_step)
            if self.class_running is not None:
                self._class_gap(1)
        if self.prefilling:
            done = [entry for entry in self.prefilling if entry[1] >= entry[2]]
            if done:
                self.prefilling = [entry for entry in self.prefilling if entry[1] < entry[2]]
                for request, _, tokens in done:
                    self._first_token(request, tokens)
        if self.ends and self.ends[0][0] <= self.iteration:
            self._retire()

    def _first_token(self, request: int, tokens: int) -> None:
        """A prompt's last chunk is done: it emits a token (its first, or the next one after a preemption)."""
        book = self.book
        self.prefill_reserved -= tokens
        resumed = self.resume.pop(request, None)
        self.tokens_done += 1  # the token the last chunk makes
        if resumed is None:
            book.first[request] = self.clock + self.request_overhead_s
            generated = 1
            if self.continues:  # its previous token came with its arrival (the prefill pool's first token)
                self._one_token_gap(request, (self.clock - book.arrival[request]) * 1e3)
        else:
            generated = resumed[0] + 1
            self._one_token_gap(request, (self.clock - resumed[1]) * 1e3)
            if self.rng is not None and generated < book.osl[request]:
                self.restarted_with[request] = generated
        left = book.osl[request] - generated
        if left <= 0:
            self._finish(request)
            return
        end = self.iteration + self._iterations_for(left)
        self.running[request] = end
        self.s0 += book.isl[request] + book.osl[request] - end * self.per_step
        heapq.heappush(self.ends, (end, request))
        if self.class_running is not None:
            self.class_running[self.classes[request]] += 1

    def _gap(self, gap_ms: float, tokens: int) -> None:
        self.gap_end_s.append(self.clock)
        self.gap_ms.append(gap_ms)
        self.gap_tokens.append(tokens)

    def _one_token_gap(self, request: int, gap_ms: float) -> None:
        """A gap that carried one token, of `request`'s class."""
        self._gap(gap_ms, 1)
        if self.class_running is not None:
            c = self.classes[request]
            for k, tokens in enumerate(self.class_gap_tokens):
                tokens.append(1 if k == c else 0)

    def _class_gap(self, steps: int) -> None:
        """The gap just recorded, `steps` iterations long, carried each class's running sequences."""
        for tokens, running in zip(self.class_gap_tokens, self.class_running):
            tokens.append(running * steps * self.per_step)

    @property
    def gaps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.array(self.gap_end_s), np.array(self.gap_ms), np.array(self.gap_tokens, dtype=float)

    def class_gaps(self, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The gaps (end s, gap ms, tokens) that carried tokens of class `c`, with its tokens only (needs `classes`)."""
        if self.class_running is None:
            raise ValueError("the engine was not given request classes")
        if c >= len(self.class_gap_tokens):
            return np.zeros(0), np.zeros(0), np.zeros(0)
        tokens = np.array(self.class_gap_tokens[c], dtype=float)
        mine = tokens > 0
        return np.array(self.gap_end_s)[mine], np.array(self.gap_ms)[mine], tokens[mine]

    def _finish(self, request: int) -> None:
        book = self.book
        if self.reserves:
            self.reserved -= book.isl[request] + book.osl[request]
        book.finish[request] = self.clock + self.request_overhead_s
        self.requests_outstanding -= 1
        self.tokens_outstanding -= book.isl[request] + book.osl[request]
        self.tokens_done -= book.isl[request] + book.osl[request]  # all of it was done

    def _retire(self) -> None:
        ends, running, book = self.ends, self.running, self.book
        while ends and ends[0][0] <= self.iteration:
            end, request = heapq.heappop(ends)
            if running.get(request) != end:
                continue
            del running[request]
            self.s0 -= book.isl[request] + book.osl[request] - end * self.per_step
            if self.class_running is not None:
                self.class_running[self.classes[request]] -= 1
            self._finish(request)

    def _jump(self, time_s: float) -> None:
        """k decode-only iterations at once, up to the next completion, the iteration where the KV cache is full, or
        `time_s`. Decode time is linear in the context, which grows by one token per sequence per iteration, so the
        k steps take k x decode_ms at the stretch's mean context, exactly."""
        # the engine's hottest path (one call per arrival and engine advanced): attributes read once, the helpers
        # (_kv_used, _gap, _retire) inlined or called only when they have something to do
        n, e, iteration = len(self.running), self.per_step, self.iteration
        to_end = self._first_end() - iteration
        k = to_end
        held = self.s0 + n * iteration * e  # KV tokens of the running sequences
        if self.kv_capacity < math.inf:
            k = min(k, int((self.kv_capacity - held - self.prefill_reserved) // (n * e)))
            if k < 1:
                self._iterate()  # the next token does not fit: preempt
                return
        context = held / n
        decode_ms = self.steps.decode_ms
        if time_s < math.inf:
            k = max(1, min(k, math.ceil((time_s - self.clock) * 1e3 / decode_ms(n, context) - 1e-9)))
        step_ms = decode_ms(n, context + (k - 1) / 2 * e)
        self.clock += k * step_ms / 1e3
        self.iteration = iteration + k
        tokens = n * k * e
        self.tokens_done += tokens
        self.gap_end_s.append(self.clock)
        self.gap_ms.append(step_ms / e)
        self.gap_tokens.append(tokens)
        if self.class_running is not None:
            self._class_gap(k)
        if k >= to_end:  # a sequence ends here
            self._retire()
