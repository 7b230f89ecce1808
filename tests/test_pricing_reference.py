"""Candidate pricing keeps its answers (issue 46): every shipped scenario's candidates (dominated ones included) and
an open-loop grid of engines priced now, against the figures a reference commit gave, to within 0.5%.

The reference is tests/fixtures/pricing_reference.json.gz, written by

    python tests/test_pricing_reference.py --write

with the code named in its "commit" field. A change that makes pricing faster must keep every figure within
TOLERANCE of it (the same candidates, the same points on every curve); a deliberate change of the performance model
writes it again, and says so in its commit."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).resolve().parent / "fixtures" / "pricing_reference.json.gz"
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
TOLERANCE = 0.005
FIELDS = ("request_throughput_rps", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
PERCENTILE = 90.0
# open-loop curves over the model's input space: dense and mixture-of-experts models, Hopper, Blackwell and CDNA,
# short chat to 16,000-token documents, tensor and expert parallel layouts; (model, GPU, precision, (tp, dp, ep),
# (isl, osl), engine)
GRID = (
    ("llama-3.1-8b", "H100-SXM-80GB", "fp8", (1, 1, 1), (1000, 300), "vllm"),
    ("llama-3.1-8b", "MI300X-192GB", "bf16", (1, 1, 1), (4000, 1000), "vllm"),
    ("llama-3.1-70b", "H200-SXM-141GB", "fp8", (4, 1, 1), (2000, 200), "sglang"),
    ("llama-3.1-70b", "B200-SXM-180GB", "fp8", (2, 1, 1), (16000, 500), "vllm"),
    ("llama-4-scout", "H100-SXM-80GB", "fp8", (1, 8, 8), (16000, 500), "vllm"),
    ("llama-4-scout", "MI355X-288GB", "fp8", (1, 2, 2), (16000, 500), "vllm"),
    ("qwen3-235b-a22b", "H200-SXM-141GB", "fp8", (1, 4, 4), (4000, 1000), "sglang"),
    ("gpt-oss-120b", "B200-SXM-180GB", "fp4", (1, 1, 1), (8000, 200), "vllm"),
    ("mixtral-8x7b", "H100-SXM-80GB", "bf16", (2, 1, 1), (1000, 1000), "vllm"),
)


def _figures(perf) -> list:
    return [getattr(perf, field) for field in FIELDS]


def scenario_figures(path: Path) -> dict[str, list]:
    """Each option of the scenario's candidates, dominated ones kept: 'workload|bucket|candidate' -> (requests/s
    per node, then FIELDS of its point)."""
    from planner.api.planning import scenario_catalog
    from planner.candidates import enumerate_candidates
    from planner.scenario import load_scenario

    catalog = scenario_catalog(path)
    scenario = load_scenario(path, catalog)
    cset = enumerate_candidates(scenario, catalog, keep_dominated=True)
    return {f"{o.workload}|{o.bucket}|{o.candidate}": [o.rps_per_node, *_figures(o.perf)] for o in cset.options}


def grid_figures(entry: tuple) -> dict[str, list] | str:
    """One GRID engine's open-loop curve at PERCENTILE: its points in ladder order, or why it has none."""
    from planner.catalog import load_catalog
    from planner.perf.engine_curve import priced_points
    from planner.perf.types import Layout, PerfQuery

    model, gpu, precision, (tp, dp, ep), (isl, osl), engine = entry
    layout = Layout(tp, dp, ep)
    query = PerfQuery(model=model, gpu=gpu, isl=isl, osl=osl, tp=tp, precision=precision, arrivals="poisson",
                      engine=engine, layout=layout)  # fmt: skip
    points = priced_points(query, load_catalog(), tp, precision, PERCENTILE, layout=layout).points
    if isinstance(points, str):
        return points
    return {str(k): _figures(point) for k, point in enumerate(points)}


def _grid_name(entry: tuple) -> str:
    model, gpu, precision, (tp, dp, ep), (isl, osl), engine = entry
    return f"{model} {gpu} {precision} TP{tp} DP{dp} EP{ep} {isl}/{osl} {engine}"


def _reference() -> dict:
    with gzip.open(REFERENCE, "rt") as handle:
        return json.load(handle)


def _differences(now: dict[str, list] | str, then: dict[str, list] | str) -> list[str]:
    """What moved by more than TOLERANCE (relative), or appeared, or went."""
    if isinstance(now, str) or isinstance(then, str):
        return [] if now == then else [f"now {now!r:.200}, then {then!r:.200}"]
    out = [f"{key}: only now" for key in sorted(set(now) - set(then))]
    out += [f"{key}: only then" for key in sorted(set(then) - set(now))]
    for key in sorted(set(now) & set(then)):
        for name, a, b in zip(("rps_per_node",) * (len(now[key]) - len(FIELDS)) + FIELDS, now[key], then[key]):
            if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
                if a != b:
                    out.append(f"{key} {name}: now {a}, then {b}")
            elif abs(a - b) > TOLERANCE * max(abs(b), 1e-12):
                out.append(f"{key} {name}: now {a:.6g}, then {b:.6g} ({a / b - 1:+.3%})")
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenario_candidates_priced_as_the_reference(path):
    then = _reference()["scenarios"][path.name]
    moved = _differences(scenario_figures(path), then)
    assert not moved, f"{len(moved)} of {len(then)} figures moved beyond {TOLERANCE:.1%}:\n" + "\n".join(moved[:20])


@pytest.mark.parametrize("entry", GRID, ids=[_grid_name(e) for e in GRID])
def test_open_loop_grid_priced_as_the_reference(entry):
    then = _reference()["grid"][_grid_name(entry)]
    moved = _differences(grid_figures(entry), then)
    assert not moved, f"{len(moved)} figures moved beyond {TOLERANCE:.1%}:\n" + "\n".join(moved[:20])


def test_reference_covers_every_shipped_scenario_and_grid_engine():
    reference = _reference()
    assert sorted(reference["scenarios"]) == [p.name for p in SCENARIOS]
    assert sorted(reference["grid"]) == sorted(_grid_name(e) for e in GRID)
    # a reference without points would compare nothing
    assert sum(len(rows) for rows in reference["scenarios"].values()) > 300
    assert all(isinstance(points, dict) and len(points) >= 3 for points in reference["grid"].values())


def write_reference() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "planner"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    document = {
        "commit": commit + (" (with uncommitted changes to planner/)" if dirty else ""),
        "percentile": PERCENTILE,
        "scenarios": {path.name: scenario_figures(path) for path in SCENARIOS},
        "grid": {_grid_name(entry): grid_figures(entry) for entry in GRID},
    }
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(REFERENCE, "wb", mtime=0) as handle:
        handle.write(json.dumps(document, sort_keys=True, indent=0).encode())
    print(f"wrote {REFERENCE} (commit {document['commit']})")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/test_pricing_reference.py --write")
    write_reference()
