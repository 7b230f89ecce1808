"""`vllm bench serve --save-result` (and the older `benchmarks/benchmark_serving.py`): one flat JSON per run.

Keys (vLLM 0.33.0 `vllm/benchmarks/serve.py`; see tests/fixtures/ingest/vllm/FORMAT.md): `model_id`,
`max_concurrency` (null = unbounded), `request_rate` (float or the string "inf"), `completed`, `duration` (s),
`total_input_tokens`, `total_output_tokens`, `request_throughput`, `output_throughput`, and per metric
`{mean,median,std}_{ttft,tpot,itl,e2el}_ms` plus `p{P}_..._ms`. ISL/OSL = totals / completed. `--append-result`
files hold one object per line; a sweep's `summary.json` holds a list of runs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from planner.errors import PlannerInputError, bounded_listing, clip_text
from planner.ingest import NotARun, Run, count, little_concurrency, number, read_result_text, require
from planner.loading import parse_json

WHAT = "vllm bench serve result"
_STAT_PREFIX = {"mean": "mean", "median": "median", "p90": "p90", "p95": "p95", "p99": "p99"}


FILE_NAMES = "*.json written by vllm bench serve --save-result"
_SUMMARY_KEYS = ("Test name", "Tput (req/s)")  # vLLM nightly benchmarks' summary table (benchmark_results.json)


def is_result_file(path: Path) -> bool:
    return path.suffix == ".json" and not path.name.endswith(".pytorch.json")


def _summary_table(document) -> bool:
    return isinstance(document, list) and bool(document) and all(
        isinstance(o, dict) and all(k in o for k in _SUMMARY_KEYS) for o in document
    )


def _objects(path: Path) -> list[dict]:
    text = read_result_text(path)
    try:
        document = parse_json(text, str(path))
        objects = document if isinstance(document, list) else [document]
    except json.JSONDecodeError as whole:
        try:  # --append-result: one object per line
            objects = [parse_json(line, str(path), f"line {number}")
                       for number, line in enumerate(text.splitlines(), start=1) if line.strip()]  # fmt: skip
        except json.JSONDecodeError:
            raise PlannerInputError(
                str(path), f"line {whole.lineno}", f"not valid JSON ({whole.msg}): not a {WHAT}, or a truncated one"
            ) from None
    if _summary_table(objects):
        raise NotARun("a vLLM nightly-benchmark summary table (benchmark_results.json, one line per test), not a run: "
                      "it records no token counts")  # fmt: skip
    if not objects or not all(isinstance(o, dict) for o in objects):
        raise PlannerInputError(str(path), "", f"expected a JSON object: not a {WHAT}")
    return objects


def _latency(result: dict, metric: str, statistic: str, file: str, required: bool) -> float | None:
    key = f"{_STAT_PREFIX[statistic]}_{metric}_ms"
    if key in result and result[key] is not None:
        return number(result[key], file, key)
    if statistic.startswith("p") and any(k.endswith(f"_{metric}_ms") for k in result):
        percentiles = sorted(k for k in result if k.startswith("p") and k.endswith(f"_{metric}_ms"))
        raise PlannerInputError(
            file, key, f"the run did not record this percentile (it has: {bounded_listing(percentiles) or 'none'}); "
            "re-run with --metric-percentiles, or ingest with --statistic mean/median",
        )  # fmt: skip
    if required:
        raise PlannerInputError(file, key, f"missing key '{key}': not a {WHAT} with {metric} (see --percentile-metrics)")
    return None


def _mean_e2e(result: dict, osl: float, file: str, notes: list[str]) -> float | None:
    """Mean end-to-end latency, ms: Little's law needs the mean whatever --statistic reports. Files without
    `mean_e2el_ms` give mean TTFT + (mean OSL - 1) x mean TPOT (per request TPOT = (E2E - TTFT) / (OSL - 1))."""
    if result.get("mean_e2el_ms") is not None:
        return number(result["mean_e2el_ms"], file, "mean_e2el_ms")
    # the pooled mean gap (ITL) is exact: the mean of (OSL_i - 1) x TPOT_i is (mean OSL - 1) x the mean gap; the
    # mean TPOT weighs short requests as much as long ones
    key = "mean_itl_ms" if result.get("mean_itl_ms") is not None else "mean_tpot_ms"
    ttft, gap = result.get("mean_ttft_ms"), result.get(key)
    if ttft is None or gap is None:
        return None
    notes.append(f"mean E2E not recorded: taken as mean TTFT + (mean OSL - 1) x {key}")
    return number(ttft, file, "mean_ttft_ms") + (osl - 1) * number(gap, file, key)


CACHE_MIN_REQUESTS = 20  # per-request records needed to tell
CACHE_MIN_ISL_CV = 0.2  # prompts must differ this much (coefficient of variation) for TTFT to have to follow them
CACHE_MAX_CORRELATION = 0.3  # a cold prefill's TTFT grows with its prompt: corr(TTFT, ISL) 0.94 in a 1 request/s run


def prefix_cache_hits(result: dict) -> str | None:
    """Why a run's TTFT is not a cold prefill, or None. With per-request `input_lens` and `ttfts` (--save-detailed),
    a run whose prompts vary in length (CV >= 0.2) but whose TTFT does not grow with them (corr(TTFT, ISL) < 0.3)
    served its prompts from the prefix cache: vLLM benchmarks that replay the same dataset hit it from the second
    run on (../shared/real/bench/vllm: corr 0.94 at 1 request/s, then 0.08 and 0.14 at 4 and 16). A run that sends
    every request at once (rate inf, no concurrency) is not judged: its TTFT is its place in the queue, whatever
    the prompt."""
    lengths, ttfts = result.get("input_lens"), result.get("ttfts")
    if not isinstance(lengths, list) or not isinstance(ttfts, list) or len(lengths) != len(ttfts):
        return None
    pairs = [(float(i), float(t)) for i, t in zip(lengths, ttfts)
             if isinstance(i, (int, float)) and isinstance(t, (int, float)) and math.isfinite(i) and math.isfinite(t) and t > 0]
    if len(pairs) < CACHE_MIN_REQUESTS:
        return None
    isl, ttft = [p[0] for p in pairs], [p[1] for p in pairs]
    mean_isl = statistics.fmean(isl)
    if mean_isl <= 0 or statistics.pstdev(isl) / mean_isl < CACHE_MIN_ISL_CV or statistics.pstdev(ttft) == 0:
        return None
    correlation = statistics.correlation(isl, ttft)
    if correlation >= CACHE_MAX_CORRELATION:
        return None
    return (f"TTFT does not grow with the prompt (corr(TTFT, ISL) = {correlation:.2f} over {len(pairs)} requests whose "
            f"ISL varies {statistics.pstdev(isl) / mean_isl:.0%}): the prompts hit the engine's prefix cache, so the "
            "row keeps no TTFT (no cold prefill was measured) and its throughput is a cached one")  # fmt: skip


def parse_result(result: dict, file: str, statistic: str, concurrency_override: int | None = None) -> Run:
    model_id = require(result, "model_id", file, WHAT)
    completed = number(require(result, "completed", file, WHAT), file, "completed")
    if completed <= 0:
        raise PlannerInputError(file, "completed", "no request completed in this run: nothing to ingest")
    completed = count(completed, file, "completed")  # a count of requests: 1e-308 or 2.5 is not one
    number(require(result, "duration", file, WHAT), file, "duration")  # a run without its duration is incomplete
    isl = number(require(result, "total_input_tokens", file, WHAT), file, "total_input_tokens") / completed
    osl = number(require(result, "total_output_tokens", file, WHAT), file, "total_output_tokens") / completed
    rps = number(require(result, "request_throughput", file, WHAT), file, "request_throughput")
    tokens_per_s = result.get("output_throughput")
    ttft = _latency(result, "ttft", statistic, file, required=True)
    # vLLM's TPOT is per request ((E2E - TTFT) / (OSL - 1)), its ITL the gaps between streamed chunks pooled over
    # all requests: the planner's tpot_ms and itl_ms (docs/metrics.md)
    tpot = _latency(result, "tpot", statistic, file, required=False)
    itl = _latency(result, "itl", statistic, file, required=False)
    notes = [f"ISL/OSL = total tokens / {int(completed)} completed requests"]
    if result.get("failed"):
        notes.append(f"{clip_text(result['failed'])} requests failed")
    raw_rate = result.get("request_rate")
    rate = None if raw_rate in (None, "inf") else number(raw_rate, file, "request_rate")
    concurrency = result.get("max_concurrency") if concurrency_override is None else concurrency_override
    run_kind = "online"
    if concurrency is None:
        if rate is None:
            run_kind = "max-throughput"
            notes.append("no --max-concurrency and rate inf: every request sent at once")
        else:
            run_kind = "request-rate"
            concurrency = little_concurrency(rps, _mean_e2e(result, osl, file, notes))
            notes.append("concurrency = mean requests in flight = request_throughput x mean E2E (Little's law): the "
                         "run offered a rate, not a concurrency")  # fmt: skip
    cached = None if run_kind == "max-throughput" else prefix_cache_hits(result)
    if cached is not None:
        ttft = None
    return Run(
        tool="vllm bench serve", tool_version=None, file=file, model_name=str(model_id),
        concurrency=count(concurrency, file, "max_concurrency") if concurrency is not None else None, request_rate=rate,
        isl=isl, osl=osl,
        ttft_ms=ttft, tpot_ms=tpot, itl_ms=itl, request_throughput_rps=rps,
        output_tokens_per_s=number(tokens_per_s, file, "output_throughput") if tokens_per_s is not None else None,
        statistic=statistic, run_kind=run_kind, notes=tuple(notes), requests=int(completed), cached_prompts=cached,
    )  # fmt: skip


def parse_file(path: Path, statistic: str, concurrency_override: int | None = None) -> list[Run]:
    """Every run in a result file (one, or several with --append-result / a sweep summary)."""
    return [parse_result(obj, str(path), statistic, concurrency_override) for obj in _objects(path)]
