"""Fuzzing the boundary (issue 16): any mutation of a shipped scenario, any option value, gets exit 0, 1 (a
diagnosed infeasibility), 2 (one line naming the file or option and the field) or 4 (a time-limit stop); never a
traceback, never a message of more than a few KiB, never a file written outside the asked path."""

from __future__ import annotations

import copy
import math

import yaml
from helpers import INGEST_FIXTURES, SCENARIOS, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BASES = {name: yaml.safe_load((SCENARIOS / name).read_text()) for name in ("contact-center.yaml", "daily-hybrid.yaml")}

WILD_VALUES = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**18), max_value=10**18),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308, -1e308, 1e-308, 0.0, -0.0, 1e15, 1e30, 0.5, 1.5, -1.0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "=HYPERLINK(\"http://evil.example/\",\"x\")", "../../etc/passwd", "x/../../ESCAPED",
                     "8x", "eight", "inf", "nan", "1e999", "\u202e", "a" * 300]),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(st.sampled_from(["a", "peak_rps", "name"]), st.integers(-5, 5), max_size=2),
)  # fmt: skip


def paths_of(node, prefix=()):
    """Every (path, value) in a YAML document, mappings and lists included."""
    yield prefix, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from paths_of(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from paths_of(value, (*prefix, index))


def mutate(document, path, value, delete: bool):
    document = copy.deepcopy(document)
    if not path:
        return value
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return document


@st.composite
def mutated_scenarios(draw):
    base = draw(st.sampled_from(sorted(BASES)))
    paths = [p for p, _ in paths_of(BASES[base])]
    path = draw(st.sampled_from(paths))
    return base, mutate(BASES[base], path, draw(WILD_VALUES), draw(st.booleans()))


def check(result, tmp_path) -> None:
    output = (result.stdout or "") + (result.stderr or "")
    assert result.exit_code in (0, 1, 2, 4), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        assert len(result.stderr) < 4096, result.stderr[:500]
    written = {p.name for p in tmp_path.iterdir()}
    assert written <= {"scenario.yaml", "out"}, written


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=mutated_scenarios())
def test_any_mutated_scenario_validates_or_says_why(tmp_path_factory, case):
    _, document = case
    tmp_path = tmp_path_factory.mktemp("fuzz")
    path = tmp_path / "scenario.yaml"
    try:
        path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    except yaml.YAMLError:
        return
    check(invoke("validate", str(path)), tmp_path)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=mutated_scenarios())
def test_any_mutated_scenario_plans_or_says_why(tmp_path_factory, case):
    _, document = case
    tmp_path = tmp_path_factory.mktemp("fuzz")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    check(invoke("plan", str(path), "--time-limit", "5", "--json"), tmp_path)


OPTION_VALUES = st.sampled_from(["inf", "-inf", "nan", "1e308", "-1", "0", "1e30", "eight", "", "2.7", "99999999999"])


@settings(max_examples=60, deadline=None)
@given(
    command=st.sampled_from([
        ["peak", "--mean-rps", "{}"], ["peak", "--mean-rps", "10", "--quantile", "{}"], ["users", "--rps", "{}"],
        ["users", "--rps", "10", "--hours", "{}"],
        ["perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--isl", "{}", "--osl", "100"],
        ["perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--tp", "{}", "--isl", "100", "--osl", "100"],
        ["perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--isl", "100", "--osl", "100", "--concurrency", "{}"],
        ["perf", "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--isl", "100", "--osl", "100", "--ttft-ms", "{}"],
        ["plan", str(SCENARIOS / "contact-center.yaml"), "--time-limit", "{}"],
        ["plan", str(SCENARIOS / "contact-center.yaml"), "--perf-margin", "{}"],
        ["sensitivity", str(SCENARIOS / "contact-center.yaml"), "--demand", "{}", "--throughput", "1"],
    ]),
    value=OPTION_VALUES,
)
def test_any_option_value_is_answered_or_refused(tmp_path_factory, command, value):
    tmp_path = tmp_path_factory.mktemp("opts")
    result = invoke(*[part.replace("{}", value) for part in command])
    check(result, tmp_path)


