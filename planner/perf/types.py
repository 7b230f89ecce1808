"""Result types of the performance model: an answer with provenance, or a miss with a reason."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.perf.serving import DEFAULT_ENGINE, running_limit

DEFAULT_TOKEN_BUDGET = 8192  # tokens per iteration (vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens)
# an engine's batch is sized to stay within its KV cache this often, whatever the SLO's percentile (fewer than 1% of
# arrivals wait for a slot): the open-loop model's point (perf/open_loop.py) and a decode pool's (perf/disagg.py)
SLOT_PERCENTILE = 99.0


class SteadyStateError(RuntimeError):
    """The steady-state equation did not solve: a defect, never a number to plan with."""


@dataclass(frozen=True)
class PerfQuery:
    """One question to the performance model. None for tp/precision/concurrency means 'any / best'."""

    model: str
    gpu: str
    isl: int | None
    osl: int | None
    tp: int | None = None
    precision: str | None = None
    concurrency: int | None = None
    ttft_ms: float | None = None  # limits (planner/metrics.py), at the percentile the caller gives
    itl_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    token_budget: int = DEFAULT_TOKEN_BUDGET  # tokens per engine iteration (chunked prefill)
    # how requests arrive (planner/perf/open_loop.py): "closed", a fixed concurrency as a benchmark runs it (the
    # point at `concurrency`, or a ladder of them); "poisson", at a rate whatever is in flight, as a deployment sees
    # them (the point at `rate_rps`, or a ladder of rates up to the engine's capacity)
    arrivals: str = "closed"
    rate_rps: float | None = None
    # the serving engine (planner/perf/engines.py): trtllm, vllm or sglang; measured rows without an engine are of
    # the reference TensorRT-LLM-class engine and answer or anchor only its queries
    engine: str = "trtllm"
    # the engine's release pinned (`engine@version`, planner/perf/engines.py pinned); None: its newest calibrated one
    engine_version: str | None = None
    layout: Layout | None = None  # attention DP, expert parallelism, pipeline stages: None is TP `tp` alone
    prefix_cache: PrefixCache | None = None  # prompts partly served from the engine's prefix cache (modeled only)

    @property
    def open_loop(self) -> bool:
        return self.arrivals == "poisson" or self.rate_rps is not None


@dataclass(frozen=True)
class PrefixCache:
    """Prompts that start with a prefix the engine keeps in its KV cache (vLLM's automatic prefix caching, SGLang's
    radix cache, TensorRT-LLM's KV reuse): a system prompt, a conversation's history, an agent's tool list. A share
    `hit_rate` of requests find their first `tokens` tokens cached; their prefill computes the rest of the prompt
    only (which still attends to the cached part). The last prompt token is always computed."""

    tokens: int
    hit_rate: float

    def cached_tokens(self, isl: float) -> float:
        """Tokens of an `isl`-token prompt found in the cache when it hits."""
        return float(max(0.0, min(self.tokens, isl - 1)))

    def computed_tokens(self, isl: float) -> float:
        """Mean prompt tokens prefilled per request."""
        return isl - self.hit_rate * self.cached_tokens(isl)


def prompt_terms(isl: float, cache: PrefixCache | None) -> tuple[float, float, float]:
    """(prompts, length, tokens computed) of the mean request's prefill, for the roofline's step_ms(prompts, length):
    its linear work is prompts x length tokens and its causal attention prompts x length^2. A cached prefix of P
    tokens leaves U = ISL - P tokens whose attention reaches over the whole prompt (ISL^2 - P^2); over hits (share h)
    and misses, L = E[U] tokens and Q = E[ISL^2 - P^2], matched exactly by length Q / L and prompts L^2 / Q. Without
    a cache: (1, ISL, ISL)."""
    if cache is None or cache.hit_rate <= 0 or cache.cached_tokens(isl) <= 0:
        return 1.0, float(isl), float(isl)
    cached, h = cache.cached_tokens(isl), cache.hit_rate
    linear = isl - h * cached
    causal = isl**2 - h * cached**2
    return linear**2 / causal, causal / linear, linear


LAYOUT_MOST = {"tp": 1024, "dp": 1024, "ep": 1024, "pp": 64}  # a count past these is a typo (GB200 NVL72 holds 72 GPUs)


@dataclass(frozen=True)
class Layout:
    """How one engine instance spreads over GPUs: `tp` GPUs per attention rank, `dp` ranks (attention data
    parallelism), experts over `ep` GPUs (1: split by TP; else tp x dp, whole experts per GPU), `pp` pipeline
    stages (one node each, beyond a node's GPUs)."""

    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def beyond_tp(self) -> bool:
        """Attention DP, expert parallelism or pipeline stages beside TP."""
        return self != Layout(self.tp)

    @property
    def label(self) -> str:
        parts = [f"TP{self.tp}"] if self.tp > 1 or self.dp == 1 else []
        parts += [f"DP{self.dp}"] if self.dp > 1 else []
        parts += [f"EP{self.ep}"] if self.ep > 1 else []
        parts += [f"PP{self.pp}"] if self.pp > 1 else []
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> Layout:
        """'TP4', 'DEP8' (attention DP 8 with EP 8), 'TP2EP4' (experts over 4 GPUs: attention TP 2 x DP 2),
        'TP4PP2', 'TP2DP4EP8': TP, DP, EP and PP counts in any order, spaces allowed. Experts split by EP are whole
        on every GPU of the instance, so EP is 1 or TP x DP (DP follows from EP / TP when not given). Raises
        ValueError saying what is allowed."""
        allowed = "TP<n>, DP<n>, EP<n>, PP<n> or DEP<n> (attention DP n with EP n), e.g. TP4, DEP8, TP2EP4, TP4PP2"
        compact = text.replace(" ", "").upper()
        parts = re.findall(r"(DEP|TP|DP|EP|PP)(\d+)", compact)
        if not parts or "".join(name + digits for name, digits in parts) != compact:
            raise ValueError(f"layout '{text}' not understood: give {allowed}")
        counts: dict[str, int] = {}
        for name, digits in parts:
            for key in (("dp", "ep") if name == "DEP" else (name.lower(),)):
                if key in counts or int(digits) < 1:
                    raise ValueError(f"layout '{text}': {key.upper()} given twice or below 1; give {allowed}")
                if int(digits) > LAYOUT_MOST[key]:
                    raise ValueError(f"layout '{text}': {key.upper()} {int(digits)}; allowed: 1 to {LAYOUT_MOST[key]}")
                counts[key] = int(digits)
        tp, ep = counts.get("tp", 1), counts.get("ep", 1)
        dp = counts.get("dp", ep // tp if ep > tp and ep % tp == 0 else 1)
        if ep not in (1, tp * dp):
            raise ValueError(f"layout '{text}': EP {ep} must be 1 (experts split by TP) or TP x DP = {tp * dp} "
                             "(whole experts on every GPU of the instance)")  # fmt: skip
        return cls(tp, dp, ep, counts.get("pp", 1))


@dataclass(frozen=True)
class MemoryFit:
    """Whether the weights fit and how many sequences of isl+osl tokens the KV cache holds."""

    fits: bool
    weights_gb_per_gpu: float
    usable_gb_per_gpu: float
    max_concurrency_by_memory: int | None
    reason: str
    kv_token_capacity: float | None = None  # tokens the instance's KV cache holds (all GPUs)

    def running_limit(self, isl: int, osl: int, engine: str = DEFAULT_ENGINE) -> int | None:
        """Sequences of ISL + OSL the KV cache keeps running under the engine's admission (planner/perf/serving.py:
        TensorRT-LLM reserves ISL + OSL each, paged engines hold ISL + OSL/2 on average)."""
        if not self.kv_token_capacity:
            return self.max_concurrency_by_memory
        return running_limit(self.kv_token_capacity, isl, osl, engine, self.max_concurrency_by_memory or 0)


@dataclass(frozen=True)
class PerfResult:
    """Latency and throughput of one engine instance at one operating point.

    Throughput is per instance (one engine of `gpus_per_instance` GPUs); a node holds
    `gpus_per_node // gpus_per_instance` of them. `provenance` is 'measured' (a benchmark row matched exactly),
    'interpolated' or 'modeled'; `source` names the table row(s), `derivations` what was computed from them.
    Latencies (planner/metrics.py: `tpot_ms` a request's mean gap, `itl_ms` one token gap) are at `percentile`
    (None: means, or a row's own statistic, `statistic`); a `_bound` says only 'below this' (a seed's TTFT < 500 ms).
    """

    model: str
    gpu: str
    tp: int | None
    precision: str | None
    isl: int | None
    osl: int | None
    concurrency: int | None
    gpus_per_instance: int
    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None
    ttft_ms_bound: float | None
    itl_ms_bound: float | None
    request_throughput_rps: float | None
    output_tokens_per_s: float | None
    provenance: str
    source: str
    memory: MemoryFit | None
    derivations: tuple[str, ...] = field(default_factory=tuple)
    stage: str = "aggregated"  # aggregated | prefill (prompts only, KV sent on) | decode (generation only)
    dp: int = 1
    ep: int = 1
    pp: int = 1
    tpot_ms: float | None = None
    tpot_ms_bound: float | None = None
    percentile: float | None = None
    statistic: str = "mean"  # what the latencies are: mean, median, pNN (planner/metrics.py STATISTICS)
    engine: str = "trtllm"  # the serving engine (planner/perf/engines.py)
    # the relative error that covers 80% of the held-out errors of the point's class (engine x GPU generation x
    # dense/MoE; planner/perf/engines.py): {"throughput", "ttft", "tpot", "itl"}; None for a measured row
    expected_error: dict | None = None
    # the engine version the answer is for: its class's newest calibrated release (or the pinned one), a row's own;
    # "not stated" where the row does not say
    engine_version: str = ""
    error_known: bool = True  # False: the class's held-out band is too wide to be an answer (planner/perf/engines.py)
    # what the point's rate is: `closed` a fixed number in flight (a benchmark row, the closed loop), `poisson` requests
    # arriving at random at that rate (the open loop, planner/perf/open_loop.py)
    arrivals: str = "closed"
    # a model without an architecture sized for random arrivals (planner/perf/point_engine.py): its measured point's
    # closed-loop requests/s per instance, which its engine's steps are fitted to (the simulator fits the same)
    point_rps_per_instance: float | None = None

    def instances_per_node(self, gpus_per_node: int) -> float:
        """Whole instances a node holds; an instance over several whole nodes (pipeline stages) is a fraction."""
        if self.gpus_per_instance > gpus_per_node and self.gpus_per_instance % gpus_per_node == 0:
            return gpus_per_node / self.gpus_per_instance
        return gpus_per_node // self.gpus_per_instance

    def rps_per_node(self, gpus_per_node: int) -> float | None:
        """rps_per_node = instances_per_node x rps_per_instance (design.md)."""
        if self.request_throughput_rps is None:
            return None
        return self.instances_per_node(gpus_per_node) * self.request_throughput_rps


@dataclass(frozen=True)
class PerfMiss:
    """No answer for a query, and why (no data, does not fit, limit below what the data shows)."""

    query: PerfQuery
    reason: str
