"""A generation without timed kernels borrows another's fractions of peak, rescaled by microbenchmarks measured on
one harness (planner/perf/transfer.py): checked against the catalog's own figures, recomputed here."""

import statistics

import pytest

from planner.catalog import load_catalog
from planner.perf.calibration import kernel_efficiency
from planner.perf.transfer import kernel_transfer


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _fraction(catalog, architecture, figure, peak):
    values = [getattr(g.measured_kernels, figure) / peak(g) for g in catalog.gpus.values()
              if g.architecture == architecture and g.measured_kernels is not None]
    return statistics.median(values)


def test_cdna3_borrows_hopper_kernels_rescaled_by_measured_fractions_of_peak(catalog):
    hopper, _, _ = kernel_efficiency(catalog, "hopper")
    cdna3, _, notes = kernel_efficiency(catalog, "cdna3")
    gemm = (_fraction(catalog, "cdna3", "gemm_fp8_tflops", lambda g: g.tflops_by_precision["fp8"])
            / _fraction(catalog, "hopper", "gemm_fp8_tflops", lambda g: g.tflops_by_precision["fp8"]))
    hbm = (_fraction(catalog, "cdna3", "hbm_tb_per_s", lambda g: g.mem_bw_tb_per_s)
           / _fraction(catalog, "hopper", "hbm_tb_per_s", lambda g: g.mem_bw_tb_per_s))
    # MI300X reaches 44% of its FP8 peak where H100/H200 reach 68%; 78% of its HBM where they reach 88%
    assert 0.55 < gemm < 0.75 and 0.8 < hbm < 0.95
    assert cdna3.gemm_fp8 == pytest.approx(hopper.gemm_fp8 * gemm, abs=1e-4)
    assert cdna3.gemm_bf16 == pytest.approx(min(1.0, hopper.gemm_bf16 * gemm), abs=1e-4)
    assert cdna3.bandwidth == pytest.approx(hopper.bandwidth * hbm, abs=1e-4)
    assert cdna3.kv_bandwidth == pytest.approx(hopper.kv_bandwidth * hbm, abs=1e-4)
    # what is not measured stays the donor's: fixed latencies and the grouped GEMMs' fractions of the dense ones
    assert cdna3.layer_latency_fp8_us == hopper.layer_latency_fp8_us
    assert cdna3.moe_gemm_fp8 == hopper.moe_gemm_fp8
    assert any("rescaled to cdna3 by microbenchmarks" in note and "Azure" in note for note in notes)


def test_generation_without_microbenchmarks_keeps_donor_fractions_and_says_so(catalog):
    hopper, _, _ = kernel_efficiency(catalog, "hopper")
    cdna4, _, notes = kernel_efficiency(catalog, "cdna4")
    assert (cdna4.gemm_fp8, cdna4.bandwidth) == (hopper.gemm_fp8, hopper.bandwidth)
    assert any("no cdna4 microbenchmarks" in note for note in notes)


def test_measurements_on_different_harnesses_are_not_compared(catalog):
    mi300x = catalog.gpus["MI300X-192GB"]
    other = mi300x.model_copy(update={"measured_kernels": mi300x.measured_kernels.model_copy(update={"harness": "elsewhere"})})
    moved = catalog.model_copy(update={"gpus": {**catalog.gpus, "MI300X-192GB": other}})
    assert kernel_transfer(moved, "cdna3", "hopper") is None
    assert kernel_transfer(catalog, "cdna3", "hopper") is not None


def test_measured_kernels_must_name_source_and_harness(tmp_path):
    from planner.errors import PlannerInputError

    user = tmp_path / "cat"
    user.mkdir()
    (user / "gpus.yaml").write_text(
        "gpus:\n  - id: MI300X-192GB\n    measured_kernels: {harness: h, gemm_fp8_tflops: -3, source: s}\n"
    )
    with pytest.raises(PlannerInputError, match="measured_kernels"):
        load_catalog([user])
