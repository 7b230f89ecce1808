"""Anchoring the roofline on benchmark rows: exact at the rows, the model's shape between, fading away from them.

For one engine (model, GPU, TP, precision) the rows are grouped by their lengths (ISL, OSL). Per group g and metric
(TTFT, ITL) a row curve R_g(c) over concurrency runs through the rows' values; between two rows it follows the
roofline's own progress m_g(c) (so that a knee the model knows, the KV cache filling up, shows between rows):

    ln R_g(c) = ln v_k + s (ln v_k+1 - ln v_k),   s = (ln m_g(c) - ln m_g(c_k)) / (ln m_g(c_k+1) - ln m_g(c_k))

and beyond the first or last row it is the model times that row's ratio to it (the curve keeps its shape and never
jumps where the data ends). At the query's lengths L the corrected value is a weighted geometric mean

    x(c) = m_L(c)^(1 - sum b_g) x prod_g (kappa_g R_g(c))^b_g

with kappa_g = m_L / m_g at the rows' middle concurrency (the level moved from g's lengths to L) and weights
b_g = max_h w_h x phi_g / sum_h phi_h, w_g = exp(-d_g^2 / 2) over d_g = |ln L - ln g| / ln 4, phi_g = w_g / (1 - w_g):
b_g = 1 at the rows' own lengths (exact), a third of the way at 4x away, nothing far away. Every factor rises with
concurrency and every exponent is >= 0, so where the rows and the model rise with concurrency, so does x.
Only measurements anchor. Estimates (aic tables) do not: the roofline is calibrated on aiconfigurator's kernel
database itself, and anchoring it on the package's aggregated estimates made it worse on the measured
max-throughput rows (median error 3.4% -> 12%, worst 5% -> 44%: the estimates' TTFT carries the package's queueing
heuristic and their TPOT its own scheduling). A row that records only throughput (a max-throughput run) anchors
ITL at the model's best point, scaled so that the throughput matches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.catalog import BenchmarkRow, Catalog
from planner.perf.roofline import Efficiency, EngineShape, concurrency_ladder, steady_state_curve

LENGTH_SCALE = math.log(4.0)
METRICS = ("ttft_ms", "itl_ms")


@dataclass(frozen=True)
class RowGroup:
    """The rows of one engine at one (ISL, OSL): per metric, sorted concurrencies and values."""

    isl: int
    osl: int
    capacity: int
    points: dict  # metric -> (concurrencies, values) as tuples
    citations: tuple[str, ...]


@dataclass(frozen=True)
class AnchorSet:
    """Everything needed to correct one engine's curves; built once per catalog and engine."""

    groups: tuple[RowGroup, ...]

    def describe(self) -> str:
        """'anchored on N rows: <source> (<table>); ...', one entry per source and table."""
        citations = sorted({c for g in self.groups for c in g.citations})
        sources = dict.fromkeys(c.rsplit(" line ", 1)[0] + ")" for c in citations)
        return f"anchored on {len(citations)} rows: {'; '.join(sources)}"

    def correct(self, shape: EngineShape, eff: Efficiency, isl: int, osl: int, capacity, ladder, model: dict) -> dict:
        """Corrected TTFT and ITL over `ladder` at (isl, osl) on an engine of KV `capacity`; `model` holds the
        roofline's means there."""
        ladder = np.asarray(ladder, dtype=float)
        distance = np.array([math.hypot(math.log(isl / g.isl), math.log(osl / g.osl)) / LENGTH_SCALE for g in self.groups])
        closeness = np.exp(-0.5 * distance**2)
        exact = distance < 1e-12
        phi = np.where(exact, 1.0, closeness / np.maximum(1.0 - closeness, 1e-300))
        weights = np.where(exact, 1.0, 0.0) if exact.any() else closeness.max() * phi / phi.sum()
        out = {}
        for metric in METRICS:
            log_x = np.log(model[metric])
            total = 0.0
            blended = np.zeros_like(ladder)
            for group, weight in zip(self.groups, weights):
                if metric not in group.points or weight <= 0:
                    continue
                row_curve, kappa = self._row_curve(shape, eff, group, metric, ladder, isl, osl, capacity)
                blended += weight * (np.log(kappa) + row_curve)
                total += weight
            out[metric] = np.exp((1.0 - total) * log_x + blended) if total else np.asarray(model[metric], dtype=float)
        return out

    @staticmethod
    def _row_curve(shape, eff, group: RowGroup, metric: str, ladder: np.ndarray, isl: int, osl: int, capacity):
        """ln R_g over the ladder, and kappa_g (see the module docstring)."""
        rows_c, rows_v = (np.asarray(v, dtype=float) for v in group.points[metric])
        middle = float(np.exp(np.log(rows_c).mean()))
        wanted = np.concatenate([ladder, rows_c, [middle]])
        states = steady_state_curve(shape, eff, group.isl, group.osl, np.maximum(np.round(wanted), 1), group.capacity)
        m = np.log([getattr(s, metric) for s in states])
        m_ladder, m_rows, m_middle = m[: len(ladder)], m[len(ladder): -1], m[-1]
        log_v = np.log(rows_v)
        curve = np.empty_like(ladder)
        for i, c in enumerate(ladder):
            k = int(np.searchsorted(rows_c, c, side="right")) - 1
            if k < 0:
                curve[i] = m_ladder[i] + log_v[0] - m_rows[0]
            elif k >= len(rows_c) - 1:
                curve[i] = m_ladder[i] + log_v[-1] - m_rows[-1]
            else:
                span = m_rows[k + 1] - m_rows[k]
                s = (m_ladder[i] - m_rows[k]) / span if abs(span) > 1e-9 else math.log(c / rows_c[k]) / math.log(rows_c[k + 1] / rows_c[k])
                curve[i] = log_v[k] + min(max(s, 0.0), 1.0) * (log_v[k + 1] - log_v[k])
        if (isl, osl) == (group.isl, group.osl):
            return curve, 1.0
        here = steady_state_curve(shape, eff, isl, osl, [max(round(middle), 1)], capacity)[0]
        return curve, float(np.exp(math.log(getattr(here, metric)) - m_middle))


