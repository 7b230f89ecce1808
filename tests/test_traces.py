"""Request traces: loading (formats, errors), rates per period, the length histogram, engine variants, the block."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import poisson

from planner.api import analyze_workload
from planner.errors import PlannerInputError
from planner.scenario import load_scenario
from planner.traces import load_trace
from planner.workload_analysis import analyze_trace, choose_variants, period_seconds
from helpers import SCENARIOS

DAY_RPS, NIGHT_RPS = 2.0, 0.5  # 08:00-20:00 UTC and the rest


def synthetic_requests(days: int = 2, seed: int = 7) -> pd.DataFrame:
    """Poisson arrivals at known hourly rates; 70% short requests (ISL 100-999, OSL 50-299), 30% long
    (ISL 2000-7999, OSL 100-499)."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2026-11-02", tz="UTC").timestamp()
    parts = []
    for hour in range(24 * days):
        rate = DAY_RPS if 8 <= hour % 24 < 20 else NIGHT_RPS
        count = rng.poisson(rate * 3600)
        arrivals = start + hour * 3600 + np.sort(rng.uniform(0, 3600, count))
        short = rng.random(count) < 0.7
        isl = np.where(short, rng.integers(100, 1000, count), rng.integers(2000, 8000, count))
        osl = np.where(short, rng.integers(50, 300, count), rng.integers(100, 500, count))
        parts.append(pd.DataFrame({"arrival": arrivals, "isl": isl, "osl": osl}))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def azure_trace(tmp_path_factory) -> Path:
    """The synthetic requests in the Azure LLM inference trace layout (TIMESTAMP, ContextTokens, GeneratedTokens)."""
    requests = synthetic_requests()
    path = tmp_path_factory.mktemp("traces") / "azure.csv"
    stamps = pd.to_datetime(requests["arrival"], unit="s").dt.strftime("%Y-%m-%d %H:%M:%S.%f")
    pd.DataFrame({"TIMESTAMP": stamps, "ContextTokens": requests["isl"], "GeneratedTokens": requests["osl"]}).to_csv(
        path, index=False
    )
    return path


@pytest.fixture(scope="module")
def analysis(azure_trace):
    return analyze_trace(load_trace(azure_trace), period_s=3600.0, engines=2, quantile=0.95)


def test_rates_per_period_are_recovered(analysis):
    assert len(analysis.profile) == 24
    for slot in analysis.profile:
        hour = int(slot.name[:2])
        expected = DAY_RPS if 8 <= hour < 20 else NIGHT_RPS
        # 2 hours of Poisson counts per slot: relative sd <= 1/sqrt(3600) = 1.7%
        assert slot.mean_rps == pytest.approx(expected, rel=0.06), slot
        assert slot.hours_per_year == pytest.approx(365.0)
    assert max(s.demand_factor for s in analysis.profile) == 1.0
    assert sum(s.hours_per_year for s in analysis.profile) == pytest.approx(8760.0)


def test_peak_follows_the_poisson_rule_and_matches_what_was_seen(analysis):
    busiest = analysis.busiest
    assert busiest.poisson_peak_rps == poisson.ppf(0.95, busiest.mean_rps)
    assert abs(busiest.observed_peak_rps - busiest.poisson_peak_rps) <= 1  # Poisson arrivals: the rule holds


def test_variants_cover_every_request_and_split_the_two_classes(azure_trace, analysis):
    trace = load_trace(azure_trace)
    variants = analysis.variants
    assert 1 <= len(variants) <= 2
    covered = np.zeros(trace.requests, dtype=bool)
    for v in variants:
        covered |= (trace.isl_tokens <= v.max_isl_tokens) & (trace.osl_tokens <= v.max_osl_tokens)
    assert covered.all()
    assert (variants[-1].max_isl_tokens, variants[-1].max_osl_tokens) == (trace.isl_tokens.max(), trace.osl_tokens.max())
    assert sum(v.requests for v in variants) == trace.requests
    short = variants[0]
    assert short.max_isl_tokens < 2000 and short.share == pytest.approx(0.7, abs=0.03)
    assert analysis.padding_fraction < analysis.single_variant_padding_fraction


