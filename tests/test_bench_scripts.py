"""planner bench: per workload the benchmark script of each tool, its flags in the tools' own argument lists,
expected.json equal to the plan's figures (planner/bench/, docs/deploy.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT

from planner import api
from planner.bench import TOOLS, build_bench
from planner.bench.commands import ENDPOINT, command_for, command_text, targets
from planner.bench.loads import TAIL_REQUESTS, request_count, workload_loads
from planner.bench.schema import (
    check_command,
    check_every_version,
    load_tool_schema,
    tool_versions,
)

# as tests/test_deploy.py: shipped scenarios whose plan takes a few seconds; the others with
# PLANNER_DEPLOY_ALL_SCENARIOS=1
FAST_SCENARIOS = ("agent-prefix-cache", "llama3-8b-assistant", "disaggregated-serving", "contact-center",
                  "daily-hybrid", "cloud-spot-and-commitments", "chat-and-code-p95")
SLOW_SCENARIOS = ("moe-engines", "chat-and-summarize", "chat-and-code-decision")
_PLANS: dict[str, object] = {}


def _planned(name: str):
    if name not in _PLANS:
        _PLANS[name] = api.plan_in_context(ROOT / "scenarios" / f"{name}.yaml")
    return _PLANS[name]


def _scenarios():
    every = os.environ.get("PLANNER_DEPLOY_ALL_SCENARIOS") == "1"
    return [*FAST_SCENARIOS, *(SLOW_SCENARIOS if every else ())]


def test_every_shipped_scenario_is_covered():
    assert sorted([*FAST_SCENARIOS, *SLOW_SCENARIOS]) == sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))


def _flags_of(script: str) -> list[list[str]]:
    """The argument words of every benchmark command in a script (the lines after a tool's program)."""
    commands, current = [], None
    for line in script.splitlines():
        words = line.strip().rstrip("\\").strip()
        if words.startswith(("aiperf profile", "guidellm run", "vllm bench serve")):
            current = []
            commands.append(current)
            continue
        if current is not None and words.startswith("-"):
            current += shlex.split(words.removesuffix(";;").strip())
            if line.rstrip().endswith(";;"):
                current = None
    return commands


def _pairs(words: list[str], schema) -> list[tuple[str, str | None]]:
    pairs, i = [], 0
    while i < len(words):
        flag = words[i]
        takes = schema.flags.get(flag, {}).get("type") not in ("flag", "bool")
        value = words[i + 1] if takes and i + 1 < len(words) and not words[i + 1].startswith("--") else None
        pairs.append((flag, value.replace("${ENDPOINT}", "http://x:8000") if value else None))
        i += 2 if value is not None else 1
    return pairs


@pytest.mark.parametrize("name", _scenarios())
def test_every_scenario_gives_scripts_whose_flags_every_shipped_tool_version_takes(name, tmp_path):
    planned = _planned(name)
    for tool in TOOLS:
        bench = build_bench(planned, tool)
        scripts = {n: t for n, t in bench.files.items() if n.endswith(".sh")}
        assert len(scripts) == len(planned.scenario.workloads) and "expected.json" in bench.files
        for file_name, text in scripts.items():
            path = tmp_path / file_name
            path.write_text(text)
            assert subprocess.run(["bash", "-n", str(path)], capture_output=True, check=False).returncode == 0, file_name
            commands = _flags_of(text)
            assert commands, file_name
            for version in tool_versions(tool):  # the words the script holds, as the shell passes them
                schema = load_tool_schema(tool, version)
                for words in commands:
                    assert check_command(schema, _pairs(words, schema)) == [], (file_name, version)


def test_each_tool_ships_an_argument_list_from_its_wheel():
    assert tool_versions("aiperf") == ("0.13.0",) and tool_versions("guidellm") == ("0.8.1",)
    assert tool_versions("vllm") == ("0.12.0", "0.15.1")
    for tool in TOOLS:
        for version in tool_versions(tool):
            source = load_tool_schema(tool, version).source
            assert source["distribution"].startswith(f"{tool}-{version}-") and len(source["sha256"]) == 64
            assert source["tool"].startswith("planner/bench/tools/bench_args.py")


def test_a_flag_or_value_the_tool_does_not_take_is_refused():
    assert check_every_version("aiperf", [("--no-such-flag", "1")]) == ["--no-such-flag is not an argument of aiperf 0.13.0"]
    assert check_every_version("aiperf", [("--arrival-pattern", "bursty")])
    assert check_every_version("vllm", [("--request-rate", "fast")])  # not a float, in both versions
    assert len(check_every_version("vllm", [("--dataset-name", "nope")])) == 2
    assert check_every_version("guidellm", [("--profile", "kind=poisson,rate=4,burst=2")])  # no such key
    assert check_every_version("guidellm", [("--profile", "kind=warp,rate=4")])  # no such kind
    assert check_every_version("guidellm", [("--profile", "kind=poisson,rate=4")]) == []


def test_the_request_count_rule():
    assert request_count(90.0, 8.0) == 960  # 120 s at 8 rps
    assert request_count(99.0, 0.5) == TAIL_REQUESTS * 100  # 20 beyond P99
    assert request_count(50.0, 0.1) == 100  # the floor


def test_rates_are_the_busiest_periods_and_split_over_each_pools_instances():
    planned = _planned("daily-hybrid")
    plan = planned.plan
    for load in workload_loads(plan, planned.scenario, planned.catalog):
        result = next(w for w in plan.workloads if w.name == load.name)
        assert load.peak_rps == pytest.approx(max(p.demand_rps for p in result.periods))
        routed = sum(r.rps for r in plan.routing if r.workload == load.name and r.period == load.period)
        assert sum(p.rps for p in load.pools) == pytest.approx(routed, rel=1e-6)
        for share in load.pools:
            assert share.instances == dict(share.pool.instances_by_period)[load.period]
        found = targets(load)
        assert found[0].name == "service" and found[0].rate_rps == load.peak_rps
        for target in found[1:]:
            share = next(p for p in load.pools if p.pool.name == target.name)
            assert target.rate_rps == pytest.approx(share.rps / share.instances, abs=1e-4)


@pytest.mark.parametrize("name", ["agent-prefix-cache", "daily-hybrid", "disaggregated-serving"])
def test_expected_json_holds_the_plans_figures_and_bands(name):
    planned = _planned(name)
    document = json.loads(build_bench(planned, "aiperf").files["expected.json"])
    by_workload = {w["workload"]: w for w in document["workloads"]}
    for result in planned.plan.workloads:
        entries = by_workload[result.name]["pools"]
        assert len(entries) == len(result.assignments)
        for assignment, entry in zip(result.assignments, entries):
            assert entry["percentile"] == result.percentile and entry["provenance"] == assignment.provenance
            for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                value = getattr(assignment, metric)
                figure = entry["figures"][metric]
                assert (figure is None) if value is None else figure["planned"] == value
            error = assignment.expected_error
            bands = {m: (f or {}).get("band") for m, f in entry["figures"].items()}
            if error:
                assert bands["ttft_ms"] in (None, error["ttft"]) and bands["tpot_ms"] in (None, error["tpot"])
                assert bands["rps_per_instance"] == error["throughput"]
            else:
                assert bands["rps_per_instance"] == document["measured_band"]


def test_the_served_model_name_is_the_deploy_scripts_and_the_prefix_is_shared():
    planned = _planned("agent-prefix-cache")
    deploy = api.deploy(ROOT / "scenarios" / "agent-prefix-cache.yaml", "vllm")
    served = next(t for n, t in deploy.files.items() if n.endswith(".sh")).split("--served-model-name ")[1].split()[0]
    (load,) = workload_loads(planned.plan, planned.scenario, planned.catalog)
    command = command_for("vllm", load, targets(load)[0])
    args = dict(command.args)
    assert args["--served-model-name"] == served == "llama-3.3-70b"
    assert args["--random-prefix-len"] == "6000" and args["--random-input-len"] == "2000"  # 8,000-token prompts
    assert args["--request-rate"] == "8" and args["--base-url"] == ENDPOINT
    assert command_text(command, "    ").lstrip() in build_bench(planned, "vllm").files["bench-agent-vllm.sh"]


def test_bad_input_writes_nothing(tmp_path, cli):
    scenario = ROOT / "scenarios" / "agent-prefix-cache.yaml"
    code, _, err = cli("bench", scenario, "--tool", "locust", "--out", tmp_path / "b")
    assert code == 2 and "allowed: aiperf, guidellm, vllm" in err and not (tmp_path / "b").exists()
    code, _, err = cli("bench", scenario, "--tool", "aiperf", "--endpoint", "agent:8000; rm -rf /", "--out", tmp_path / "b")
    assert code == 2 and "--endpoint" in err and not (tmp_path / "b").exists()
    (tmp_path / "mine.txt").write_text("keep")
    code, _, err = cli("bench", scenario, "--tool", "aiperf", "--out", tmp_path)
    assert code == 2 and "not empty" in err and (tmp_path / "mine.txt").read_text() == "keep"


def test_a_bench_folder_is_written_whole_and_again(tmp_path, cli):
    scenario = ROOT / "scenarios" / "agent-prefix-cache.yaml"
    for tool in ("aiperf", "vllm"):  # a second bench replaces the first's files
        code, _, err = cli("bench", scenario, "--tool", tool, "--out", tmp_path / "b", "--progress", "none")
        assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert names == [".planner-bench-manifest.json", "README.md", "bench-agent-vllm.sh", "expected.json"]
    assert os.access(tmp_path / "b" / "bench-agent-vllm.sh", os.X_OK)
    assert Path(tmp_path / "b" / "README.md").read_text().count("| agent |") == 3


def test_a_workload_of_buckets_gets_their_mean_and_spread(tmp_path):
    scenario = tmp_path / "buckets.yaml"
    scenario.write_text("""name: buckets
deployment: on-prem
workloads:
  - name: mixed
    model: llama-3.1-8b
    buckets:
      - {isl_tokens: 1000, osl_tokens: 100, share: 0.5}
      - {isl_tokens: 3000, osl_tokens: 300, share: 0.5}
    peak_rps: 4
    engines: [vllm]
    slo: {tpot_ms: 50, percentile: 95}
sites:
  on_prem:
    systems: [dgx-h100]
""")
    planned = api.plan_in_context(scenario)
    (load,) = workload_loads(planned.plan, planned.scenario, planned.catalog)
    assert (load.lengths.isl_mean, load.lengths.isl_std, load.lengths.osl_mean, load.lengths.osl_std) == (2000, 1000, 200, 100)
    aiperf = dict(command_for("aiperf", load, targets(load)[0]).args)
    assert aiperf["--synthetic-input-tokens-stddev"] == "1000" and aiperf["--output-tokens-stddev"] == "100"
    assert dict(command_for("vllm", load, targets(load)[0]).args)["--random-range-ratio"] == "0.866"  # sqrt(3) x 0.5
    assert "prompt_tokens_stdev=1000" in dict(command_for("guidellm", load, targets(load)[0]).args)["--data"]
    assert targets(load)[0].requests == max(400, 480)  # 20 beyond P95 (400), 120 s at 4 rps (480)
    for tool in TOOLS:
        build_bench(planned, tool)  # every flag checked (a defect raises)
