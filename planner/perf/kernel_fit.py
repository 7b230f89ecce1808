"""Calibration, stage 1: the roofline's kernel factors of one GPU generation (bandwidth, GEMM and attention
efficiencies, link, fixed latencies), by least squares on the log error of every timed engine iteration of the
generation in the catalog's step tables (`calibration/*.csv`: aiconfigurator's kernel database, measured with
TensorRT-LLM on each GPU; users may add their own). Stage 2, the engine factors, and how a generation borrows what
it lacks: planner/perf/calibration.py."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.catalog import Catalog, compute_precision
from planner.perf.roofline import (
    KERNEL_FACTORS,
    MOE_FACTORS,
    MOE_GEMM_FACTORS,
    Efficiency,
    EngineShape,
    ShapeBatch,
    kv_bytes_for,
    step_ms,
    supports_roofline,
)


FITS: dict = {}  # kernel and engine fits of this process, by content key


def rounded(value: float) -> float:
    """Four significant digits; what the bounds' zero converged to is zero."""
    return 0.0 if abs(value) < 1e-6 else float(f"{value:.4g}")


# Bounds and starting points of the kernel factors (fractions of peak; latencies in us; sharpness k of smoothmax)
KERNEL_BOUNDS = {
    "bandwidth": (0.3, 1.0, 0.8), "kv_bandwidth": (0.3, 1.0, 0.8), "gemm_bf16": (0.1, 1.0, 0.6),
    "gemm_fp8": (0.1, 1.0, 0.6), "gemm_fp4": (0.1, 1.0, 0.6), "gemm_depth_half": (0.0, 20000.0, 1000.0),
    "attention_bf16": (0.05, 1.5, 0.5), "attention_fp8": (0.05, 1.5, 0.5), "link": (0.01, 1.0, 0.7),
    "allreduce_latency_us": (0.0, 100.0, 5.0), "layer_latency_bf16_us": (0.0, 500.0, 20.0),
    "layer_latency_fp8_us": (0.0, 500.0, 20.0), "layer_latency_fp4_us": (0.0, 500.0, 20.0), "sharpness": (1.0, 30.0, 4.0),
    "moe_gemm_bf16": (0.05, 1.5, 0.6), "moe_gemm_fp8": (0.05, 1.5, 0.6), "moe_gemm_fp4": (0.05, 1.5, 0.6), "moe_bandwidth": (0.2, 1.5, 0.9), "moe_layer_latency_us": (0.0, 500.0, 20.0),
}  # fmt: skip


PRECISION_FACTORS = {"fp8": ("gemm_fp8", "layer_latency_fp8_us"), "fp4": ("gemm_fp4", "layer_latency_fp4_us")}


PRIOR = Efficiency(
    bandwidth=3.03 / 3.35, kv_bandwidth=3.03 / 3.35, gemm_bf16=787 / 989, gemm_fp8=1436 / 1979, gemm_fp4=0.7,
    gemm_depth_half=0.0, attention_bf16=0.5, attention_fp8=0.5, link=0.8, allreduce_latency_us=5.0,
    layer_latency_bf16_us=0.0, layer_latency_fp8_us=0.0, layer_latency_fp4_us=0.0, sharpness=4.0,
    source="prior: H100 microbenchmarks of shared/reference/hardware.md (GEMM 80%/73%, copy 90%); nothing to fit",
    basis="extrapolated",
)  # fmt: skip


