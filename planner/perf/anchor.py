"""Anchoring the roofline on benchmark rows: exact at the rows, the model's shape between, fading away from them.

For one engine (model, GPU, TP, precision) the rows are grouped by their lengths (ISL, OSL). Per group g and metric
(TTFT, TPOT) a row curve R_g(c) over concurrency runs through the rows' values; between two rows it follows the
roofline's own progress m_g(c) (so that a knee the model knows, the KV cache filling up, shows between rows):

    ln R_g(c) = ln v_k + s (ln v_k+1 - ln v_k),   s = (ln m_g(c) - ln m_g(c_k)) / (ln m_g(c_k+1) - ln m_g(c_k))

Its ratio to the model, R_g / m_g, is held at the first or last row's beyond them (the curve keeps the model's shape
and never jumps where the data ends). At the query's lengths L the correction is a weighted mean of the log ratios:

    x(c) = m_L(c) x exp(sum_g b_g ln(R_g(c) / m_g(c)))

with b_g = max_h w_h x phi_g / sum_h phi_h, w_g = exp(-d_g^2 / 2) over d_g = |ln L - ln g| / ln 4 and
phi_g = w_g / (1 - w_g): b_g = 1 at the rows' own lengths (exact: x = R_g, rising where the rows rise), a third of
the way at 4x away, nothing far away. The correction runs over the running batch, so beyond the KV capacity it
stays put.
Only measurements anchor. Estimates (aic tables) do not: the roofline is calibrated on aiconfigurator's kernel
database itself, and anchoring it on the package's aggregated estimates made it worse on the measured
max-throughput rows (median error 3.4% -> 12%, worst 5% -> 44%: the estimates' TTFT carries the package's queueing
heuristic and their TPOT its own scheduling). Rows of a statistic other than the mean (a run's p99) are compared
with the model at that percentile. A row that records only throughput (a max-throughput run) anchors
TPOT at the model's best point, scaled so that the throughput matches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.catalog import BenchmarkRow, Catalog
from planner.metrics import statistic_percentile
from planner.perf.roofline import Efficiency, EngineShape, concurrency_ladder, steady_state_curve
from planner.perf.serving import DEFAULT_ENGINE
from planner.perf.tables import rows_for

LENGTH_SCALE = math.log(4.0)
METRICS = ("ttft_ms", "tpot_ms")


@dataclass(frozen=True)
class RowGroup:
    """The rows of one engine at one (ISL, OSL): per metric, sorted concurrencies and values."""

    isl: int
    osl: int
    capacity: int
    points: dict  # metric -> (concurrencies, values) as tuples
    citations: tuple[str, ...]
    percentile: float | None = None  # the rows' statistic (None: means): the model is compared at it


@dataclass(frozen=True)
class AnchorSet:
    """Everything needed to correct one engine's curves; built once per catalog and engine."""

    groups: tuple[RowGroup, ...]

    def describe(self) -> str:
        """'anchored on N rows: <source> (<table>); ...', one entry per source and table."""
        citations = sorted({c for g in self.groups for c in g.citations})
        sources = dict.fromkeys(c.rsplit(" line ", 1)[0] + ")" for c in citations)
        return f"anchored on {len(citations)} rows: {'; '.join(sources)}"

    def correct(self, shape: EngineShape, eff: Efficiency, isl: int, osl: int, ladder, model: dict) -> dict:
        """Corrected TTFT and TPOT over `ladder` (running batches) at (isl, osl); `model` holds the roofline's means
        there."""
        factors = self.factors(shape, eff, isl, osl, ladder)
        return {metric: np.asarray(model[metric], dtype=float) * factors[metric] for metric in METRICS}

    def factors(self, shape: EngineShape, eff: Efficiency, isl: int, osl: int, ladder) -> dict:
        """The rows' ratio to the model, exp(sum_g b_g ln(R_g / m_g)), of TTFT and TPOT over `ladder` (running
        batches) at (isl, osl): what `correct` multiplies the model's means by, and what an open-loop point scales
        the engine's step by (prompt work by the TTFT factor, the rest by the TPOT factor: planner/perf/layers.py)."""
        ladder = np.asarray(ladder, dtype=float)
        distance = np.array([math.hypot(math.log(isl / g.isl), math.log(osl / g.osl)) / LENGTH_SCALE for g in self.groups])
        closeness = np.exp(-0.5 * distance**2)
        exact = distance < 1e-12
        phi = closeness / np.maximum(1.0 - closeness, 1e-300)
        weights = exact / exact.sum() if exact.any() else closeness.max() * phi / phi.sum()  # several statistics: their mean
        out = {}
        for metric in METRICS:
            log_ratio = np.zeros_like(ladder)
            for group, weight in zip(self.groups, weights):
                if metric in group.points and weight > 0:
                    log_ratio += weight * self._log_ratio(shape, eff, group, metric, ladder)
            out[metric] = np.exp(log_ratio)
        return out

    @staticmethod
    def _log_ratio(shape, eff, group: RowGroup, metric: str, ladder: np.ndarray) -> np.ndarray:
        """ln (R_g / m_g) over the ladder, held constant outside the rows' concurrencies (module docstring)."""
        rows_c, rows_v = (np.asarray(v, dtype=float) for v in group.points[metric])
        at = np.clip(ladder, rows_c[0], rows_c[-1])
        wanted = np.concatenate([at, rows_c])
        states = steady_state_curve(shape, eff, group.isl, group.osl, np.maximum(np.round(wanted), 1), group.capacity,
                                    group.percentile)  # fmt: skip
        m = np.log([getattr(s, metric) for s in states])
        m_at, m_rows = m[: len(at)], m[len(at):]
        log_v = np.log(rows_v)
        ratio = np.empty_like(at)
        for i, c in enumerate(at):
            k = min(int(np.searchsorted(rows_c, c, side="right")) - 1, len(rows_c) - 1)
            if k == len(rows_c) - 1:
                ratio[i] = log_v[k] - m_rows[k]
                continue
            span = m_rows[k + 1] - m_rows[k]
            s = (m_at[i] - m_rows[k]) / span if abs(span) > 1e-9 else math.log(c / rows_c[k]) / math.log(rows_c[k + 1] / rows_c[k])
            ratio[i] = log_v[k] + min(max(s, 0.0), 1.0) * (log_v[k + 1] - log_v[k]) - m_at[i]
        return ratio