CATALOG_FILES = {name: yaml.safe_load((SCENARIOS.parent / "catalogs" / name).read_text())
                 for name in ("systems.yaml", "gpus.yaml", "defaults.yaml", "models.yaml")}  # fmt: skip


@st.composite
def mutated_catalog_files(draw):
    name = draw(st.sampled_from(sorted(CATALOG_FILES)))
    document = CATALOG_FILES[name]
    if name != "defaults.yaml":  # a user catalog overrides a few entries: the first two, one of them mutated
        key = name.removesuffix(".yaml")
        document = {key: document[key][:2]}
    paths = [p for p, _ in paths_of(document)]
    return name, mutate(document, draw(st.sampled_from(paths)), draw(WILD_VALUES), draw(st.booleans()))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=mutated_catalog_files())
def test_any_mutated_user_catalog_loads_or_says_why(tmp_path_factory, case):
    name, document = case
    tmp_path = tmp_path_factory.mktemp("catalog")
    directory = tmp_path / "out"
    directory.mkdir()
    (directory / "catalog.yaml").write_text("name: fuzz\n")
    try:
        (directory / name).write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    except yaml.YAMLError:
        return
    result = invoke("validate", str(SCENARIOS / "contact-center.yaml"), "--catalog", str(directory))
    check(result, tmp_path)


INGEST = INGEST_FIXTURES
RESULT_FILES = {
    "vllm": INGEST / "vllm" / "sweep" / "vllm-64.0qps-concurrency32-Llama-3.1-8B-Instruct-20251002-102240.json",
    "genai-perf": INGEST / "genai-perf" / "new-layout" / "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8"
    / "profile_export_genai_perf.json",
    "genai-perf:aiperf": INGEST / "genai-perf" / "aiperf" / "meta-llama_Llama-3.1-8B-Instruct-openai-chat-concurrency8"
    / "profile_export_aiperf.json",
}  # fmt: skip


@st.composite
def mutated_results(draw):
    import json

    kind = draw(st.sampled_from(sorted(RESULT_FILES)))
    document = json.loads(RESULT_FILES[kind].read_text())
    paths = [p for p, _ in paths_of(document)]
    value = draw(WILD_VALUES)
    return kind, RESULT_FILES[kind].name, mutate(document, draw(st.sampled_from(paths)), value, draw(st.booleans()))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=mutated_results())
def test_any_damaged_benchmark_result_is_ingested_or_refused(tmp_path_factory, case):
    import json

    kind, name, document = case
    tmp_path = tmp_path_factory.mktemp("ingest")
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / name
    path.write_text(json.dumps(document, allow_nan=True))
    result = invoke("ingest", kind.split(":")[0], str(path), "--model", "llama-3.1-8b",
                    "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16")  # fmt: skip
    check(result, tmp_path)



@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_damaged_guidellm_report_is_ingested_or_refused(tmp_path_factory, data):
    import json

    document = json.loads((INGEST / "guidellm" / "old" / "benchmarks.json").read_text())
    path = data.draw(st.sampled_from([p for p, _ in paths_of(document)]))
    mutated = mutate(document, path, data.draw(WILD_VALUES), data.draw(st.booleans()))
    tmp_path = tmp_path_factory.mktemp("guidellm")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "benchmarks.json").write_text(json.dumps(mutated, allow_nan=True))
    result = invoke("ingest", "guidellm", str(folder / "benchmarks.json"), "--model", "llama-3.1-8b",
                    "--gpu", "H100-SXM-80GB", "--tp", "1", "--precision", "bf16")  # fmt: skip
    check(result, tmp_path)