@dataclass(frozen=True)
class KernelFit:
    architecture: str
    factors: dict  # kernel factor -> value
    iterations: int
    median_abs_rel_error: float  # of the dense iterations (all of them where only mixtures of experts were timed)
    worst_abs_rel_error: float
    tables: tuple[str, ...]
    max_tp: dict  # link (nvlink, pcie) -> the largest TP timed over it
    precisions: tuple[str, ...]
    max_prompt_tokens: int
    mixture_of_experts: bool  # whether any timed model routes to experts
    labels: tuple[str, ...]  # the rows' provenance labels (aic:... for aiconfigurator's kernel database)
    fitted: tuple[str, ...]  # the factors the data determined (the others keep their starting value, unused)
    max_dp: int = 1  # the most attention-DP ranks timed
    max_ep: int = 1  # the most GPUs experts were spread over (expert parallelism)
    moe_iterations: int = 0  # of `iterations`, those of mixtures of experts (they fit the grouped-GEMM factors)
    moe_median_abs_rel_error: float | None = None  # and their median error (the median above is the dense one's)

    @property
    def basis(self) -> str:
        return "aic kernels" if self.labels and all(label.startswith("aic:") for label in self.labels) else "timed kernels"

    def outside(self, tp: int, link: str, precision: str, isl: int, moe: bool) -> str | None:
        """Why a query lies beyond what the timed iterations cover, or None."""
        timed = self.max_tp.get(link, 1)
        if tp > timed:
            return f"TP{tp} beyond the timed TP{timed} over {link}"
        if precision not in self.precisions and not (precision == "fp16" and "bf16" in self.precisions):
            return f"{precision} not timed"
        if isl > self.max_prompt_tokens:
            return f"a {isl}-token prompt beyond the longest timed ({self.max_prompt_tokens})"
        if moe and not self.mixture_of_experts:
            return "no mixture-of-experts model timed"
        return None


def _kernel_frame(catalog: Catalog, architecture: str):
    """The timed iterations of one generation (of models the roofline runs) as one frame, None without any."""
    timed = {(gpu, model) for table in catalog.steps for gpu, model in zip(table.columns["gpu"], table.columns["model"])}
    if not any(catalog.gpus[gpu].architecture == architecture and supports_roofline(catalog.models[model])
               for gpu, model in timed):  # fmt: skip
        return None  # said without pandas, slow to import (0.17 s of a plan on a generation none timed: AMD's)
    import pandas as pd

    frames = [t.frame.assign(table=Path(t.path).name) for t in catalog.steps]
    if not frames:
        return None
    frame = pd.concat(frames, ignore_index=True)
    frame = frame[frame["gpu"].map(lambda g: catalog.gpus[g].architecture) == architecture]
    frame = frame[frame["model"].map(lambda m: supports_roofline(catalog.models[m]))]
    return frame if len(frame) else None


def _kernel_free(precisions: set[str]) -> list[str]:
    """The kernel factors the data can determine: a precision's own factors only where it was timed."""
    absent = {name for precision, names in PRECISION_FACTORS.items() if precision not in precisions for name in names}
    if not {"fp8", "fp4"} & precisions:
        absent.add("attention_fp8")
    if not {"bf16", "fp16"} & precisions:
        absent.add("attention_bf16")
    return [name for name in KERNEL_FACTORS if name not in absent]


def fit_kernels(catalog: Catalog, architecture: str) -> KernelFit | None:
    """Stage 1: the kernel factors of one generation, fitted to its timed iterations; None without any."""
    key = ("kernel fit", architecture)
    if key not in catalog.derived:
        from planner.perf.fit_cache import cached_dataclass  # kept on disk: a what-if pricing new curves fits none

        catalog.derived[key] = cached_dataclass(catalog, key, KernelFit, lambda: _fit_kernels(catalog, architecture),
                                                lambda fit: _plausible_fit(fit, architecture))  # fmt: skip
    return catalog.derived[key]


def _plausible_fit(fit: KernelFit, architecture: str) -> bool:
    """A kept fit read back (untrusted input): its generation's, every factor a known one, a number, not negative
    (finite: `cached_dataclass` checks), every link's TP a positive whole number."""
    return (fit.architecture == architecture and set(fit.factors) == set(KERNEL_FACTORS)
            and all(type(v) in (int, float) and v >= 0 for v in fit.factors.values())
            and all(isinstance(link, str) and type(tp) is int and tp >= 1 for link, tp in fit.max_tp.items()))  # fmt: skip


