"""The performance model against aiconfigurator-core's measured serving rows (`systems/silicon_sample.csv`).

Every aggregated row whose model and GPU the catalog knows is asked of the roofline at the row's own engine
(its class), layout (attention TP x DP, experts over EP), precision, lengths and concurrency (a closed loop, as the
benchmark ran it; means), multi-node layouts included (the classes were fitted within one node). The row's own figures are compared with the model's: TTFT, TPOT and output tokens/s per GPU
(concurrency x OSL / (TTFT + (OSL - 1) TPOT) / GPUs, Little's law on the benchmark's closed loop).

Prints, per serving engine x GPU generation x dense/MoE: rows, median |error|, p90 |error| and the signed
median (model / measured - 1; positive throughput = the model is optimistic) of each figure; rows it could not
ask, by reason. The rows come from the package (extra `.[aic]`); without it the script says so and exits 0.

With --source aic the same rows are asked of aiconfigurator-core itself (its estimate at the row's backend,
layout, precision and concurrency): the baseline the model is measured against.

Run:  python benchmarks/silicon_accuracy.py [--engine vllm] [--model deepseek-r1] [--csv out.csv] [--worst 20]
                                            [--source aic]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import statistics
import sys
from collections import Counter, defaultdict
from importlib import resources

from planner.catalog import load_catalog
from planner.errors import PlannerInputError
from planner.perf import PerfQuery, PerfResult, engines
from planner.perf.engine_curve import whole_curve as _curve
from planner.perf.types import Layout

PRECISION = {"fp8": "fp8", "fp4": "fp4", "bf16": "bf16", "int4": "w4a16"}


def silicon_rows() -> list[dict] | None:
    try:
        path = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    except ModuleNotFoundError:
        return None
    with path.open() as handle:
        return list(csv.DictReader(handle))


def unique_measurements(rows: list[dict]) -> tuple[list[dict], int]:
    """The rows with each measurement once, and how many repeats were left out. The sample lists some runs twice,
    under one name or two names of one architecture (DeepSeek-V3 and -R1: the same TTFT and TPOT to the last digit;
    1,072 of its 5,221 rows); counted twice they weigh double in a fit and leak into a held-out model's training rows."""
    seen, unique = set(), []
    for row in rows:
        key = (row["mode"], row["system"], row["backend"], row["backend_version"], row["precision"], row["tp_size"],
               row["pp_size"], row["attention_dp_size"], row["moe_ep_size"], row["isl"], row["osl"], _concurrency_text(row),
               row["silicon_ttft_ms"], row["silicon_tpot_ms"])  # fmt: skip
        if key not in seen:
            seen.add(key)
            unique.append(row)
    return unique, len(rows) - len(unique)


def _concurrency_text(row: dict) -> str:
    found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    return found.group(1) if found else row["batch_size"]


def concurrency_of(row: dict) -> int | None:
    """The benchmark's concurrency as its data source states it; None where it does not (12 rows of one gap
    analysis, whose `batch_size` is the engine's per-rank batch setting, not the clients in flight: DeepSeek-R1 at
    "batch 28" with a 40 s TTFT)."""
    found = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    return int(found.group(1)) if found else None


def layout_of(row: dict) -> Layout:
    """aiconfigurator's attention TP x DP and MoE TP x EP: experts whole on every GPU (our EP = all GPUs) when
    the MoE is split by EP at all, else split by TP as the attention is."""
    tp, dp = int(float(row["tp_size"])), max(1, int(float(row["attention_dp_size"] or 1)))
    ep = int(float(row["moe_ep_size"] or 1))
    pp = int(float(row["pp_size"] or 1))
    return Layout(tp, dp, tp * dp if ep > 1 else 1, pp)


