"""The calibration as a report: one record per GPU generation (`calibration_entries`, `planner catalog
calibration`), and what user catalogs' benchmark rows do to it (docs/perf-model.md, "User catalogs and the engine
fit").

For every generation a user layer measured, `catalog_fit_effects` fits the engine factors twice: on the bottom
layer's rows alone (the shipped fit: what the planner uses without the user catalog) and on those rows with the
user's (the refit). It reports both, whether the rule of `planner.perf.calibration` (a layer asking with
`calibrate: generation`, OVERLAY_MIN_ROWS across OVERLAY_MIN_MODELS models) let the refit replace the shipped fit, and the median error of the bottom layer's rows
and of the user's own rows under each. `calibration_warnings` says it in the plan, naming the catalogs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.catalog import SHIPPED_LAYER, Catalog
from planner.perf.calibration import (
    ENGINE_PRIOR,
    _architectures,
    _engine_donor,
    base_layer_rows,
    calibration_rows,
    fit_architecture,
    fit_engine,
    kernel_efficiency,
    median_error,
    overlay_rows,
    overlay_shortfall,
)
from planner.perf.roofline import ENGINE_FACTORS, KERNEL_FACTORS

# a refit that makes the bottom layer's rows fit worse by more than this (median relative error) is a warning
WORSE_BY = 0.01
FACTOR_WORDS = {"step_overhead_ms": ("step overhead", " ms"), "ttft_overhead_ms": ("per-request overhead", " ms"),
                "queue_factor": ("queue factor", "")}  # fmt: skip


@dataclass(frozen=True)
class CatalogFitEffect:
    """User rows of one generation and what they do to its engine factors."""

    architecture: str
    base_layer: str  # 'shipped', or the bottom user catalog with `base: none`
    catalogs: tuple[tuple[str, int], ...]  # (user catalog, calibrating rows of this generation)
    models: tuple[str, ...]  # the models those rows measured
    applied: bool  # whether the refit is the generation's fit (the rule of planner.perf.calibration)
    shortfall: str | None  # why not, when not
    base_factors: dict  # engine factors without the user rows (the bottom layer's fit, or borrowed, or the prior)
    base_basis: str  # where base_factors come from, in words ('as its 14 shipped rows fit them')
    refit_factors: dict  # engine factors fitted with the user rows
    base_error_before: float | None  # median error of the bottom layer's rows of the generation, shipped fit
    base_error_after: float | None  # ... under the refit
    own_error_before: float | None  # median error of the user rows under the shipped factors
    own_error_after: float | None  # ... under the refit

    @property
    def rows(self) -> int:
        return sum(n for _, n in self.catalogs)

    @property
    def base_fit_worse(self) -> bool:
        """The refit fits the bottom layer's rows worse by more than WORSE_BY."""
        before, after = self.base_error_before, self.base_error_after
        return before is not None and after is not None and after - before > WORSE_BY

    def record(self) -> dict:
        """A plain record (`planner catalog calibration --json`)."""
        return {
            "catalogs": dict(self.catalogs), "models": list(self.models), "refit_applied": self.applied,
            "why_not": self.shortfall, "base_layer": self.base_layer, "base_factors": self.base_factors,
            "refit_factors": self.refit_factors,
            "base_rows_median_error": {"before": _round(self.base_error_before), "after": _round(self.base_error_after)},
            "own_rows_median_error": {"before": _round(self.own_error_before), "after": _round(self.own_error_after)},
            "note": self.sentence(),
        }  # fmt: skip

    def sentence(self) -> str:
        """The plan's warning: which catalogs, what moved (or would have), the errors before and after."""
        names = ", ".join(f"'{name}'" for name, _ in self.catalogs)
        counts = " + ".join(str(n) for _, n in self.catalogs)
        models = self.models[0] if len(self.models) == 1 else f"{len(self.models)} models"
        who = f"catalog{'s' if len(self.catalogs) > 1 else ''} {names} ({counts} {self.architecture} rows of {models})"
        base = f"the {_layer(self.base_layer)} rows"
        if self.applied:
            what = "engine factors" + (f" and fit {base} worse" if self.base_fit_worse else "")
            errors = [] if self.base_error_before is None else [
                f"of {base} {_pct(self.base_error_before)} -> {_pct(self.base_error_after)}"]
            errors.append(f"of its own rows {_pct(self.own_error_before)} -> {_pct(self.own_error_after)}")
            return (f"{who} moved {self.architecture}'s {what}: {_changes(self.base_factors, self.refit_factors)}; "
                    f"median error {', '.join(errors)}")  # fmt: skip
        base_then = (f" and {base}' median error at {_pct(self.base_error_after)} (now {_pct(self.base_error_before)})"
                     if self.base_error_before is not None else "")  # fmt: skip
        return (
            f"{who} did not move {self.architecture}'s engine factors ({self.shortfall}): they stay {self.base_basis}; "
            f"the rows answer and anchor only the engines they measured. Their median error under those factors: "
            f"{_pct(self.own_error_before)}; a refit on them would {_changes(self.base_factors, self.refit_factors, True)}"
            f"{base_then}"
        )  # fmt: skip


def catalog_fit_effects(catalog: Catalog, architectures: Iterable[str] | None = None) -> list[CatalogFitEffect]:
    """One record per generation (of `architectures`, default all) that a user layer has calibrating rows of."""
    out = []
    for architecture in sorted(set(architectures) if architectures is not None else _architectures(catalog)):
        key = ("catalog fit effect", architecture)
        if key not in catalog.derived:
            catalog.derived[key] = _effect(catalog, architecture)
        if catalog.derived[key] is not None:
            out.append(catalog.derived[key])
    return out