SWEEP = {"scenario": str(SCENARIOS / "chat-and-summarize.yaml"), "grid": {"workloads.summarize.slo.itl_ms": [20, 60]},
         "monte_carlo": {"samples": 1, "seed": 7, "fields": {"workloads.summarize.peak_rps": {"uniform": [10, 30]}}},
         "pareto": {"x": "workloads.summarize.slo.itl_ms"}}  # fmt: skip


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutated_sweep_runs_or_says_why(tmp_path_factory, data):
    path = data.draw(st.sampled_from([p for p, _ in paths_of(SWEEP)]))
    mutated = mutate(SWEEP, path, data.draw(WILD_VALUES), data.draw(st.booleans()))
    tmp_path = tmp_path_factory.mktemp("sweep")
    folder = tmp_path / "out"
    folder.mkdir()
    try:
        (folder / "sweep.yaml").write_text(yaml.safe_dump(mutated, sort_keys=False, allow_unicode=True))
    except yaml.YAMLError:
        return
    check(invoke("sweep", str(folder / "sweep.yaml"), "--json"), tmp_path)


# ---- plan files (issue 33): any mutation of a saved plan is simulated, or refused naming the field ----
def _saved_plan(name: str) -> dict:
    import json

    result = invoke("plan", str(SCENARIOS / name), "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


PLAN_SCENARIOS = ("contact-center.yaml", "disaggregated-serving.yaml")
PLANS: dict[str, dict] = {}


@st.composite
def mutated_plans(draw):
    name = draw(st.sampled_from(PLAN_SCENARIOS))
    if name not in PLANS:
        PLANS[name] = _saved_plan(name)
    document = PLANS[name]
    # the parts the simulator reads: the plan's lines, instances, routes and assignments
    paths = [p for p, _ in paths_of(document) if p and p[0] in ("lines", "instances", "routing", "workloads", "periods")]
    return name, mutate(document, draw(st.sampled_from(paths)), draw(WILD_VALUES), draw(st.booleans()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=mutated_plans())
def test_any_mutated_plan_file_simulates_or_says_why(tmp_path_factory, case):
    import json

    name, document = case
    tmp_path = tmp_path_factory.mktemp("plans")
    path = tmp_path / "scenario.yaml"  # the name check() allows; it holds the plan
    try:
        path.write_text(json.dumps(document, allow_nan=True))
    except (TypeError, ValueError):
        return
    check(invoke("simulate", str(SCENARIOS / name), "--plan", str(path), "--duration", "20"), tmp_path)


TRACE_VALUES = st.one_of(
    st.sampled_from(["1e20", "1e12", "9223372036854775808", "-1", "nan", "inf", "", "1.5", "0", "10000000", "10000001",
                     "=1+1", "2023-11-16 18:15:46", "a" * 300, "1,000"]),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(row=st.integers(0, 2), column=st.integers(0, 2), value=TRACE_VALUES, jsonl=st.booleans(),
       depth=st.sampled_from([0, 1, 63, 65, 3000, 200_000]))  # fmt: skip
def test_any_damaged_trace_is_analyzed_or_refused(tmp_path_factory, row, column, value, jsonl, depth):
    """Magnitudes, types and (JSONL) nesting depths in a trace: `workload analyze` answers or exits 2, briefly."""
    import json

    rows = [["0", "100", "10"], ["30", "200", "20"], ["90", "300", "30"]]
    rows[row][column] = value
    tmp_path = tmp_path_factory.mktemp("trace")
    folder = tmp_path / "out"
    folder.mkdir()
    names = ("timestamp", "input_tokens", "output_tokens")
    if jsonl:
        path = folder / "trace.jsonl"
        nested = "[" * depth + "]" * depth
        lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in zip(names, cells))
                 + (f', "extra": {nested}' if i == row and depth else "") + "}" for i, cells in enumerate(rows)]  # fmt: skip
        path.write_text("\n".join(lines) + "\n")
    else:
        path = folder / "trace.csv"
        path.write_text("\n".join([",".join(names), *(",".join(json.dumps(c) for c in cells) for cells in rows)]) + "\n")
    check(invoke("workload", "analyze", str(path)), tmp_path)


# ---- engine blocks (issue 33): speculative decoding and layouts, any value at any depth ----
ENGINE_BASES = {
    "draft": ("moe-engines.yaml", None, {
        "speculative": {"method": "draft", "draft_model": "gpt-oss-20b", "draft_tokens": 3, "acceptance_rate": 0.7},
        "max_batch_ladder": [8, 32], "tp_ladder": [1, 2, 4, 8], "expert_parallel": True, "max_pipeline_nodes": 2,
        "token_budget": 8192}),
    "mtp": ("disaggregated-serving.yaml", "deepseek-r1", {
        "speculative": {"method": "mtp", "draft_tokens": 2, "acceptance_rate": 0.8},
        "tp_ladder": [8], "expert_parallel": True, "max_pipeline_nodes": 4}),
}  # fmt: skip
ENGINE_VALUES = st.one_of(
    WILD_VALUES,
    st.sampled_from(["mtp", "draft", "eagle", "llama-3.1-8b", "deepseek-v3", "gpt-oss-120b", 3, 16, 17, 64, 0.999,
                     [1, 2, 3], [16], [0], [10**9], []]),
)  # fmt: skip


@st.composite
def mutated_engine_blocks(draw):
    name = draw(st.sampled_from(sorted(ENGINE_BASES)))
    scenario, model, engine = ENGINE_BASES[name]
    document = copy.deepcopy(yaml.safe_load((SCENARIOS / scenario).read_text()))
    document["engine"] = engine
    if model is not None:
        for workload in document["workloads"]:
            workload["model"] = model
    paths = [p for p, _ in paths_of(document) if p and p[0] == "engine"]
    return mutate(document, draw(st.sampled_from(paths)), draw(ENGINE_VALUES), draw(st.booleans()))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(document=mutated_engine_blocks())
def test_any_mutated_engine_block_validates_or_says_why(tmp_path_factory, document):
    tmp_path = tmp_path_factory.mktemp("engine")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    check(invoke("validate", str(path)), tmp_path)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(document=mutated_engine_blocks())
def test_any_mutated_engine_block_plans_or_says_why(tmp_path_factory, document):
    """Pricing speculative MoE engines takes longer than the limit here: most cases end at --time-limit (exit 4),
    which is part of what is checked (every stage stops cleanly)."""
    tmp_path = tmp_path_factory.mktemp("engine")
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    check(invoke("plan", str(path), "--time-limit", "10", "--json"), tmp_path)


# ---- GuideLLM's CSV export (issue 33): never read, always refused by name, whatever it holds ----
GUIDELLM_CSV = (INGEST / "guidellm" / "benchmarks.csv").read_bytes()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, len(GUIDELLM_CSV)), insert=st.sampled_from([b"", b"\x00", b"\xff\xfe", b'"', b"\r", b"=1+1,",
                                                                        b"{" * 100_000, b"9" * 5000]),
       name=st.sampled_from(["benchmarks.csv", "benchmarks.json", "run_benchmarks.yaml"]))  # fmt: skip
def test_any_guidellm_csv_is_refused_by_name(tmp_path_factory, cut, insert, name):
    """The CSV export, cut anywhere and with bytes inserted there, under its own name or a report's: exit 2 naming
    the file (the JSON/YAML parsers see CSV text), never a traceback or a flood."""
    tmp_path = tmp_path_factory.mktemp("guidellm-csv")
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / name
    path.write_bytes(GUIDELLM_CSV[:cut] + insert + GUIDELLM_CSV[cut:])
    result = invoke("ingest", "guidellm", str(path), "--model", "llama-3.1-8b", "--gpu", "H100-SXM-80GB",
                    "--tp", "1", "--precision", "bf16")  # fmt: skip
    check(result, tmp_path)
    assert result.exit_code == 2 and name in result.stderr, result.stderr[:500]
