"""The closed loop's step times at each running batch (`StepTimes`), and what turns its means into percentiles:
one gap between tokens under the token budget (`TokenGaps`), and the Gamma tails of TTFT and TPOT (`tails`,
`gamma_quantile`), shared with the disaggregated pools (planner/perf/closed_loop.py's docstring has the math)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.perf.shapes import EngineShape
from planner.perf.step import Efficiency


@dataclass(frozen=True)
class StepTimes:
    """The step times the steady state needs at each running batch B (arrays over concurrency)."""

    d1: np.ndarray  # decode step of 1
    slope: np.ndarray  # per further decoding sequence
    prefill: np.ndarray  # the own prompt alone
    prefill_slope: np.ndarray  # per sequence decoding beside the own prompt
    delta: np.ndarray  # one prompt fused into the others' step


@dataclass(frozen=True)
class TokenGaps:
    """The gaps between one request's tokens under chunked prefill: a decode step D of the running batch, plus
    c for each prompt chunk the step carries. An iteration takes `token_budget` tokens: one per decoding sequence,
    the rest for prompt chunks, so a prompt of ISL tokens is cut into k = ceil(ISL / (budget - decoding)) chunks of
    Delta / k each (Delta: what the whole prompt adds to a step). The others' prompts arrive at X (B-1)/B, so a
    step of mean length tau (the mean gap, D / (1 - rho)) carries M ~ Poisson(mu) chunks, mu = X (B-1)/B k tau:

        gap = D + c M,   c = Delta / k,   mean gap = D + rho tau = D / (1 - rho) = the mean TPOT.

    Its p-th percentile is D + c x (the Poisson p-quantile of M): the decode step while fewer than 1 - p of the
    steps carry a chunk, a step with one or more chunks beyond (the stalls vLLM's ITL percentiles show)."""

    chunks_per_step: np.ndarray  # mu
    chunk_ms: np.ndarray  # c

    def quantile(self, decode: np.ndarray, percentile: float | None) -> np.ndarray:
        """The gap at a percentile (None: the mean)."""
        if percentile is None:
            return decode + self.chunk_ms * self.chunks_per_step
        from planner.perf.step_chain import poisson_ppf  # scipy: imported where the model runs

        return decode + self.chunk_ms * poisson_ppf(percentile / 100.0, np.maximum(self.chunks_per_step, 1e-300))


def token_gaps(x, s: StepTimes, running, isl: int, others, tpot, token_budget: int, shape: EngineShape) -> TokenGaps:
    """The chunks per step and their cost (`TokenGaps`) at each operating point. A prompt is chunked by its own
    attention-DP rank's budget, beside that rank's share of the decoders (e tokens each, k + 1 when speculative)."""
    room = np.maximum(token_budget - shape.tokens_per_decoder * (1.0 + others) / shape.dp, 1.0)  # prompt tokens a rank's step takes beside its decoders
    chunks = np.ceil(isl / room)
    rate = x * (running - 1.0) / running  # the others' prompts per ms
    return TokenGaps(rate * chunks * tpot, s.delta / chunks)


def gamma_quantile(mean, var, percentile: float) -> np.ndarray:
    """The p-quantile of a Gamma distribution of this mean and variance (the mean itself where there is no spread)."""
    from planner.perf.laws import gamma_ppf  # scipy: imported where the model runs

    mean, var = np.asarray(mean, dtype=float), np.asarray(var, dtype=float)
    spread = (mean > 0) & (var > 0)
    safe_mean, safe_var = np.where(spread, mean, 1.0), np.where(spread, var, 1.0)
    return np.where(spread, gamma_ppf(percentile / 100, safe_mean**2 / safe_var, safe_var / safe_mean), mean)


def tails(x, s: StepTimes, running, osl, rho, decode, wait, ttft, tpot, queued, percentile, eff: Efficiency):
    """TTFT and TPOT at a percentile: the deterministic part + the Gamma quantile of the random part; and the
    slot wait's share of the TTFT quantile."""
    rate = x * (running - 1.0) / running  # the others' prompts per ms
    gap = np.maximum(1.0 - rho, 1e-300)
    busy = running > 1
    # TTFT: the step in progress (uniform over one step), the M/D/1 wait behind prompts, the wait for a slot (Erlang)
    step_mean, step_var = np.where(busy, decode / 2, 0.0), np.where(busy, decode**2 / 12, 0.0)
    md1_mean = wait - step_mean
    md1_var = np.where(busy, md1_mean**2 + eff.queue_factor * rate * s.delta**3 / (3 * gap), 0.0)
    slot_mean = np.where(queued > 0, queued / x, 0.0)
    slot_var = np.where(queued > 0, queued / x**2, 0.0)
    random_mean = step_mean + md1_mean + slot_mean
    random_at = gamma_quantile(random_mean, step_var + md1_var + slot_var, percentile)
    ttft_at = (ttft - wait) + random_at
    # the slot wait's share of the quantile, in proportion to its share of the mean
    slot_at = np.where(random_mean > 0, random_at * slot_mean / np.where(random_mean > 0, random_mean, 1.0), 0.0)
    # TPOT of one request: prompts fused into its OSL-1 decode steps, a branching count of mean m and variance m/(1-rho)^2
    steps = max(osl - 1, 1)
    fused = rate * steps * tpot
    tpot_at = decode + gamma_quantile(fused * s.delta / steps, fused / gap**2 * (s.delta / steps) ** 2, percentile)
    return ttft_at, tpot_at, slot_at
