"""Kernel factors carried from one GPU generation to another by microbenchmarks measured on one harness.

A generation without timed serving kernels (AMD CDNA 3 and 4 today) borrows another generation's fitted fractions of
peak (`planner.perf.calibration.kernel_efficiency`). Borrowed as they are, they say an MI300X reaches the fraction of
its datasheet FP8 rate an H100 reaches of its own; measured on one harness (Azure's AI-benchmarking-guide: hipBLASLt
and cuBLASLt FP8 GEMMs, PyTorch STREAM kernels) it reaches 44% where Hopper reaches 68%. So the borrowed factors are
rescaled by the ratio of the measured fractions:

    factor_target = factor_donor x (achieved_target / peak_target) / (achieved_donor / peak_donor)

per kind of kernel: GEMM (every GEMM precision: only FP8 was measured, so BF16 and FP4 assume the same ratio, and
said) and HBM bandwidth (weights and KV cache). A generation's fraction is the median over its GPUs that give one.
Nothing else moves: fixed latencies and the grouped-GEMM factors (fractions of the dense GEMM's) stay the donor's,
and a generation without measured kernels on the donor's harness borrows the factors unchanged (and says so).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from planner.catalog import Catalog

# kernel kinds: the Efficiency factors each rescales, and the GPU's measured figure and its datasheet peak
GEMM_FACTORS = ("gemm_bf16", "gemm_fp8", "gemm_fp4")
BANDWIDTH_FACTORS = ("bandwidth", "kv_bandwidth")


@dataclass(frozen=True)
class KernelTransfer:
    """The ratios that carry a donor's kernel factors to a target generation, and where they come from."""

    target: str
    donor: str
    harness: str
    gemm_ratio: float | None
    bandwidth_ratio: float | None
    gpus: tuple[str, ...]  # the GPUs whose measurements entered (target's and donor's)

    def factors(self, donor_factors: dict[str, float]) -> dict[str, float]:
        """The donor's kernel factors with GEMM and bandwidth rescaled (a factor never above 1: a fraction of peak)."""
        scaled = dict(donor_factors)
        for names, ratio in ((GEMM_FACTORS, self.gemm_ratio), (BANDWIDTH_FACTORS, self.bandwidth_ratio)):
            if ratio is not None:
                scaled.update({name: round(min(1.0, donor_factors[name] * ratio), 4) for name in names if name in donor_factors})
        return scaled

    def note(self) -> str:
        parts = [f"GEMM x{self.gemm_ratio:.2f} (FP8 measured; BF16 and FP4 assumed alike)" if self.gemm_ratio else "",
                 f"HBM bandwidth x{self.bandwidth_ratio:.2f}" if self.bandwidth_ratio else ""]  # fmt: skip
        return (f"{self.donor} factors rescaled to {self.target} by microbenchmarks on one harness ({self.harness}; "
                f"{', '.join(self.gpus)}): {'; '.join(p for p in parts if p)}")  # fmt: skip


def _fractions(catalog: Catalog, architecture: str, harness: str) -> tuple[float | None, float | None, list[str]]:
    gemm, bandwidth, gpus = [], [], []
    for gpu in sorted(catalog.gpus.values(), key=lambda g: g.id):
        measured = gpu.measured_kernels
        if gpu.architecture != architecture or measured is None or measured.harness != harness:
            continue
        gpus.append(gpu.id)
        if measured.gemm_fp8_tflops is not None and "fp8" in gpu.tflops_by_precision:
            gemm.append(measured.gemm_fp8_tflops / gpu.tflops_by_precision["fp8"])
        if measured.hbm_tb_per_s is not None:
            bandwidth.append(measured.hbm_tb_per_s / gpu.mem_bw_tb_per_s)
    return (statistics.median(gemm) if gemm else None, statistics.median(bandwidth) if bandwidth else None, gpus)


def kernel_transfer(catalog: Catalog, target: str, donor: str) -> KernelTransfer | None:
    """The ratios from `donor` to `target` on a harness both measured (the one with the most GPUs), else None."""
    harnesses = {gpu.measured_kernels.harness for gpu in catalog.gpus.values()
                 if gpu.architecture == target and gpu.measured_kernels is not None}  # fmt: skip
    best = None
    for harness in sorted(harnesses):
        gemm_t, bw_t, gpus_t = _fractions(catalog, target, harness)
        gemm_d, bw_d, gpus_d = _fractions(catalog, donor, harness)
        gemm = gemm_t / gemm_d if gemm_t is not None and gemm_d is not None else None
        bandwidth = bw_t / bw_d if bw_t is not None and bw_d is not None else None
        if gemm is None and bandwidth is None:
            continue
        found = KernelTransfer(target, donor, harness, gemm, bandwidth, tuple(gpus_t + gpus_d))
        if best is None or len(found.gpus) > len(best.gpus):
            best = found
    return best
