"""Bad input: one clear line naming the file, the field and what is allowed; exit 2; no traceback."""

from __future__ import annotations

import copy

import pytest

from helpers import write_scenario

GOOD = {
    "name": "ok",
    "workloads": [
        {"name": "chat", "model": "llama-3-8b", "isl_tokens": 2000, "osl_tokens": 200, "peak_rps": 10,
         "slo": {"ttft_ms": 500}},
    ],
    "sites": {"on_prem": {"systems": ["dgx-h100"]}},
}  # fmt: skip


def mutate(change):
    document = copy.deepcopy(GOOD)
    change(document)
    return document


def _set(path, value):
    def change(document):
        node = document
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


def _delete(path):
    def change(document):
        node = document
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return change


# (case id, mutation, words the message must contain: the field and what is allowed)
MALFORMED = [
    ("unknown-model", _set(("workloads", 0, "model"), "llama-3-8", ), ["workloads[0:chat].model", "llama-3-8b"]),
    ("unknown-system", _set(("sites", "on_prem", "systems"), ["dgx-h1000"]), ["sites.on_prem.systems[0]", "dgx-h100"]),
    ("cloud-system-on-prem", _set(("sites", "on_prem", "systems"), ["aws-p5.48xlarge"]), ["sites.on_prem.systems[0]", "cloud"]),
    ("negative-rate", _set(("workloads", 0, "peak_rps"), -3), ["workloads[0:chat].peak_rps", "greater than or equal to 0"]),
    ("missing-rate", _delete(("workloads", 0, "peak_rps")), ["workloads[0:chat]", "demand exactly once"]),
    ("two-rates", _set(("workloads", 0, "mean_rps"), 5), ["workloads[0:chat]", "demand exactly once"]),
    ("isl-above-context", _set(("workloads", 0, "isl_tokens"), 9000), ["workloads[0:chat].isl_tokens", "8192"]),
    ("unknown-field", _set(("workloads", 0, "ttft_ms"), 500), ["workloads[0:chat].ttft_ms", "unknown field", "slo"]),
    ("unknown-top-field", _set(("limit",), {"power_kw": 3}), ["limit", "Did you mean 'limits'"]),
    ("bad-mode", _set(("workloads", 0, "mode"), "chatty"), ["workloads[0:chat].mode", "streaming", "offline"]),
    ("negative-ttft", _set(("workloads", 0, "slo", "ttft_ms"), -1), ["workloads[0:chat].slo.ttft_ms", "greater than 0"]),
    ("no-workloads", _set(("workloads",), []), ["workloads", "at least 1"]),
    ("missing-model", _delete(("workloads", 0, "model")), ["workloads[0:chat].model", "required"]),
    ("bad-precision", _set(("workloads", 0, "precisions"), ["int3"]), ["workloads[0:chat].precisions[0]", "fp8"]),
    ("quantile-out-of-range", lambda d: (d["workloads"][0].pop("peak_rps"), d["workloads"][0].update(mean_rps=5, peak_quantile=1.5)),
     ["workloads[0:chat].peak_quantile", "less than 1"]),
    ("duplicate-workload", lambda d: d["workloads"].append(copy.deepcopy(d["workloads"][0])), ["workloads[1].name", "duplicate"]),
    ("no-price", _set(("sites", "on_prem", "systems"), ["dgx-a100"]), ["dgx-a100", "price_usd"]),
    ("site-missing-for-cloud", _set(("deployment",), "cloud"), ["sites.cloud", "deployment 'cloud'"]),
    ("bad-deployment", _set(("deployment",), "moon"), ["deployment", "on-prem", "hybrid"]),
    ("bad-pue", _set(("sites", "on_prem", "pue"), 0.5), ["sites.on_prem.pue", "greater than or equal to 1"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "change", "expected"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_scenario_exits_2_naming_the_field(cli, tmp_path, case, change, expected):
    path = write_scenario(tmp_path, mutate(change))
    for command in ("validate", "plan"):
        code, out, err = cli(command, path)
        assert code == 2, (case, out, err)
        assert "Traceback" not in err and "Traceback" not in out
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert str(path) in lines[0]
        for word in expected:
            assert word in lines[0], (word, lines[0])


def test_good_scenario_validates(cli, tmp_path):
    code, out, err = cli("validate", write_scenario(tmp_path, GOOD))
    assert code == 0, err
    assert "OK" in out and "chat" in out


def test_malformed_yaml_names_the_line(cli, tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nworkloads: [\n  - name: a\n")
    code, _, err = cli("validate", path)
    assert code == 2
    assert str(path) in err and "malformed YAML" in err and "line" in err
    assert "Traceback" not in err


def test_missing_file(cli, tmp_path):
    code, _, err = cli("plan", tmp_path / "nope.yaml")
    assert code == 2 and "file not found" in err


def test_not_a_mapping(cli, tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    code, _, err = cli("validate", path)
    assert code == 2 and "mapping" in err


def test_bad_input_writes_nothing(cli, tmp_path):
    path = write_scenario(tmp_path, mutate(_set(("workloads", 0, "peak_rps"), -1)))
    before = sorted(p.name for p in tmp_path.iterdir())
    cli("plan", path)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("perf", "--model", "llama-9", "--gpu", "H100-SXM-80GB", "--isl", "1", "--osl", "1"), ["--model", "Known:"]),
        (("perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXN", "--isl", "1", "--osl", "1"), ["--gpu", "Did you mean 'H100-SXM-80GB'"]),
        (("perf", "--model", "llama-3.1-8b", "--gpu", "A100-SXM-80GB", "--precision", "fp8"), ["--precision", "bf16"]),
        (("peak", "--mean-rps", "-1"), ["--mean-rps", "between 0 and"]),
        (("peak", "--mean-rps", "5", "--quantile", "1.2"), ["--quantile", "between 0 and 1"]),
        (("users", "--rps", "5", "--requests-per-user", "0"), ["--requests-per-user", "> 0"]),
    ],
)
def test_bad_options_exit_2(cli, args, words):
    code, _, err = cli(*args)
    assert code == 2, err
    for word in words:
        assert word in err
