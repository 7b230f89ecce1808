"""planner deploy: launch scripts and manifests of a plan's pools (planner/deploy/, docs/deploy.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from planner import api
from planner.deploy import build_deployment
from planner.deploy.engines import LAUNCH_ENGINES
from planner.deploy.k8s import kubernetes_validate_available, validation_units
from planner.deploy.schema import check_args, load_schema, shipped_versions

# shipped scenarios whose plan takes a few seconds; the others (moe-engines ~40 s, chat-and-summarize ~25 s) only
# with PLANNER_DEPLOY_ALL_SCENARIOS=1
FAST_SCENARIOS = ("agent-prefix-cache", "llama3-8b-assistant", "disaggregated-serving", "contact-center",
                  "daily-hybrid", "cloud-spot-and-commitments", "chat-and-code-p95")
SLOW_SCENARIOS = ("moe-engines", "chat-and-summarize", "chat-and-code-decision")
TARGETS = ("vllm", "sglang", "k8s")


def _scenario(tmp: Path, name: str, engine: str, model: str = "deepseek-r1", extra: str = "") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"""name: {name}
deployment: on-prem
workloads:
  - name: reasoning
    model: {model}
    isl_tokens: 1000
    osl_tokens: 1000
    peak_rps: 2
    engines: [{engine}]
    slo: {{tpot_ms: 60, ttft_ms: 5000}}
{extra}sites:
  on_prem:
    systems: [dgx-h100]
