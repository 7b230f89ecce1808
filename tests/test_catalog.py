"""The shipped catalogs: required entries, a source on every entry, tables built from the public rows."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from planner.catalog import default_catalog_dir, load_catalog
from planner.errors import PlannerInputError

from helpers import BENCH_HEADER, make_catalog, on_prem_system

DESIGN_GPUS = {"H100-SXM-80GB", "H100-PCIe-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM-80GB", "L40S-48GB", "L4-24GB"}
DESIGN_MODELS = {"llama-3.1-8b", "llama-3.1-70b", "llama-3.3-70b", "llama-3.1-405b", "llama-3-8b", "llama-2-70b", "nemo-43b-gpt"}


def test_required_ids_present(catalog):
    assert DESIGN_GPUS <= set(catalog.gpus)
    assert DESIGN_MODELS <= set(catalog.models)
    assert {"dgx-h100", "dgx-h200", "dgx-b200"} <= {s for s, v in catalog.systems.items() if v.kind == "on-prem"}


def test_at_least_four_priced_cloud_8_gpu_instances_covering_h100_h200_a100_and_l40s_or_l4(catalog):
    cloud8 = [s for s in catalog.systems.values() if s.kind == "cloud" and s.gpus_per_node == 8 and s.usd_per_hour]
    gpus = {s.gpu for s in cloud8}
    assert len(cloud8) >= 4
    assert {"H100-SXM-80GB", "H200-SXM-141GB", "A100-SXM-80GB"} <= gpus
    assert gpus & {"L40S-48GB", "L4-24GB"}


def test_every_yaml_entry_names_its_source():
    directory = default_catalog_dir()
    for name in ("gpus", "systems", "models"):
        for entry in yaml.safe_load((directory / f"{name}.yaml").read_text())[name]:
            assert entry.get("source", "").strip(), (name, entry.get("id"))
    for key, value in yaml.safe_load((directory / "defaults.yaml").read_text())["defaults"].items():
        assert value["source"].strip(), key


def test_every_benchmark_row_names_its_source(catalog):
    assert catalog.benchmarks
    assert all(row.source.strip() for row in catalog.benchmarks)


def test_public_rows_all_present_with_their_numbers(catalog):
    reference = Path(__file__).resolve().parents[2] / "shared" / "reference" / "benchmarks" / "public_calibration.csv"
    if not reference.exists():
        pytest.skip(f"shared reference not beside the checkout ({reference})")
    public = [r for r in catalog.benchmarks if r.table == "public.csv"]
    with reference.open() as handle:
        rows = list(csv.DictReader(handle))
    for source_row in rows:
        matches = [
            r for r in public
            if r.source == source_row["source"] and r.gpu == source_row["gpu"]
            and (r.output_tokens_per_s or "") == (float(source_row["output_tokens_per_s"]) if source_row["output_tokens_per_s"] else "")
            and (r.ttft_ms or "") == (float(source_row["ttft_ms"]) if source_row["ttft_ms"] else "")
            and (r.request_throughput_rps or "") == (float(source_row["request_throughput_rps"]) if source_row["request_throughput_rps"] else "")
        ]  # fmt: skip
        assert matches, source_row


def test_missing_prices_are_left_out_not_invented(catalog):
    assert catalog.systems["dgx-a100"].price_usd is None
    assert catalog.models["nemo-43b-gpt"].layers is None
    # a price derived from the nearest row (shared/reference/prices.md) is an estimate and says how it was derived
    h200 = catalog.systems["dgx-h200"]
    assert h200.price_source_kind == "estimate" and "derived" in h200.notes and "estimate" in h200.source
    assert h200.price_usd == pytest.approx(270_000 * 63.296 / 55.04, rel=0.001)


def test_the_shipped_catalog_gives_every_system_what_a_plan_needs_or_says_what_it_lacks(catalog):
    """Completeness (issue 49): a cloud instance has its hourly price and its kind; a server its power and height,
    and a price or a note that none is public; a system without a scale-out network figure says so in its notes
    (the plan then warns what it could not try there: planner/optimize/gaps.py)."""
    for system in catalog.systems.values():
        assert system.source, system.id
        if system.kind == "cloud":
            assert system.usd_per_hour and system.price_source_kind and system.provider, system.id
        else:
            assert (system.power_kw and system.rack_units) or "not published" in system.notes, system.id
            assert system.price_usd or "price_usd omitted" in system.notes, system.id
            assert system.price_usd is None or system.price_source_kind, system.id
        if system.network_gbit_per_s is None:
            assert "network" in system.notes and "not published" in system.notes, system.id


def test_systems_gpu_must_exist(tmp_path):
    bad = on_prem_system("x", "H999", 1.0)
    directory = make_catalog(tmp_path, [bad], [])
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "systems[x].gpu" in str(error.value) and "H999" in str(error.value)


def test_bad_benchmark_row_names_file_line_and_column(tmp_path):
    directory = make_catalog(tmp_path, [], ["src,llama-3-8b,H100-SXM-80GB,8,,,100,100,,online,-5,,,,1,,node,"])
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    message = str(error.value)
    assert "test.csv line 2" in message and "ttft_ms" in message


def test_benchmark_row_unknown_model(tmp_path):
    directory = make_catalog(tmp_path, [], ["src,gpt-9,H100-SXM-80GB,8,,,100,100,,online,5,,,,1,,node,"])
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "unknown model 'gpt-9'" in str(error.value)


def test_benchmark_unknown_column(tmp_path):
    directory = make_catalog(tmp_path, [], [])
    (directory / "benchmarks" / "test.csv").write_text(BENCH_HEADER + ",colour\n")
    with pytest.raises(PlannerInputError) as error:
        load_catalog(directory)
    assert "colour" in str(error.value)


def test_catalog_listing_cli(cli, cli_json):
    listing = cli_json("catalog", "gpus")
    assert {g["id"] for g in listing["gpus"]} >= DESIGN_GPUS
    code, out, _ = cli("catalog", "systems")
    assert code == 0 and "dgx-h100" in out


STEP_HEADER = ("source,model,gpu,tp,precision,decode_batch,decode_context_tokens,prefill_prompts,prefill_isl,time_ms,"
               "provenance")  # fmt: skip


def test_calibration_listing_says_what_each_generation_rests_on(cli, cli_json):
    entries = {e["architecture"]: e for e in cli_json("catalog", "calibration")["calibration"]}
    assert set(entries) == {"ampere", "ada", "hopper", "blackwell", "blackwell-gb202", "cdna3", "cdna4"}
    for borrowed in ("blackwell-gb202", "cdna3", "cdna4"):  # nothing timed on them: they say whose factors they use
        assert entries[borrowed]["basis"] == "extrapolated" and entries[borrowed]["kernel_iterations"] == 0
        assert "kernel factors" in entries[borrowed]["source"]
    assert entries["hopper"]["basis"] == "measured" and entries["hopper"]["engine_rows"] >= 10
    assert entries["blackwell"]["basis"] == "aic kernels" and entries["blackwell"]["kernel_iterations"] > 500
    assert entries["blackwell"]["calibrated_range"]["precisions"] == ["bf16", "fp4", "fp8"]
    assert "gemm_fp4" not in entries["hopper"]["factors"]  # nothing timed at fp4 on Hopper: no factor shown
    code, out, _ = cli("catalog", "calibration")
    assert code == 0 and "aic kernels" in out


@pytest.mark.parametrize(
    "cells, column",
    [
        ("llama-3.1-8b,H100-SXM-80GB,1,bf16,8,512,0,0,-3", "time_ms"),
        ("llama-3.1-8b,H100-SXM-80GB,1,fp4,8,512,0,0,3", "precision"),
        ("gpt-9,H100-SXM-80GB,1,bf16,8,512,0,0,3", "model"),
        ("llama-3.1-8b,H100-SXM-80GB,0,bf16,8,512,0,0,3", "tp"),
        ("llama-3.1-8b,H100-SXM-80GB,1,bf16,0,0,0,0,3", "decode_batch"),
        ("llama-3.1-8b,H100-SXM-80GB,1,bf16,0,0,2,0,3", "prefill_isl"),
    ],
)
def test_a_bad_step_table_cell_names_file_line_and_column(tmp_path, cli, cells, column):
    user = tmp_path / "lab"
    (user / "calibration").mkdir(parents=True)
    (user / "calibration" / "ours.csv").write_text(f"{STEP_HEADER}\nour timing,{cells},ours\n")
    with pytest.raises(PlannerInputError) as error:
        load_catalog([user])
    assert "ours.csv" in str(error.value) and f"line 2 column {column}" in str(error.value)
    code, out, err = cli("catalog", "calibration", "--catalog", user)
    assert code == 2 and f"line 2 column {column}" in err and "Traceback" not in err


def test_a_users_own_timed_iterations_refit_their_generation(tmp_path, catalog):
    from planner.perf.calibration import fit_kernels

    shipped = fit_kernels(catalog, "hopper")
    frame = catalog.steps[0].frame
    hopper = frame[frame["gpu"] == "H100-SXM-80GB"].head(200)
    user = tmp_path / "lab"
    (user / "calibration").mkdir(parents=True)
    lines = [STEP_HEADER] + [
        f"our slower engine,{r.model},{r.gpu},{r.tp},{r.precision},{r.decode_batch},{r.decode_context_tokens},"
        f"{r.prefill_prompts},{r.prefill_isl},{r.time_ms * 1.5:.6g},own"
        for r in hopper.itertuples()
    ]  # fmt: skip
    (user / "calibration" / "ours.csv").write_text("\n".join(lines) + "\n")
    layered = fit_kernels(load_catalog([user]), "hopper")
    assert layered.iterations == shipped.iterations + 200 and "ours.csv" in layered.tables
    assert layered.basis == "timed kernels" and layered.factors != shipped.factors
