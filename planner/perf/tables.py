"""Layer 1 of the performance model: benchmark table rows, matched exactly (provenance 'measured')."""

from __future__ import annotations

from collections import defaultdict

from planner.catalog import BenchmarkRow, Catalog
from planner.metrics import statistic_percentile
from planner.perf.memory import memory_fit
from planner.perf.roofline import kv_bytes_for
from planner.perf.serving import DEFAULT_ENGINE
from planner.perf.types import PerfQuery, PerfResult


def rows_for(catalog: Catalog, model: str, gpu: str, engine: str = DEFAULT_ENGINE) -> tuple[BenchmarkRow, ...]:
    """The rows of one model on one GPU measuring `engine` (a row that states none measured the reference engine),
    from an index built once per catalog: a row answers and anchors its own engine's queries only."""
    index = catalog.derived.get("rows by model, GPU and engine")
    if index is None:
        grouped: dict[tuple[str, str, str], list[BenchmarkRow]] = defaultdict(list)
        for row in catalog.benchmarks:
            grouped[(row.model, row.gpu, row.serving_engine)].append(row)
        index = catalog.derived["rows by model, GPU and engine"] = {key: tuple(rows) for key, rows in grouped.items()}
    return index.get((model, gpu, engine), ())


def matching_rows(catalog: Catalog, query: PerfQuery) -> list[BenchmarkRow]:
    """Rows of the same model, GPU, ISL and OSL (a blank in the row matches only a blank in the query);
    TP, precision and concurrency must match when the query gives them."""
    rows = []
    for row in rows_for(catalog, query.model, query.gpu, query.engine):
        if (row.isl, row.osl) != (query.isl, query.osl):
            continue
        if query.tp is not None and row.tp != query.tp:
            continue
        if query.precision is not None and row.precision != query.precision:
            continue
        if query.concurrency is not None and row.concurrency != query.concurrency:
            continue
        rows.append(row)
    return measurements_first(rows)


def measurements_first(rows: list[BenchmarkRow]) -> list[BenchmarkRow]:
    """Estimates (aic table rows) only for engines (TP, precision) that no measured row covers: a measurement of
    an engine outranks an estimate of it."""
    measured = {(r.tp, r.precision) for r in rows if r.is_measurement}
    return [r for r in rows if r.is_measurement or (r.tp, r.precision) not in measured]


def engine_key(row: BenchmarkRow) -> tuple:
    """Rows of one engine variant differ only in load (concurrency / run kind)."""
    return (row.tp or 0, row.precision or "", row.gpus, row.per, row.origin, row.table, row.statistic)


def group_by_engine(rows: list[BenchmarkRow]) -> list[list[BenchmarkRow]]:
    groups: dict[tuple, list[BenchmarkRow]] = defaultdict(list)
    for row in rows:
        groups[engine_key(row)].append(row)
    return [groups[key] for key in sorted(groups)]


def instance_memory(
    catalog: Catalog, model: str, gpu: str, gpus_per_instance: int, precision: str, isl: int | None, osl: int | None,
    dp: int = 1, ep: int = 1, pp: int = 1,
):  # fmt: skip
    """Memory fit of one instance (TP `gpus_per_instance` per rank, `dp` ranks, `pp` stages) for sequences of
    isl + osl tokens (KV cache in fp8 for fp8/fp4 engines)."""
    tokens = (isl or 0) + (osl or 0) or None
    return memory_fit(
        catalog.models[model], catalog.gpus[gpu], gpus_per_instance, precision, tokens,
        catalog.defaults.memory_reserve_fraction.value, kv_bytes_for(precision), dp=dp, ep=ep, pp=pp,
    )


def running_capacity(catalog: Catalog, model: str, gpu: str, tp: int, precision: str, isl: int, osl: int) -> int | None:
    """Sequences of isl/osl an instance keeps running (its paged KV cache full); None where it does not fit."""
    fit = instance_memory(catalog, model, gpu, tp, precision, isl, osl)
    return fit.running_limit(isl, osl) if fit.fits else None


def answers_at(row: BenchmarkRow, percentile: float | None) -> bool:
    """Whether a row's latencies are those of `percentile` (None: means): its own statistic, or its mean for the
    median (latency distributions are skewed right, so the median is at or below the mean: a conservative
    stand-in)."""
    own = statistic_percentile(row.statistic)
    return own == percentile or (own is None and percentile == 50)


def result_from_row(row: BenchmarkRow, catalog: Catalog) -> PerfResult:
    """A measured row as a PerfResult for one engine instance, filling what follows from the row itself."""
    derivations: list[str] = []
    gpus_per_instance = row.tp if (row.per == "instance" and row.tp) else row.gpus
    if row.per == "node":
        derivations.append(f"measured on a whole {row.gpus}-GPU system: one instance = {row.gpus} GPUs")
    rps = row.request_throughput_rps
    tokens_per_s = row.output_tokens_per_s
    if rps is None and tokens_per_s is not None and row.osl:
        rps = tokens_per_s / row.osl
        derivations.append(f"request_throughput_rps = output_tokens_per_s / OSL = {tokens_per_s:g} / {row.osl}")
    if tokens_per_s is None and rps is not None and row.osl:
        tokens_per_s = rps * row.osl
        derivations.append(f"output_tokens_per_s = request_throughput_rps x OSL = {rps:g} x {row.osl}")
    e2e = None
    if row.ttft_ms is not None and row.tpot_ms is not None and row.osl:
        e2e = row.ttft_ms + (row.osl - 1) * row.tpot_ms
        derivations.append("e2e_ms = ttft_ms + (OSL - 1) x tpot_ms")
    if row.statistic != "mean":
        derivations.append(f"latencies are the run's {row.statistic}")
    precision = row.precision
    if precision is None:
        derivations.append("precision not stated by the source: memory fit checked at bf16 (conservative)")
    fit = instance_memory(catalog, row.model, row.gpu, gpus_per_instance, precision or "bf16", row.isl, row.osl)
    return PerfResult(
        model=row.model, gpu=row.gpu, tp=row.tp, precision=row.precision, isl=row.isl, osl=row.osl,
        concurrency=row.concurrency, gpus_per_instance=gpus_per_instance,
        ttft_ms=row.ttft_ms, itl_ms=row.itl_ms, e2e_ms=e2e, tpot_ms=row.tpot_ms,
        ttft_ms_bound=row.ttft_ms_bound, itl_ms_bound=None, tpot_ms_bound=row.tpot_ms_bound,
        percentile=statistic_percentile(row.statistic), statistic=row.statistic,
        request_throughput_rps=rps, output_tokens_per_s=tokens_per_s,
        provenance=row.provenance or "measured", source=row.citation,
        memory=fit, derivations=tuple(derivations), engine_version=row.engine_version or "not stated",
    )