def test_variant_choice_is_optimal_against_brute_force():
    rng = np.random.default_rng(3)
    requests = pd.DataFrame({"time": np.arange(300.0), "input_tokens": rng.integers(1, 4000, 300),
                             "output_tokens": rng.integers(1, 600, 300)})  # fmt: skip
    trace = _trace_from_frame(requests)
    chosen = choose_variants(trace, 3)
    waste = sum(v.padding_tokens for v in chosen)
    from planner.workload_analysis import _thresholds

    isl_levels, osl_levels = _thresholds(trace.isl_tokens), _thresholds(trace.osl_tokens)
    largest = (isl_levels[-1], osl_levels[-1])
    pairs = [(i, o) for i in isl_levels for o in osl_levels]
    best = None
    for extra in itertools.combinations(pairs, 2):
        opened = [largest, *extra]
        fits = [(trace.isl_tokens <= i) & (trace.osl_tokens <= o) for i, o in opened]
        cost = [np.where(f, i + o - trace.isl_tokens - trace.osl_tokens, np.inf) for f, (i, o) in zip(fits, opened)]
        total = np.min(np.vstack(cost), axis=0).sum()
        best = total if best is None else min(best, total)
    assert waste == pytest.approx(best)


def _trace_from_frame(frame: pd.DataFrame, tmp: Path | None = None):
    import tempfile

    directory = Path(tempfile.mkdtemp()) if tmp is None else tmp
    path = directory / "trace.csv"
    frame.to_csv(path, index=False)
    return load_trace(path)


def test_jsonl_with_openai_usage_and_numeric_ms_timestamps(tmp_path):
    lines = [{"ts": 1000 * i, "usage": {"prompt_tokens": 100 + i, "completion_tokens": 20}} for i in range(50)]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    trace = load_trace(path, time_unit="ms")
    assert trace.columns == ("ts", "usage.prompt_tokens", "usage.completion_tokens")
    assert trace.duration_s == pytest.approx(49.0) and trace.isl_tokens[-1] == 149


def test_a_short_trace_gives_no_profile_and_sizes_for_its_busiest_period(tmp_path):
    frame = pd.DataFrame({"time": np.linspace(0, 7199, 7200), "input_tokens": 500, "output_tokens": 100})
    trace = _trace_from_frame(frame, tmp_path)
    result = analyze_trace(trace, period_s=3600.0, engines=2)
    assert result.profile == () and any("no daily profile" in note for note in result.notes)
    assert result.busiest.mean_rps == pytest.approx(1.0, rel=1e-3)  # the last window ends at the last arrival
    assert len(result.variants) == 1 and result.variants[0].padding_tokens == 0


@pytest.mark.parametrize(
    "content, field, words",
    [
        ("when,prompt,answer\n1,2,3\n", "time", "no time column found"),
        ("timestamp,input_tokens,output_tokens\nyesterday,2,3\n", "timestamp (request 1)", "not a timestamp"),
        ("timestamp,input_tokens,output_tokens\n1,-2,3\n", "input_tokens (request 1)", "whole number >= 0"),
        ("timestamp,input_tokens,output_tokens\n1,2,3.5\n", "output_tokens (request 1)", "whole number >= 0"),
        ("timestamp,input_tokens,output_tokens\n", "", "no requests"),
    ],
)
def test_bad_traces_name_the_column_and_the_request(tmp_path, content, field, words):
    path = tmp_path / "trace.csv"
    path.write_text(content)
    with pytest.raises(PlannerInputError) as error:
        load_trace(path)
    assert error.value.field == field and words in str(error.value)