def _fit_kernels(catalog: Catalog, architecture: str) -> KernelFit | None:
    frame = _kernel_frame(catalog, architecture)
    if frame is None:
        return None
    key = ("kernel", architecture, hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest())
    if key in FITS:
        return FITS[key]
    routed = frame["model"].map(lambda m: catalog.models[m].moe is not None).to_numpy()
    start = {name: bounds[2] for name, bounds in KERNEL_BOUNDS.items()}
    # dense iterations set the GPU's kernel factors; a mixture of experts' iterations then its grouped GEMMs' (the
    # dense factors held), so the MoE tables never move a dense model's answers
    dense = ~routed if (~routed).any() else np.ones(len(frame), dtype=bool)
    free = [n for n in _kernel_free(set(frame.loc[dense, "precision"])) if n not in MOE_FACTORS]
    fitted = _least_squares(catalog, frame[dense], Efficiency(**start), free)
    if routed.any() and (~routed).any():
        # a grouped-GEMM factor for each compute precision timed; one not timed takes the nearest timed one's
        timed = {compute_precision(p) for p in set(frame.loc[routed, "precision"])}
        moe_free = [n for n in MOE_FACTORS if n not in MOE_GEMM_FACTORS.values()] + [
            MOE_GEMM_FACTORS[c] for c in ("bf16", "fp8", "fp4") if c in timed]
        fitted = _least_squares(catalog, frame[routed], fitted, moe_free)
        for compute, name in MOE_GEMM_FACTORS.items():
            if compute not in timed:
                nearest = next(MOE_GEMM_FACTORS[c] for c in ("fp8", "bf16", "fp4") if c in timed)
                fitted = dataclasses.replace(fitted, **{name: getattr(fitted, nearest)})
        free += moe_free
    else:  # no mixture of experts timed: the grouped GEMMs as the dense ones (kernel_efficiency borrows them)
        fitted = dataclasses.replace(fitted, **{n: getattr(PRIOR, n) for n in MOE_FACTORS})  # Efficiency's defaults
    shapes, load, measured = _step_batch(catalog, frame)
    errors = np.abs(np.expm1(np.log(step_ms(shapes, fitted, *load)) - measured))
    factors = {name: rounded(getattr(fitted, name)) for name in KERNEL_FACTORS}
    expert_parallel = frame[frame["ep"] > 1]
    fit = KernelFit(
        architecture, factors, len(frame), float(np.median(errors[dense])), float(errors.max()),
        tuple(sorted(set(frame["table"]))),
        {link: int(tp) for link, tp in frame.groupby(frame["gpu"].map(lambda g: catalog.gpus[g].link))["tp"].max().items()},
        tuple(sorted(set(frame["precision"]))),
        int(frame["prefill_isl"].max()), bool(routed.any()),
        tuple(sorted(set(frame["provenance"]))), tuple(free), int(frame["dp"].max()),
        int(expert_parallel["ep"].max()) if len(expert_parallel) else 1, int(routed.sum()),
        float(np.median(errors[routed])) if routed.any() else None,
    )  # fmt: skip
    FITS[key] = fit
    return fit


def _step_batch(catalog: Catalog, frame):
    """The engines of timed iterations as one batch, their loads, and the log of their times."""
    shapes = ShapeBatch.of([
        EngineShape(catalog.models[m], catalog.gpus[g], int(tp), p, kv_bytes_for(p), int(dp), int(ep))
        for m, g, tp, p, dp, ep in zip(frame["model"], frame["gpu"], frame["tp"], frame["precision"], frame["dp"], frame["ep"])
    ])  # fmt: skip
    load = (frame["decode_batch"].to_numpy(float), frame["decode_context_tokens"].to_numpy(float),
            frame["prefill_prompts"].to_numpy(float), frame["prefill_isl"].to_numpy(float))  # fmt: skip
    return shapes, load, np.log(frame["time_ms"].to_numpy(float))


def _least_squares(catalog: Catalog, frame, base: Efficiency, free: list[str]) -> Efficiency:
    """`base` with the factors `free` fitted to the iterations of `frame` (least squares on the log error)."""
    shapes, load, measured = _step_batch(catalog, frame)

    def efficiency(values) -> Efficiency:
        return dataclasses.replace(base, **dict(zip(free, values)))

    from scipy.optimize import least_squares  # scipy is slow to import: where it is used

    result = least_squares(
        lambda values: np.log(step_ms(shapes, efficiency(values), *load)) - measured,
        [getattr(base, n) for n in free], bounds=([KERNEL_BOUNDS[n][0] for n in free], [KERNEL_BOUNDS[n][1] for n in free]),
        x_scale="jac",
    )  # fmt: skip
    return efficiency(result.x)