def _effect(catalog: Catalog, architecture: str) -> CatalogFitEffect | None:
    rows = calibration_rows(catalog, architecture)
    user, base = overlay_rows(catalog, rows), base_layer_rows(catalog, rows)
    if not user:
        return None
    kernel, _, _ = kernel_efficiency(catalog, architecture)
    base_fit = fit_engine(catalog, architecture, kernel, rows=base)
    donor = None if base_fit is not None else _engine_donor(catalog, architecture, frozenset())
    if base_fit is not None:
        base_factors, basis = base_fit.factors, f"as its {len(base)} {_layer(catalog.layers[0])} rows fit them"
    elif donor is not None:
        base_factors = donor.factors
        basis = f"borrowed from {donor.architecture}'s fit to its {len(donor.rows_used)} {_layer(catalog.layers[0])} rows"
    else:
        base_factors, basis = {name: ENGINE_PRIOR[name][0] for name in ENGINE_FACTORS}, "at their prior"
    asking = [row for row in user if row.origin in catalog.generation_layers]
    # the refit engine_fit_rows applies (the asking layers' rows), or would apply if they all asked
    refit = fit_engine(catalog, architecture, kernel, rows=base + (asking or user))
    before, after = _with(kernel, base_factors), _with(kernel, refit.factors)
    counts: dict[str, int] = {}
    for row in user:
        counts[row.origin] = counts.get(row.origin, 0) + 1
    shortfall = (overlay_shortfall(asking) if asking else
                 "they calibrate the engines they measured; `calibrate: generation` in the catalog's catalog.yaml "
                 "lets them refit the generation")  # fmt: skip
    return CatalogFitEffect(
        architecture=architecture, base_layer=catalog.layers[0],
        catalogs=tuple(sorted(counts.items())), models=tuple(sorted({row.model for row in user})),
        applied=shortfall is None, shortfall=shortfall, base_factors=base_factors, base_basis=basis,
        refit_factors=refit.factors,
        base_error_before=median_error(base, before, catalog), base_error_after=median_error(base, after, catalog),
        own_error_before=median_error(user, before, catalog), own_error_after=median_error(user, after, catalog),
    )  # fmt: skip


def calibration_warnings(catalog: Catalog, architectures: Iterable[str]) -> tuple[str, ...]:
    """The plan's sentences on user catalogs' rows of the generations it may run on."""
    return tuple(effect.sentence() for effect in catalog_fit_effects(catalog, architectures))


def _with(kernel, factors: dict):
    import dataclasses

    return dataclasses.replace(kernel, **{name: factors[name] for name in ENGINE_FACTORS})


def _changes(before: dict, after: dict, conditional: bool = False) -> str:
    """'per-request overhead 14.7 -> 141 ms, ...' for the factors that moved by more than 1%."""
    parts = []
    for name in ENGINE_FACTORS:
        old, new = before[name], after[name]
        if abs(new - old) > 0.01 * max(abs(old), abs(new), 1e-9) and abs(new - old) > 1e-3:
            words, unit = FACTOR_WORDS[name]
            parts.append(f"{words} at {new:.3g}{unit} (now {old:.3g})" if conditional else f"{words} {old:.3g} -> {new:.3g}{unit}")
    if not parts:
        return "move no factor by more than 1%" if conditional else "no factor by more than 1%"
    return ("put " if conditional else "") + ", ".join(parts)


def _layer(name: str) -> str:
    return name if name == SHIPPED_LAYER else f"'{name}'"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def calibration_entries(catalog: Catalog) -> list[dict]:
    """One record per GPU generation of the catalog: the fitted factors, what they rest on and how well they fit
    (`planner catalog calibration`), with what user catalogs' rows did to it (`catalog_fit_effects`)."""
    effects = {effect.architecture: effect for effect in catalog_fit_effects(catalog)}
    entries = []
    for architecture in _architectures(catalog):
        fit = fit_architecture(catalog, architecture)
        kernel, engine = fit.kernel, fit.engine
        entries.append({
            "architecture": architecture, "basis": fit.efficiency.basis,
            "kernel_iterations": kernel.iterations if kernel else 0,
            "kernel_median_error": None if kernel is None else round(kernel.median_abs_rel_error, 4),
            "kernel_worst_error": None if kernel is None else round(kernel.worst_abs_rel_error, 4),
            "engine_rows": len(engine.rows_used) if engine else 0,
            "engine_median_error": None if engine is None else round(engine.median_abs_rel_error, 4),
            "engine_rows_by_catalog": dict(engine.origins) if engine else {},
            "user_catalogs": effects[architecture].record() if architecture in effects else None,
            "factors": {
                name: getattr(fit.efficiency, name) for name in (*KERNEL_FACTORS, *ENGINE_FACTORS)
                if kernel is None or name in kernel.fitted or name in ENGINE_FACTORS
            },
            "calibrated_range": None if kernel is None else {
                "max_tp": kernel.max_tp, "precisions": list(kernel.precisions), "max_prompt_tokens": kernel.max_prompt_tokens,
                "mixture_of_experts": kernel.mixture_of_experts,
            },
            "source": fit.efficiency.source,
        })  # fmt: skip
    return entries