def ask(row: dict, catalog, source: str = "model", own_version: bool = True) -> dict | str:
    try:
        model = catalog.resolve("model", row["model_path"])
        gpu = catalog.resolve("gpu", row["system"])
    except PlannerInputError:
        return "model or GPU not in the catalog"
    precision = PRECISION.get(row["precision"])
    if precision is None:
        return f"precision {row['precision'] or 'unstated'}"
    layout = layout_of(row)
    isl, osl, concurrency = int(row["isl"]), int(row["osl"]), concurrency_of(row)
    if concurrency is None:
        return "concurrency not stated"
    query = PerfQuery(model, gpu, isl, osl, tp=layout.tp, precision=precision, concurrency=concurrency,
                      engine=row["backend"])  # each row at its engine's class (planner/perf/engines.py)
    version = (row.get("backend_version") or "").strip()
    # the row's own release line, through its fitted factor; a line no calibration covers (calibrated() says why, as
    # a string) is asked at the class's current line
    if source == "model" and own_version and version and not isinstance(
            engines.calibrated(catalog, model, gpu, row["backend"], version), str):  # fmt: skip
        query = dataclasses.replace(query, engine_version=version)
    try:
        if source == "aic":  # aiconfigurator's own estimate of the row, as `--perf-source aic` asks it
            from planner.perf import aic

            query = dataclasses.replace(query, layout=layout)
            points = aic.aic_points(query, catalog.gpus[gpu].memory_gb, layout.tp, precision)
        else:
            points = _curve(query, catalog, layout.tp, precision, None, layout=layout)
    except (ValueError, KeyError) as error:
        return f"not modeled: {type(error).__name__}"
    if isinstance(points, str):
        return "not modeled: " + re.sub(r"[\d.]+", "#", points)[:70]
    point = next((p for p in points if isinstance(p, PerfResult) and p.concurrency == concurrency), None)
    if point is None:
        return "no point at the concurrency"
    ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    gpus = layout.gpus

    def tokens_per_gpu(ttft_ms, tpot_ms):
        return concurrency * osl / ((ttft_ms + (osl - 1) * tpot_ms) / 1e3) / gpus

    arch = catalog.models[model]
    return {
        "id": row["id"], "engine": row["backend"], "generation": catalog.gpus[gpu].architecture, "gpu": gpu,
        "kind": "moe" if arch.moe is not None else "dense", "model": model, "layout": layout.label,
        "precision": precision, "isl": isl, "osl": osl, "concurrency": concurrency,
        "ttft": point.ttft_ms / ttft - 1, "tpot": point.tpot_ms / tpot - 1,
        "throughput": tokens_per_gpu(point.ttft_ms, point.tpot_ms) / tokens_per_gpu(ttft, tpot) - 1,
    }  # fmt: skip


def summary(errors: list[float]) -> str:
    if not errors:
        return "-"
    magnitudes = sorted(abs(e) for e in errors)
    p90 = magnitudes[min(len(magnitudes) - 1, int(0.9 * len(magnitudes)))]
    return f"{statistics.median(magnitudes):6.0%} {p90:6.0%} {statistics.median(errors):+6.0%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", help="only this serving engine (trtllm, vllm, sglang)")
    parser.add_argument("--model", help="only this catalog model id")
    parser.add_argument("--csv", help="write every compared row here")
    parser.add_argument("--current-line", action="store_true",
                        help="ask every row at its class's current release line (default: at the row's own version, "
                             "through its fitted time factor, where a calibration covers it)")
    parser.add_argument("--worst", type=int, default=0, help="print the N rows with the largest throughput error")
    parser.add_argument("--source", choices=("model", "aic"), default="model",
                        help="model: the planner's roofline with its engine classes; aic: aiconfigurator's estimate")
    args = parser.parse_args()
    rows = silicon_rows()
    if rows is None:
        print("aiconfigurator-core is not installed (pip install '.[aic]'): no measured rows to compare")
        return 0
    catalog = load_catalog()
    compared, skipped = [], Counter()
    rows, repeats = unique_measurements(rows)
    if repeats:
        skipped["the same measurement listed again (same model, or another name of it)"] = repeats
    for row in rows:
        if row["mode"] != "agg" or (args.engine and row["backend"] != args.engine):
            continue
        answer = ask(row, catalog, args.source, not args.current_line)
        if isinstance(answer, str):
            skipped[answer] += 1
        elif not args.model or answer["model"] == args.model:
            compared.append(answer)
    groups = defaultdict(list)
    for answer in compared:
        for key in ((answer["engine"], answer["generation"], answer["kind"]), (answer["engine"], "all", answer["kind"]),
                    ("all", "all", answer["kind"]), ("all", "all", "all")):  # fmt: skip
            groups[key].append(answer)
    print(f"{len(compared)} measured rows compared (silicon_sample.csv, aggregated)")
    print(f"{'engine':8} {'generation':10} {'kind':6} {'rows':>5} | {'throughput: med p90 signed':28} | "
          f"{'TPOT':22} | {'TTFT':22}")  # fmt: skip
    for key in sorted(groups, key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1], k[2])):
        found = groups[key]
        print(f"{key[0]:8} {key[1]:10} {key[2]:6} {len(found):5} | {summary([a['throughput'] for a in found]):28} | "
              f"{summary([a['tpot'] for a in found]):22} | {summary([a['ttft'] for a in found]):22}")  # fmt: skip
    print("not compared:", ", ".join(f"{reason} ({n})" for reason, n in skipped.most_common()))
    if args.worst:
        for answer in sorted(compared, key=lambda a: -abs(a["throughput"]))[: args.worst]:
            print(f"  {answer['throughput']:+.0%} tput {answer['tpot']:+.0%} tpot {answer['ttft']:+.0%} ttft  "
                  f"{answer['engine']} {answer['gpu']} {answer['model']} {answer['layout']} {answer['precision']} "
                  f"{answer['isl']}/{answer['osl']} c{answer['concurrency']}")  # fmt: skip
    if args.csv:
        with open(args.csv, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(compared[0]))
            writer.writeheader()
            writer.writerows(compared)
    return 0


if __name__ == "__main__":
    sys.exit(main())