def test_bad_jsonl_line_is_named(tmp_path, cli):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 1, "input_tokens": 2, "output_tokens": 3}\n{not json\n')
    code, out, err = cli("workload", "analyze", path)
    assert code == 2 and "trace.jsonl: line 2: not a JSON object" in err and "Traceback" not in err


@pytest.mark.parametrize("text, seconds", [("hour", 3600), ("15min", 900), ("30s", 30), ("2h", 7200), ("day", 86400)])
def test_period_spellings(text, seconds):
    assert period_seconds(text) == seconds


def test_unknown_period_is_an_input_error():
    with pytest.raises(PlannerInputError):
        period_seconds("fortnight")


def test_block_added_to_a_base_scenario_validates_and_plans(azure_trace, tmp_path, cli):
    out = tmp_path / "with-trace.yaml"
    code, stdout, err = cli(
        "workload", "analyze", azure_trace, "--model", "llama-3.1-8b", "--name", "chat",
        "--base", SCENARIOS / "llama3-8b-assistant.yaml", "--out", out,
    )  # fmt: skip
    assert code == 0, err
    document = yaml.safe_load(out.read_text())
    chat = next(w for w in document["workloads"] if w["name"] == "chat")
    assert sum(b["share"] for b in chat["buckets"]) == pytest.approx(1.0, abs=1e-9)
    assert len(document["periods"]) == 24
    from planner.catalog import load_catalog

    scenario = load_scenario(out, load_catalog())
    assert {w.name for w in scenario.workloads} == {"assistant", "chat"}
    code, stdout, err = cli("plan", out, "--json")
    assert code == 0, err
    assert {w["name"] for w in json.loads(stdout)["workloads"]} == {"assistant", "chat"}


def test_base_needs_a_model(azure_trace):
    with pytest.raises(PlannerInputError) as error:
        analyze_workload(azure_trace, base_scenario=SCENARIOS / "llama3-8b-assistant.yaml")
    assert error.value.file == "--model"


def test_unknown_model_is_refused_before_reading_the_trace(tmp_path):
    with pytest.raises(PlannerInputError) as error:
        analyze_workload(tmp_path / "absent.csv", model="llama-9")
    assert "unknown model 'llama-9'" in str(error.value)


def test_bucket_maximum_below_its_length_is_refused(tmp_path, cli):
    document = yaml.safe_load((SCENARIOS / "llama3-8b-assistant.yaml").read_text())
    workload = document["workloads"][0]
    for key in ("isl_tokens", "osl_tokens"):
        workload.pop(key)
    workload["buckets"] = [{"isl_tokens": 2000, "osl_tokens": 200, "max_isl_tokens": 1000, "share": 1.0}]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(document))
    code, out, err = cli("validate", path)
    assert code == 2 and "max_isl_tokens (1000) must be >= isl_tokens (2000)" in err


def test_a_replaced_workload_keeps_its_limits_engines_and_mode(azure_trace, tmp_path):
    base = yaml.safe_load((SCENARIOS / "chat-and-code-p95.yaml").read_text())
    base["workloads"][0]["engines"] = ["vllm", "sglang"]
    base["workloads"][0]["precisions"] = ["fp8"]
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(base))
    answer = analyze_workload(azure_trace, model="llama-3.3-70b", name="chat", base_scenario=path, period="day")
    chat = next(w for w in answer.scenario_document["workloads"] if w["name"] == "chat")
    assert chat["slo"] == base["workloads"][0]["slo"]
    assert chat["engines"] == ["vllm", "sglang"] and chat["precisions"] == ["fp8"]
    assert chat["mode"] == "streaming" and "buckets" in chat and "isl_tokens" not in chat  # the trace's lengths
    assert set(answer.kept) == {"slo", "engines", "precisions", "mode"}
    # a mode given on the command line wins over the base's
    answer = analyze_workload(azure_trace, model="llama-3.3-70b", name="chat", base_scenario=path, period="day",
                              mode="sequential")  # fmt: skip
    assert next(w for w in answer.scenario_document["workloads"] if w["name"] == "chat")["mode"] == "sequential"


def test_the_trace_demand_scales_to_a_stated_peak_or_by_a_factor(azure_trace):
    plain = analyze_workload(azure_trace, model="llama-3.1-8b", period="day")
    mean = plain.block["workloads"][0]["mean_rps"]
    peaked = analyze_workload(azure_trace, model="llama-3.1-8b", period="day", peak_rps=40.0)
    workload = peaked.block["workloads"][0]
    assert workload["peak_rps"] == 40.0 and "mean_rps" not in workload and "peak_quantile" not in workload
    assert "40" in peaked.scaled
    tripled = analyze_workload(azure_trace, model="llama-3.1-8b", period="day", scale=3.0)
    assert tripled.block["workloads"][0]["mean_rps"] == pytest.approx(3 * mean, rel=1e-3)
    with pytest.raises(PlannerInputError) as error:
        analyze_workload(azure_trace, model="llama-3.1-8b", peak_rps=40.0, scale=2.0)
    assert error.value.file == "--peak-rps"