def anchor_rows(catalog: Catalog, shape: EngineShape, engine: str = DEFAULT_ENGINE) -> list[BenchmarkRow]:
    """Measured rows of this engine (of the serving `engine`) that state their lengths, per instance. A
    request-rate run counts at its mean in flight (Little's law): the same relation of throughput, latency and
    concurrency as a closed loop's."""
    return [
        r for r in rows_for(catalog, shape.model.id, shape.gpu.id, engine)
        if r.is_measurement and r.tp == shape.tp and r.precision == shape.precision and r.isl is not None and r.osl is not None
        and r.run_kind in ("online", "max-throughput", "request-rate") and r.per == "instance" and r.gpus == shape.tp
    ]  # fmt: skip


def build_anchors(catalog: Catalog, shape: EngineShape, eff: Efficiency, capacity_of, engine: str = DEFAULT_ENGINE) -> AnchorSet | None:
    """The anchor set of one engine from its rows; None without rows. `capacity_of(isl, osl)` is the KV capacity
    an engine built for those lengths has (None where it does not fit)."""
    groups = []
    for (isl, osl, statistic), rows in _by_lengths(anchor_rows(catalog, shape, engine)).items():
        capacity = capacity_of(isl, osl)
        if not capacity:
            continue
        points: dict[str, dict[float, float]] = {m: {} for m in METRICS}
        best = None
        for row in rows:
            if row.concurrency:
                for metric in METRICS:
                    value = getattr(row, metric)
                    if value:
                        points[metric].setdefault(float(row.concurrency), value)
                continue
            rps = row.request_throughput_rps or (row.output_tokens_per_s / row.osl if row.output_tokens_per_s else None)
            if rps:  # a max-throughput row: ITL at the model's best point, scaled to the row's throughput
                if best is None:
                    curve = steady_state_curve(shape, eff, isl, osl, concurrency_ladder(capacity), capacity)
                    best = max(curve, key=lambda p: p.request_throughput_rps)
                points["tpot_ms"].setdefault(float(best.concurrency), best.tpot_ms * best.request_throughput_rps / rps)
        kept = {m: (tuple(sorted(v)), tuple(v[c] for c in sorted(v))) for m, v in points.items() if v}
        if kept:
            groups.append(RowGroup(isl, osl, capacity, kept, tuple(r.citation for r in rows), statistic_percentile(statistic)))
    return AnchorSet(tuple(groups)) if groups else None


def _by_lengths(rows: list[BenchmarkRow]) -> dict[tuple[int, int, str], list[BenchmarkRow]]:
    """Rows by lengths and statistic (a run's p99 and its mean anchor apart, each against the model at it)."""
    groups: dict[tuple[int, int, str], list[BenchmarkRow]] = {}
    for row in rows:
        groups.setdefault((row.isl, row.osl, row.statistic), []).append(row)
    return {k: groups[k] for k in sorted(groups)}