""")
    return path


@pytest.fixture(scope="module")
def shipped():
    return {name: api.plan_in_context(ROOT / "scenarios" / f"{name}.yaml") for name in FAST_SCENARIOS}


@pytest.fixture(scope="module")
def multi_node(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multinode")
    return {engine: api.plan_in_context(_scenario(folder, f"r1-{engine}", engine)) for engine in LAUNCH_ENGINES}


def _script_flags(text: str) -> list[tuple[str, str | None]]:
    """(flag, value) of every `exec` command of a serve script, read back as a shell would split it."""
    flags = []
    for command in text.split("exec ")[1:]:
        words = shlex.split(command.split("\nelse")[0].split("\nfi")[0].replace("\\\n", " "))
        i = 0
        while i < len(words):
            if words[i].startswith("--"):
                has_value = i + 1 < len(words) and not words[i + 1].startswith("--")
                flags.append((words[i], words[i + 1] if has_value else None))
                i += 2 if has_value else 1
            else:
                i += 1
    return flags


@pytest.mark.parametrize("target", TARGETS)
def test_every_fast_shipped_scenario_deploys_to_every_target(shipped, target):
    for name, planned in shipped.items():
        deployment = build_deployment(planned, target)
        assert "README.md" in deployment.files, name
        assert deployment.pools, name
        for pool in deployment.pools:
            if pool.name not in deployment.generated:
                assert pool.name in deployment.files["README.md"].split("## Not generated")[1], (name, pool.name)


def test_fast_and_slow_lists_cover_every_shipped_scenario():
    shipped_names = {p.stem for p in (ROOT / "scenarios").glob("*.yaml")}
    assert shipped_names == set(FAST_SCENARIOS) | set(SLOW_SCENARIOS)


@pytest.mark.skipif(not os.environ.get("PLANNER_DEPLOY_ALL_SCENARIOS"), reason="slow plans: PLANNER_DEPLOY_ALL_SCENARIOS=1")
@pytest.mark.parametrize("name", SLOW_SCENARIOS)
def test_slow_shipped_scenarios_deploy_to_every_target(name):
    planned = api.plan_in_context(ROOT / "scenarios" / f"{name}.yaml")
    for target in TARGETS:
        assert "README.md" in build_deployment(planned, target).files


def test_same_plan_gives_the_same_bytes(shipped):
    planned = shipped["agent-prefix-cache"]
    assert build_deployment(planned, "k8s").files == build_deployment(planned, "k8s").files


def test_generated_vllm_flags_are_in_the_shipped_schema_of_the_planned_version(shipped, multi_node):
    planned = shipped["agent-prefix-cache"]
    deployment = build_deployment(planned, "vllm")
    scripts = {n: t for n, t in deployment.files.items() if n.startswith("serve-")}
    assert scripts
    schema = load_schema("vllm", "0.12.0")
    for name, text in scripts.items():
        flags = _script_flags(text)
        assert ("--enable-prefix-caching", None) in flags  # the workload states a prefix cache
        assert ("--max-num-batched-tokens", "8192") in flags
        assert check_args(schema, flags) == [], name


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_multi_node_scripts_pass_the_schema_with_leader_and_worker_arguments(multi_node, engine):
    deployment = build_deployment(multi_node[engine], engine)
    (text,) = [t for n, t in deployment.files.items() if n.startswith("serve-")]
    flags = _script_flags(text)
    pool = deployment.pools[0]
    schema = load_schema(engine, shipped_versions(engine)[-1] if pool.engine_version not in shipped_versions(engine) else pool.engine_version)
    assert check_args(schema, flags) == []
    assert ("--nnodes", str(pool.nodes_per_instance)) in flags
    if engine == "vllm":
        assert ("--pipeline-parallel-size", str(pool.layout.pp)) in flags and ("--headless", None) in flags
    else:
        assert ("--pp-size", str(pool.layout.pp)) in flags


def test_an_unknown_flag_or_a_bad_value_is_caught_by_the_schema():
    schema = load_schema("vllm", "0.12.0")
    assert check_args(schema, [("--tensor-parallel-size", "4"), ("--kv-cache-dtype", "fp8")]) == []
    assert check_args(schema, [("--tp-size", "4")])  # SGLang's name, not vLLM's
    assert check_args(schema, [("--kv-cache-dtype", "fp9")])
    assert check_args(schema, [("--max-num-seqs", "many")])
    assert check_args(load_schema("sglang", "0.5.6.post2"), [("--tensor-parallel-size", "4"), ("--tp-size", "4")]) == []


def test_schemas_name_their_source():
    for engine in LAUNCH_ENGINES:
        assert shipped_versions(engine)
        for version in shipped_versions(engine):
            document = json.loads((ROOT / "planner" / "deploy" / "schemas" / f"{engine}-{version}.json").read_text())
            assert document["source"]["package"] == engine and document["source"]["version"] == version
            assert document["source"]["files"] and document["source"]["sha256"]


def test_multi_node_plan_gives_a_leader_worker_set_of_its_nodes_per_instance(multi_node):
    planned = multi_node["vllm"]
    deployment = build_deployment(planned, "k8s")
    manifests = list(yaml.safe_load_all(deployment.files["manifests.yaml"]))
    (lws,) = [m for m in manifests if m["kind"] == "LeaderWorkerSet"]
    (pool,) = deployment.pools
    assert pool.nodes_per_instance > 1 and pool.layout.pp == pool.nodes_per_instance
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == pool.nodes_per_instance
    assert lws["spec"]["replicas"] == pool.peak_instances
    worker = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "$(LWS_WORKER_INDEX)" in worker["command"] and "$(LWS_LEADER_ADDRESS)" in worker["command"]
    services = [m for m in manifests if m["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services] == ["reasoning"]


def test_deployments_request_the_instance_gpus_on_the_planned_gpu(shipped):
    deployment = build_deployment(shipped["agent-prefix-cache"], "k8s")
    manifests = list(yaml.safe_load_all(deployment.files["manifests.yaml"]))
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    assert deployments
    for manifest, pool in zip(deployments, [p for p in deployment.pools if p.name in deployment.generated], strict=True):
        spec = manifest["spec"]["template"]["spec"]
        assert manifest["spec"]["replicas"] == pool.peak_instances
        assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == pool.gpus_per_instance
        assert spec["nodeSelector"]["nvidia.com/gpu.product"].startswith("NVIDIA-")


@pytest.mark.skipif(not kubernetes_validate_available(), reason="kubernetes-validate not installed (the deploy extra)")
def test_manifests_pass_kubernetes_validate(shipped, multi_node):
    import kubernetes_validate
    from kubernetes_validate.utils import latest_version

    for planned in [*shipped.values(), multi_node["vllm"], multi_node["sglang"]]:
        files = build_deployment(planned, "k8s").files
        for manifest in yaml.safe_load_all(files.get("manifests.yaml", "")):
            if manifest is None:
                continue
            for _, unit in validation_units(manifest):
                kubernetes_validate.validate(unit, latest_version(), strict=True)


def test_disaggregated_plan_gives_prefill_and_decode_pools(shipped):
    deployment = build_deployment(shipped["disaggregated-serving"], "k8s")
    stages = {pool.stage for pool in deployment.pools}
    assert {"prefill", "decode"} <= stages
    readme = deployment.files["README.md"]
    assert "llm-d" in readme and "Dynamo" in readme


def test_disaggregated_vllm_pools_carry_their_kv_transfer(tmp_path):
    path = _scenario(tmp_path, "disagg-vllm", "vllm", "llama-3.1-70b", "fleet: {disaggregated: always}\n")
    deployment = build_deployment(api.plan_in_context(path), "vllm")
    stages = {p.stage for p in deployment.pools if p.name in deployment.generated}
    assert stages == {"prefill", "decode"}
    for name, text in deployment.files.items():
        if name.startswith("serve-"):
            assert "--kv-transfer-config" in text
            assert check_args(load_schema("vllm", "0.12.0"), _script_flags(text)) == []


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "planner", *args], check=False, capture_output=True, text=True, cwd=cwd)


def test_bad_target_exits_2_with_one_line_naming_the_option(tmp_path):
    result = _cli("deploy", "scenarios/agent-prefix-cache.yaml", "--target", "helm", "--out", str(tmp_path / "d"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--target" in lines[0] and "vllm, sglang, k8s" in lines[0]
    assert not (tmp_path / "d").exists()


def test_output_never_overwrites_inputs_and_needs_force_in_a_used_folder(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text((ROOT / "scenarios" / "agent-prefix-cache.yaml").read_text())
    before = scenario.read_bytes()
    result = _cli("deploy", str(scenario), "--target", "vllm", "--out", str(tmp_path), "--progress", "none")
    assert result.returncode == 2 and "--force" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
    result = _cli("deploy", str(scenario), "--target", "vllm", "--out", str(tmp_path), "--force", "--progress", "none")
    assert result.returncode == 0, result.stderr
    assert scenario.read_bytes() == before and (tmp_path / "README.md").exists()
    again = _cli("deploy", str(scenario), "--target", "k8s", "--out", str(tmp_path), "--progress", "none")
    assert again.returncode == 2  # the scenario is not a previous deploy's file: --force again


@pytest.mark.parametrize("engine", LAUNCH_ENGINES)
def test_speculative_pools_launch_with_their_method_and_draft_tokens(multi_node, engine):
    import dataclasses

    from planner.deploy import serving_context
    from planner.deploy.engines import build_launch
    from planner.perf.shapes import Speculation

    planned = multi_node[engine]
    pool = dataclasses.replace(build_deployment(planned, engine).pools[0], speculative=True)
    context = dataclasses.replace(serving_context(planned), speculation=Speculation("mtp", 2, 0.7))
    launch = build_launch(pool, context)
    assert check_args(launch.schema, launch.all_args()) == []
    flags = dict(launch.args)
    if engine == "vllm":
        assert json.loads(flags["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    else:
        assert flags["--speculative-algorithm"] == "EAGLE" and flags["--speculative-num-draft-tokens"] == "3"
    assert any("acceptance 0.7" in note for note in launch.notes)
