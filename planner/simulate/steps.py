"""Step times of one engine iteration, as tables the simulator reads in O(1).

An iteration decodes one token for each running sequence and prefills chunks of prompts. Its time is

    iteration_ms = decode_ms(b, mean context)                  if b sequences decode (fixed latencies included)
                 + sum over chunks [F(end) - F(start)]           what prompt tokens start..end add to the step
    or, when nothing decodes,
    iteration_ms = prefill_base_ms + W(end) - W(start)           the first chunk alone (it reads the weights)
                 + sum over the other chunks [F(end) - F(start)]

`W(m)` is the work of prefilling an m-token prompt alone, `F(m)` what it adds to a step that already runs (the
performance model's Delta: its FLOPs at the compute-bound rate, causal attention included, the weights already
read), both cumulative so that the chunks of one prompt add up to the whole prompt (later chunks attend to more
tokens and cost more). These are the roofline's own costs (planner/perf/roofline.py), so the simulator's steps
are the steady state's. The roofline's decode time is linear in the context at a fixed batch (the KV read term),
so `decode_ms = base[b] + slope[b] x context` is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from planner.perf.point_engine import PointSteps  # noqa: F401 (a model without an architecture: its steps, shared with the open loop)
from planner.perf.roofline import COMPUTE_BOUND_TOKENS, Efficiency, EngineShape, fixed_ms, step_ms

PROMPT_GRID_TOKENS = 16  # W is tabulated every 16 tokens and interpolated between


@dataclass(frozen=True)
class FixedSteps:
    """Step times a + b x prompt tokens (prefill) and c + d x batch (decode): for tests and the notebook's toy."""

    prefill_base_ms: float
    prefill_per_token_ms: float
    decode_base_ms: float
    decode_per_sequence_ms: float = 0.0

    def prefill_ms(self, isls: list[int]) -> float:
        return self.prefill_base_ms + self.prefill_per_token_ms * sum(isls)

    def prompt_work_ms(self, tokens: float) -> float:
        return self.prefill_per_token_ms * tokens

    fused_work_ms = prompt_work_ms  # linear work: a prompt adds the same beside decoders as alone

    def decode_ms(self, batch: int, mean_context: float) -> float:
        return self.decode_base_ms + self.decode_per_sequence_ms * batch


@dataclass
class RooflineSteps:
    """Step times of the calibrated roofline (planner/perf/roofline.py) for one engine shape, times `scale`
    (1 for modeled engines; fitted to a measured point otherwise). Tables are built on first use up to
    `max_batch` sequences and `max_prompt_tokens`; beyond them they grow."""

    shape: EngineShape
    efficiency: Efficiency
    scale: float = 1.0
    _decode_base: list = field(default_factory=list, repr=False)
    _decode_slope: list = field(default_factory=list, repr=False)
    _work: list = field(default_factory=list, repr=False)
    _fused: list = field(default_factory=list, repr=False)

    @property
    def prefill_base_ms(self) -> float:
        return float(fixed_ms(self.shape, self.efficiency)) * self.scale

    def _grow_decode(self, batch: int) -> None:
        size = max(2 * len(self._decode_base), batch + 1, 64)
        batches = np.arange(size, dtype=float)
        base = step_ms(self.shape, self.efficiency, batches, 0.0) * self.scale
        slope = (step_ms(self.shape, self.efficiency, batches, 1000.0) * self.scale - base) / 1000.0
        self._decode_base, self._decode_slope = base.tolist(), slope.tolist()

    def _grow_work(self, tokens: float) -> None:
        points = max(2 * len(self._work), int(tokens // PROMPT_GRID_TOKENS) + 2, 256)
        lengths = np.arange(points, dtype=float) * PROMPT_GRID_TOKENS
        overhead = float(fixed_ms(self.shape, self.efficiency))
        work = (step_ms(self.shape, self.efficiency, 0.0, 0.0, 1.0, lengths) - overhead) * self.scale
        work[0] = 0.0
        self._work = np.maximum.accumulate(work).tolist()  # cumulative work never decreases
        # beside a compute-bound step (the steady state's Delta): the prompt's FLOPs, the weights already read
        busy = COMPUTE_BOUND_TOKENS
        fused = (step_ms(self.shape, self.efficiency, busy, 0.0, 1.0, lengths)
                 - step_ms(self.shape, self.efficiency, busy, 0.0, 0.0, 0.0)) * self.scale  # fmt: skip
        fused[0] = 0.0
        self._fused = np.maximum.accumulate(fused).tolist()

    def decode_ms(self, batch: int, mean_context: float) -> float:
        if batch >= len(self._decode_base):
            self._grow_decode(batch)
        return self._decode_base[batch] + self._decode_slope[batch] * mean_context

    def prompt_work_ms(self, tokens: float) -> float:
        """W: the first `tokens` of a prompt prefilled alone."""
        return self._interpolate(tokens, False)

    def fused_work_ms(self, tokens: float) -> float:
        """F: what the first `tokens` of a prompt add to a step that runs anyway."""
        return self._interpolate(tokens, True)

    def _interpolate(self, tokens: float, fused: bool) -> float:
        position = tokens / PROMPT_GRID_TOKENS
        low = int(position)
        if low + 1 >= len(self._work):
            self._grow_work(tokens)
        w = self._fused if fused else self._work
        return w[low] + (w[low + 1] - w[low]) * (position - low)

    def prefill_ms(self, isls: list[int]) -> float:
        """Prompts prefilled together in one iteration with nothing decoding (the v1 engine's call)."""
        return self.prefill_base_ms + sum(self.prompt_work_ms(isl) for isl in isls)

    def scaled(self, scale: float) -> RooflineSteps:
        return RooflineSteps(self.shape, self.efficiency, self.scale * scale)


def saturated_rps(steps, batch: int, isl: float, osl: float) -> float:
    """Requests/s of an engine kept full at `batch` sequences of isl/osl tokens, in closed form.

    Each request needs its prompt's work F(isl) beside the decoders and OSL decode iterations (its first token comes
    with the prefill); with `batch` sequences always running, an iteration decodes `batch` tokens and carries
    batch / OSL prompts' work, so a request's time in the engine is OSL x decode_ms(batch, isl + OSL / 2) +
    batch x F(isl) and

        X = batch / (OSL x decode_ms(batch, isl + OSL/2) + batch x F(isl))    [requests per ms]
    """
    e2e_ms = osl * steps.decode_ms(batch, isl + osl / 2) + batch * steps.fused_work_ms(isl)
    return batch / e2e_ms * 1e3 if e2e_ms > 0 else math.inf
