"""`planner check`: benchmark results read back (planner/ingest's readers), each run matched to a pool of the plan
and judged against the performance model evaluated at the run's own load (its offered request rate, or its
concurrency), per metric: within band, optimistic (the plan promised better than measured, beyond the band) or
pessimistic (worse than measured, beyond the band)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from planner.bench.loads import MEASURED_BAND, workload_loads
from planner.perf.point_engine import OPEN_LOOP_PROVENANCE
from planner.deploy.pools import Pool, plan_pools
from planner.errors import PlannerInputError
from planner.ingest import (
    Engine,
    IngestOptions,
    NotARun,
    Run,
    files_below,
    model_of,
    stated_precision,
    stated_tp,
)
from planner.perf.types import Layout, PerfQuery

CHECK_TOOLS = ("auto", "vllm", "genai-perf", "aiperf", "guidellm")
_MODULES = {"genai-perf": "genai_perf", "aiperf": "genai_perf", "vllm": "vllm", "guidellm": "guidellm"}
MAX_RESULT_FILES = 10_000
# e = (planned - measured) / measured: the plan promised better than was measured beyond the band (a latency's e
# below -band, a throughput's above +band) is optimistic, worse beyond it pessimistic
JUDGED = ("ttft_ms", "tpot_ms", "itl_ms", "throughput")


@dataclass(frozen=True)
class Verdict:
    metric: str
    measured: float | None
    planned: float | None
    band: float
    verdict: str  # within band | optimistic | pessimistic | not judged
    why: str = ""

    @property
    def error(self) -> float | None:
        """(planned - measured) / measured."""
        if self.measured is None or self.planned is None or self.measured <= 0:
            return None
        return self.planned / self.measured - 1.0


@dataclass(frozen=True)
class RunCheck:
    file: str
    tool: str
    pool: str
    workload: str | None
    load: str  # 'Poisson 4 requests/s per instance' or 'concurrency 8'
    statistic: str
    percentile: float
    isl: float
    osl: float
    verdicts: tuple[Verdict, ...]
    planned_from: str  # the model's provenance and where the band comes from
    notes: tuple[str, ...]
    run: Run
    engine: Engine  # what the run measured (from the file, the rest from the pool: notes say which)
    calibrates: str | None  # None: its row joins the calibration; else why not

    @property
    def flagged(self) -> tuple[str, ...]:
        return tuple(v.metric for v in self.verdicts if v.verdict in ("optimistic", "pessimistic"))


@dataclass(frozen=True)
class Unmatched:
    file: str
    why: str


def check_tool(tool: str) -> str:
    if tool not in CHECK_TOOLS:
        raise PlannerInputError("--tool", "tool", f"unknown '{str(tool)[:40]}'; allowed: {', '.join(CHECK_TOOLS)}")
    return tool


def tool_of(path: Path) -> str | None:
    """The tool whose result file `path` is by its name (AIPerf and genai-perf exports, GuideLLM reports, else a
    vLLM JSON), None for none."""
    from planner.ingest import genai_perf, guidellm, vllm

    if genai_perf.is_result_file(path):
        return "aiperf" if "aiperf" in path.name else "genai-perf"
    if guidellm.is_result_file(path):
        return "guidellm"
    if vllm.is_result_file(path) and path.name not in ("expected.json", "plan.json"):
        return "vllm"
    return None


def result_files(paths, tool: str) -> list[tuple[Path, str, bool]]:
    """(file, tool, named on its own) for RESULTS: files as given, directories searched."""
    import importlib

    found: list[tuple[Path, str, bool]] = []
    for path in map(Path, paths):
        if path.is_dir():
            for file in files_below(path):
                kind = tool_of(file) if tool == "auto" else (
                    tool if importlib.import_module(f"planner.ingest.{_MODULES[tool]}").is_result_file(file) else None)  # fmt: skip
                if kind is not None:
                    found.append((file, kind, False))
        elif path.exists():
            kind = tool if tool != "auto" else tool_of(path)
            if kind is None:
                raise PlannerInputError(str(path), "", "not a result file of a known tool by its name; give --tool "
                                        f"({', '.join(CHECK_TOOLS[1:])})")  # fmt: skip
            found.append((path, kind, True))
        else:
            raise PlannerInputError(str(path), "", "no such file or directory")
        if len(found) > MAX_RESULT_FILES:
            raise PlannerInputError(str(path), "", f"more than {MAX_RESULT_FILES:,} result files: name the run folders")
    if not found:
        raise PlannerInputError(str(paths[0]) if paths else "RESULTS", "", "no result files found (AIPerf, genai-perf, "
                                "GuideLLM or vLLM)")  # fmt: skip
    return found


def _statistic(percentile: float) -> str:
    return {90.0: "p90", 95.0: "p95", 99.0: "p99"}.get(float(percentile), "median")


def _parse(file: Path, tool: str, statistic: str) -> list[Run]:
    import importlib

    parser = importlib.import_module(f"planner.ingest.{_MODULES[tool]}")
    try:
        return parser.parse_file(file, statistic, None)
    except NotARun:
        raise
    except PlannerInputError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        raise PlannerInputError(str(file), "", f"not a {tool} result of a known layout: {type(exc).__name__}") from None


def _candidates(file: Path, runs: list[Run], pools: tuple[Pool, ...], catalog) -> tuple[list[Pool], list[str]]:
    """The pools a file's runs may have measured and how they were narrowed (raises PlannerInputError on a model
    the catalog lacks or a stated pipeline split)."""
    model, names, model_note = model_of(runs, IngestOptions(), catalog, str(file))
    notes = [model_note]
    left = [p for p in pools if p.model == model]
    if not left:
        raise PlannerInputError(str(file), "model", f"{model}: the plan has no pool of it "
                                f"(its pools serve {', '.join(sorted({p.model for p in pools}))})")  # fmt: skip
    named = [p for p in left if p.name in file.parts]
    if named:
        return named, [*notes, f"pool {named[0].name} named in the path"]
    tp, tp_where = stated_tp(file)
    if tp is not None:
        narrowed = [p for p in left if p.layout.tp == tp]
        if not narrowed:
            raise PlannerInputError(str(file), "tp", f"TP {tp} ({tp_where}), but the plan's {model} pools are "
                                    f"{', '.join(sorted({p.layout_label for p in left}))}")  # fmt: skip
        left, notes = narrowed, [*notes, f"TP {tp} from {tp_where}"]
    precision, where = stated_precision(file, names, catalog.models[model])
    if precision is not None:
        narrowed = [p for p in left if p.precision == precision]
        if not narrowed:
            raise PlannerInputError(str(file), "precision", f"{precision} ({where}), but the plan's {model} pools "
                                    f"run {', '.join(sorted({str(p.precision) for p in left}))}")  # fmt: skip
        left, notes = narrowed, [*notes, f"{precision} from {where}"]
    return left, notes


def _service_of(file: Path, loads) -> tuple[object, bool]:
    """(the workload whose results folder holds the file, whether it is a Service run): results/<service>/<target>/."""
    parts = file.parts
    for load in loads:
        if load.service in parts:
            index = parts.index(load.service)
            return load, index + 1 < len(parts) and parts[index + 1] == "service"
    return None, False


def planned_at(planned, pool: Pool, run: Run, percentile: float, per_instance_rps: float | None):
    """The model's answer for the pool's engine at the run's load (a rate per instance, or its concurrency) and
    lengths, at `percentile`; a string saying why there is none."""
    from planner.perf import PerfMiss, estimate
    from planner.perf.engine_curve import modeled_points

    catalog, scenario = planned.catalog, planned.scenario
    layout = pool.layout if pool.layout.beyond_tp else None
    query = PerfQuery(pool.model, pool.gpu, max(1, round(run.isl)), max(1, round(run.osl)), pool.layout.tp, pool.precision,
                      None if per_instance_rps else run.concurrency, token_budget=scenario.token_budget,
                      arrivals="poisson" if per_instance_rps else "closed", rate_rps=per_instance_rps or None,
                      engine=pool.engine, layout=layout)  # fmt: skip
    system = catalog.systems[pool.system]
    hop = (system.network_bytes_per_s(pool.layout.tp * pool.layout.dp) or 0.0) if pool.layout.pp > 1 else 0.0
    points = modeled_points(query, catalog, pool.layout.tp, pool.precision or "bf16", percentile,
                            engine_lengths=(max(pool.engine_isl, query.isl), max(pool.engine_osl, query.osl)),
                            layout=layout or Layout(pool.layout.tp), hop_bytes_per_s=hop)  # fmt: skip
    if not isinstance(points, str) and points:
        return points[0]
    answer = estimate(query, catalog, sources=scenario.perf_sources, percentile=percentile)
    if isinstance(answer, PerfMiss):
        return answer.reason if isinstance(points, str) else "no point of the model at the run's load"
    return answer


def rows_reach(catalog, pool: Pool, run: Run, per_instance_rps: float | None) -> bool:
    """Whether benchmark rows of the pool's engine (model, GPU, TP, precision, serving engine) reach the run's load:
    its rate per instance up to their highest throughput, or its concurrency up to their highest."""
    from planner.perf.tables import rows_for

    rows = [r for r in rows_for(catalog, pool.model, pool.gpu, pool.engine)
            if r.is_measurement and r.tp == pool.layout.tp and r.precision == pool.precision and r.per == "instance"]  # fmt: skip
    if per_instance_rps:
        return any((r.request_throughput_rps or 0.0) * 1.05 >= per_instance_rps for r in rows)
    return run.concurrency is not None and any((r.concurrency or 0) >= run.concurrency for r in rows)


def _band(answer, metric: str, within_rows: bool) -> tuple[float, str]:
    error = answer.expected_error
    anchored = "anchored on" in (answer.source or "")
    if answer.provenance == OPEN_LOOP_PROVENANCE:  # a row's engine re-rated for random arrivals: no error measured
        return MEASURED_BAND, (f"{answer.provenance}: a benchmark row's engine (steps fitted to the row) sized for "
                               "requests arriving at random; its error against real runs has not been measured, "
                               f"+-{MEASURED_BAND:.0%} is the planner's tolerance (a choice)")  # fmt: skip
    if answer.provenance == "measured" or not error or (anchored and within_rows):
        return MEASURED_BAND, (f"{answer.provenance}, the model running through benchmark rows of this engine that "
                               f"reach the run's load; +-{MEASURED_BAND:.0%} is the planner's tolerance (a choice)")  # fmt: skip
    key = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "throughput": "throughput"}[metric]
    value = float(error.get(key, error.get("tpot", 0.0)))
    beyond = ", beyond the load its benchmark rows reach" if anchored else ""
    return value, (f"{answer.provenance}{beyond}: the expected error of {answer.engine} {answer.engine_version} on this "
                   "GPU generation (80% of its class's held-out errors, catalogs/engines/classes.csv)")  # fmt: skip


def judge(metric: str, measured: float | None, planned: float | None, band: float, why: str = "") -> Verdict:
    if measured is None or planned is None or measured <= 0:
        return Verdict(metric, measured, planned, band, "not judged", why or ("not measured" if measured is None else "not planned"))
    error = planned / measured - 1.0
    if metric == "throughput":
        error = -error
    verdict = "optimistic" if error < -band else "pessimistic" if error > band else "within band"
    return Verdict(metric, measured, planned, band, verdict, why)


def _verdicts(run: Run, answer, per_instance_rps: float | None, within_rows: bool) -> tuple[tuple[Verdict, ...], str]:
    bands = {m: _band(answer, m, within_rows) for m in JUDGED}
    out = []
    for metric, measured, planned in (("ttft_ms", run.ttft_ms, answer.ttft_ms), ("tpot_ms", run.tpot_ms, answer.tpot_ms),
                                      ("itl_ms", run.itl_ms, answer.itl_ms)):  # fmt: skip
        why = run.cached_prompts if metric == "ttft_ms" and run.cached_prompts else ""
        out.append(judge(metric, None if why else measured, planned, bands[metric][0], why))
    if per_instance_rps:
        out.append(Verdict("throughput", run.request_throughput_rps, answer.request_throughput_rps, bands["throughput"][0],
                           "not judged", "a run at a set rate puts through what it is offered while the engine keeps "
                           "up; its measured figure is set by the run's length (the last requests' drain)"))  # fmt: skip
    else:
        out.append(judge("throughput", run.request_throughput_rps, answer.request_throughput_rps, bands["throughput"][0]))
    return tuple(out), bands["tpot_ms"][1]


def check_runs(planned, paths, tool: str = "auto") -> tuple[tuple[RunCheck, ...], tuple[Unmatched, ...]]:
    """Every run of RESULTS judged against the plan's pools, and the files that match none (with why)."""
    check_tool(tool)
    pools = plan_pools(planned.plan, planned.scenario, planned.catalog)
    loads = workload_loads(planned.plan, planned.scenario, planned.catalog)
    checks: list[RunCheck] = []
    unmatched: list[Unmatched] = []
    for file, kind, _ in result_files(list(paths), tool):
        try:
            runs = _parse(file, kind, "median")
            candidates, notes = _candidates(file, runs, pools, planned.catalog)
        except NotARun as reason:
            unmatched.append(Unmatched(str(file), f"not a run: {reason}"))
            continue
        except PlannerInputError as error:
            unmatched.append(Unmatched(str(file), f"{error.problem.field}: {error.problem.message}".lstrip(": ")))
            continue
        load, service_run = _service_of(file, loads)
        if len(candidates) > 1:
            unmatched.append(Unmatched(str(file), f"matches {len(candidates)} pools ({', '.join(p.name for p in candidates)}): "
                                       "put the pool's name in the path (results/<workload>/<pool>/..., as the "
                                       "scripts of `planner bench` do)"))  # fmt: skip
            continue
        pool = candidates[0]
        instances = 1
        if service_run:
            shares = [p for p in load.pools if p.pool.stage == "aggregated"]
            if len(load.pools) != 1 or not shares:
                unmatched.append(Unmatched(str(file), f"a run against the Service {load.service}, which {len(load.pools)} "
                                           "pools serve: run each pool's target to judge them"))  # fmt: skip
                continue
            instances = shares[0].instances
            notes.append(f"a Service run: its rate divided among the pool's {instances} instances (requests spread evenly)")
        workloads = [w for w in planned.scenario.workloads if w.name in pool.workloads]
        if load is not None and load.name in pool.workloads:
            workloads = [w for w in workloads if w.name == load.name]
        percentile = max((w.slo.percentile for w in workloads), default=50.0)
        statistic = _statistic(percentile)
        if statistic != "median":
            try:
                runs = _parse(file, kind, statistic)
            except (PlannerInputError, NotARun):
                statistic = "median"
                notes.append(f"the file records no {_statistic(percentile)}: judged at the median (the model at P50)")
        judged_at = 50.0 if statistic == "median" else percentile
        for run in runs:
            checks.append(_run_check(planned, pool, run, file, kind, notes, instances, statistic, judged_at,
                                     load.name if load is not None else (workloads[0].name if workloads else None)))  # fmt: skip
    if not checks:
        reasons = "; ".join(f"{Path(u.file).name}: {u.why}" for u in unmatched[:3])
        raise PlannerInputError("RESULTS", "", f"no run matches a pool of the plan ({reasons}"
                                f"{'; ...' if len(unmatched) > 3 else ''})")  # fmt: skip
    return tuple(checks), tuple(unmatched)