def anchor_rows(catalog: Catalog, shape: EngineShape) -> list[BenchmarkRow]:
    """Measured rows of this engine that state their lengths, per instance."""
    from planner.perf.tables import rows_for

    return [
        r for r in rows_for(catalog, shape.model.id, shape.gpu.id)
        if r.is_measurement and r.tp == shape.tp and r.precision == shape.precision and r.isl is not None and r.osl is not None
        and r.run_kind in ("online", "max-throughput") and r.per == "instance" and r.gpus == shape.tp
    ]  # fmt: skip


def build_anchors(catalog: Catalog, shape: EngineShape, eff: Efficiency, capacity_of) -> AnchorSet | None:
    """The anchor set of one engine from its rows; None without rows. `capacity_of(isl, osl)` is the KV capacity
    an engine built for those lengths has (None where it does not fit)."""
    groups = []
    for (isl, osl), rows in _by_lengths(anchor_rows(catalog, shape)).items():
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
                points["itl_ms"].setdefault(float(best.concurrency), best.itl_ms * best.request_throughput_rps / rps)
        kept = {m: (tuple(sorted(v)), tuple(v[c] for c in sorted(v))) for m, v in points.items() if v}
        if kept:
            groups.append(RowGroup(isl, osl, capacity, kept, tuple(r.citation for r in rows)))
    return AnchorSet(tuple(groups)) if groups else None


def _by_lengths(rows: list[BenchmarkRow]) -> dict[tuple[int, int], list[BenchmarkRow]]:
    groups: dict[tuple[int, int], list[BenchmarkRow]] = {}
    for row in rows:
        groups.setdefault((row.isl, row.osl), []).append(row)
    return {k: groups[k] for k in sorted(groups)}
