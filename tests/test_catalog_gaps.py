"""A catalog hole that drops candidates is said in the plan's warnings, naming the system and the field (issue 49:
the Lambda 8x B200 instance has no network_gbit_per_s, so a cross-node DeepSeek-R1 engine was never tried there and
the plan silently rented AWS p6-b200 at twice the price)."""

from types import SimpleNamespace

import yaml

from planner.api import scenario_catalog, validate_file
from planner.candidates import Pruned
from planner.optimize.gaps import catalog_gap_warnings


def _scenario(tmp_path, model: str, systems: list[str]):
    path = tmp_path / "gaps.yaml"
    path.write_text(yaml.safe_dump({
        "name": "gaps", "deployment": "cloud", "metrics_version": 2,
        "workloads": [{"name": "reason", "model": model, "isl_tokens": 2000, "osl_tokens": 1000, "peak_rps": 2,
                       "slo": {"ttft_ms": 3000, "tpot_ms": 60}}],
        "sites": {"cloud": {"systems": systems}},
    }))  # fmt: skip
    return validate_file(path), scenario_catalog(path)


def _cset(*pruned: Pruned):
    return SimpleNamespace(pruned=pruned)


def test_a_system_without_a_network_figure_is_named_where_a_model_needs_several_of_its_nodes(tmp_path):
    scenario, catalog = _scenario(tmp_path, "deepseek-r1", ["lambda-gpu-8x-b200-sxm6", "aws-p6-b200.48xlarge"])
    assert catalog.systems["lambda-gpu-8x-b200-sxm6"].network_gbit_per_s is None
    (warning,) = catalog_gap_warnings(scenario, catalog, _cset())
    assert warning.startswith("lambda-gpu-8x-b200-sxm6 has no network_gbit_per_s")
    assert "pipeline stages" in warning and "deepseek-r1" in warning
    assert "aws-p6-b200" not in warning  # its entry has the figure


def test_no_warning_where_nothing_was_dropped_for_the_missing_field(tmp_path):
    # Llama 3.1 8B fits one GPU: no engine of it spans nodes, and nothing disaggregated was pruned
    scenario, catalog = _scenario(tmp_path, "llama-3.1-8b", ["lambda-gpu-8x-b200-sxm6"])
    assert catalog_gap_warnings(scenario, catalog, _cset()) == ()


def test_disaggregated_pools_dropped_for_the_missing_network_are_said(tmp_path):
    scenario, catalog = _scenario(tmp_path, "llama-3.1-8b", ["lambda-gpu-8x-b200-sxm6"])
    pruned = Pruned("reason", "lambda-gpu-8x-b200-sxm6", "disaggregated: lambda-gpu-8x-b200-sxm6 has no scale-out "
                    "network in the catalog (network_gbit_per_s) to move KV caches", "data")  # fmt: skip
    (warning,) = catalog_gap_warnings(scenario, catalog, _cset(pruned))
    assert "disaggregated prefill/decode pools" in warning and "network_gbit_per_s" in warning