def _run_check(planned, pool: Pool, run: Run, file: Path, kind: str, notes: list[str], instances: int,
               statistic: str, percentile: float, workload: str | None) -> RunCheck:  # fmt: skip
    per_instance = run.request_rate / instances if run.request_rate else None
    notes = list(notes) + [f"GPU {pool.gpu}, {pool.engine} {pool.engine_version or ''} and the layout from the plan's "
                           "pool (a result file does not record them)".replace("  ", " ")]  # fmt: skip
    engine = Engine(pool.model, pool.gpu, pool.layout.tp, pool.layout.tp, pool.precision or "bf16", "instance", tuple(notes))
    calibrates = None
    if pool.layout.beyond_tp or pool.stage != "aggregated" or pool.speculative:
        calibrates = "benchmark rows hold aggregated TP engines without speculation"
    if run.run_kind == "max-throughput" or (run.request_rate is None and run.concurrency is None):
        load_text = "every request at once"
        verdicts = tuple(Verdict(m, None, None, 0.0, "not judged", "a run that sends every request at once: its TTFT "
                                 "is its place in the queue") for m in JUDGED)  # fmt: skip
        return RunCheck(str(file), kind, pool.name, workload, load_text, statistic, percentile, run.isl, run.osl,
                        verdicts, "", tuple(notes), run, engine, calibrates or "sends every request at once")  # fmt: skip
    load_text = (f"Poisson {per_instance:g} requests/s per instance" if per_instance else f"concurrency {run.concurrency}")
    answer = planned_at(planned, pool, run, percentile, per_instance)
    if isinstance(answer, str):
        verdicts = tuple(Verdict(m, None, None, 0.0, "not judged", f"no planned figure: {answer}") for m in JUDGED)
        return RunCheck(str(file), kind, pool.name, workload, load_text, statistic, percentile, run.isl, run.osl,
                        verdicts, answer, tuple(notes), run, engine, calibrates)  # fmt: skip
    verdicts, band_source = _verdicts(run, answer, per_instance, rows_reach(planned.catalog, pool, run, per_instance))
    if instances > 1:
        run = dataclasses.replace(run, request_rate=per_instance, request_throughput_rps=run.request_throughput_rps / instances)
    return RunCheck(str(file), kind, pool.name, workload, load_text, statistic, percentile, run.isl, run.osl, verdicts,
                    band_source, tuple(notes), run, engine, calibrates)  # fmt: skip
