"""Sweeps: many variants of one scenario (a parameter grid, or Monte Carlo samples), planned in parallel.

A sweep file names a scenario and the fields to vary, by dotted path into the scenario YAML; list items are
named by their `name` (`workloads.chat.slo.ttft_ms`, `sites.on_prem.price_usd.dgx-h100`). Each point is the
scenario with those fields set, validated and planned like any scenario; a point that is infeasible or invalid
is a row that says so, not a failed sweep. Points run on a local process pool (default) or on Ray
(`executor: ray`, the optional extra `.[ray]`) through the same `run_point` function, and come back in
point order, so the same sweep gives the same table.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from planner.errors import InfeasiblePlanError, PlannerInputError, SolverStoppedError
from planner.loading import StrictModel, read_yaml, short_repr, validate_model
from planner.workers import import_ray


MAX_POINTS = 100_000  # plans in one sweep


def check_values(where: str, values) -> None:
    """The values of one varied field: a non-empty list, all finite numbers or all names."""
    if not isinstance(values, list) or not values or len(values) > 10_000:
        raise ValueError(f"{where}: give a non-empty list of values (at most 10,000)")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
    texts = all(isinstance(v, str) and v for v in values)
    if not (numbers or texts):
        raise ValueError(f"{where}: the values of one field are all finite numbers or all names (got {short_repr(values)})")


class DistributionSpec(StrictModel):
    """One sampled field: exactly one of uniform [low, high], normal [mean, sd], choice [values...]."""

    uniform: tuple[float, float] | None = None
    normal: tuple[float, float] | None = None
    choice: list | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> "DistributionSpec":
        given = [k for k in ("uniform", "normal", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of uniform, normal, choice (got {given or 'none'})")
        if self.uniform is not None and self.uniform[0] > self.uniform[1]:
            raise ValueError("uniform: low must be <= high")
        if self.normal is not None and self.normal[1] < 0:
            raise ValueError("normal: the standard deviation must be >= 0")
        if self.choice is not None:
            check_values("choice", self.choice)
        return self


class MonteCarloSpec(StrictModel):
    samples: int = Field(gt=0, le=MAX_POINTS)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    fields: dict[str, DistributionSpec] = Field(min_length=1)


class ParetoSpec(StrictModel):
    x: str  # a varied field, e.g. a latency limit
    y: Literal["objective_usd_per_year", "capex_usd", "gpus", "nodes"] = "objective_usd_per_year"


class SweepSpec(StrictModel):
    scenario: str
    grid: dict[str, list] = Field(default_factory=dict)
    monte_carlo: MonteCarloSpec | None = None
    pareto: ParetoSpec | None = None
    executor: Literal["process", "ray"] = "process"
    workers: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _something_varies(self) -> "SweepSpec":
        if not self.grid and self.monte_carlo is None:
            raise ValueError("give a grid (field: [values]) or monte_carlo (samples, fields)")
        for name, values in self.grid.items():
            check_values(f"grid.{name}", values)
        total = math.prod(len(v) for v in self.grid.values()) * (self.monte_carlo.samples if self.monte_carlo else 1)
        if total > MAX_POINTS:
            raise ValueError(f"the sweep has {total:,} points; at most {MAX_POINTS:,} are planned")
        return self


@dataclass(frozen=True)
class Sweep:
    file: str
    scenario_file: str
    base: dict  # the scenario document
    points: tuple[dict, ...]  # field path -> value, one mapping per point
    pareto: ParetoSpec | None
    executor: str
    workers: int | None
    catalog_dirs: tuple[str, ...] = field(default_factory=tuple)


def set_field(document: dict, path: str, value, file: str = "sweep") -> None:
    """Set a dotted path in a scenario document; list items are addressed by their `name` (or index)."""
    parts = path.split(".")
    node = document
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            match = next((item for item in node if isinstance(item, dict) and item.get("name") == part), None)
            if match is None and part.isdigit() and int(part) < len(node):
                match = node[int(part)]
            if match is None:
                names = [item.get("name") for item in node if isinstance(item, dict)]
                raise PlannerInputError(file, path, f"no list item named '{part}' (names: {', '.join(map(str, names))})")
            if last:
                raise PlannerInputError(file, path, "a path must end at a field, not at a list item")
            node = match
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise PlannerInputError(file, path, f"'{'.'.join(parts[:depth])}' is a value, not a mapping or list")


def _sample(spec: DistributionSpec, rng: np.random.Generator, count: int) -> list:
    if spec.uniform is not None:
        return [float(v) for v in rng.uniform(spec.uniform[0], spec.uniform[1], count)]
    if spec.normal is not None:
        return [float(v) for v in rng.normal(spec.normal[0], spec.normal[1], count)]
    return [spec.choice[i] for i in rng.integers(0, len(spec.choice), count)]


def load_sweep(path: Path | str) -> Sweep:
    """Read a sweep file; the points are the grid's product, each repeated with the Monte Carlo samples."""
    path = Path(path)
    spec = validate_model(SweepSpec, read_yaml(path), str(path))
    scenario_file = (path.parent / spec.scenario) if not Path(spec.scenario).is_absolute() else Path(spec.scenario)
    base = read_yaml(scenario_file)
    if not isinstance(base, dict):
        raise PlannerInputError(str(scenario_file), "", "expected a scenario (a YAML mapping)")
    names = sorted(spec.grid)
    grid = [dict(zip(names, values)) for values in itertools.product(*(spec.grid[n] for n in names))] or [{}]
    samples = [{}]
    if spec.monte_carlo is not None:
        rng = np.random.default_rng(spec.monte_carlo.seed)
        fields = sorted(spec.monte_carlo.fields)
        columns = {name: _sample(spec.monte_carlo.fields[name], rng, spec.monte_carlo.samples) for name in fields}
        samples = [{name: columns[name][i] for name in fields} for i in range(spec.monte_carlo.samples)]
    points = tuple({**g, **m} for g in grid for m in samples)
    for name in points[0]:
        set_field(copy.deepcopy(base), name, 0, str(path))  # every path resolves before anything runs
    if spec.pareto is not None and spec.pareto.x not in points[0]:
        raise PlannerInputError(str(path), "pareto.x", f"'{spec.pareto.x}' is not a varied field ({', '.join(points[0])})")
    catalog = base.get("catalog")
    catalog_dirs = tuple(str(scenario_file.parent / c) for c in ([catalog] if isinstance(catalog, str) else catalog or []))
    return Sweep(str(path), str(scenario_file), base, points, spec.pareto, spec.executor, spec.workers, catalog_dirs)


_CATALOGS: dict[tuple, object] = {}


def run_point(task: tuple) -> dict:
    """Plan one point: (index, scenario document, values, catalog dirs, file) -> a result record."""
    from planner.catalog import load_catalog
    from planner.optimize import plan
    from planner.scenario import ScenarioSpec, build_scenario

    index, document, values, catalog_dirs, file = task
    record = {"point": index, **values, "status": "", "objective_usd_per_year": None, "mip_gap": None, "nodes": None,
              "gpus": None, "capex_usd": None, "error": ""}  # fmt: skip
    try:
        if catalog_dirs not in _CATALOGS:  # one catalog per worker process
            _CATALOGS[catalog_dirs] = load_catalog(list(catalog_dirs))
        catalog = _CATALOGS[catalog_dirs]
        for path, value in values.items():
            set_field(document, path, value, file)
        document.pop("catalog", None)
        scenario = build_scenario(validate_model(ScenarioSpec, document, file), catalog, file)
        result = plan(scenario, catalog, price_alternatives=False)  # a point records its cost: no savings re-solves
        record.update(
            status=result.status, objective_usd_per_year=result.objective_usd_per_year, mip_gap=result.mip_gap,
            nodes=result.totals.nodes,
            gpus=result.totals.gpus, capex_usd=result.totals.capex_usd, error="",
        )  # fmt: skip
    except InfeasiblePlanError as error:
        record.update(status="infeasible", error="; ".join(error.diagnosis))
    except SolverStoppedError as error:
        record.update(status="stopped", error=str(error))
    except PlannerInputError as error:
        record.update(status="invalid", error=str(error))
    return record


def _tasks(sweep: Sweep) -> list[tuple]:
    return [(i, copy.deepcopy(sweep.base), values, sweep.catalog_dirs, sweep.scenario_file) for i, values in enumerate(sweep.points)]


def worker_count(requested: int, tasks: int) -> int:
    """Local worker processes: as asked, but never more than the CPUs (more only thrash and exhaust memory) nor
    than the points to plan."""
    if requested < 1:
        raise PlannerInputError("--workers", "workers", f"must be >= 1 (got {requested})")
    return max(1, min(requested, os.cpu_count() or 1, tasks))


def run_sweep(sweep: Sweep, executor: str | None = None, workers: int | None = None, progress=None) -> list[dict]:
    """Every point's record, in point order. `executor`: process (local pool; 1 worker runs in this process) or ray."""
    executor = executor or sweep.executor
    tasks = _tasks(sweep)
    requested = workers or sweep.workers
    workers = worker_count(requested or 1, len(tasks))
    records: list[dict] = []
    if executor == "ray":  # --workers: tasks in flight (not capped by this machine's CPUs: a cluster has more)
        return _run_on_ray(tasks, progress, requested)
    if executor != "process":
        raise PlannerInputError("--executor", "executor", f"unknown executor '{executor}'; allowed: process, ray")
    if progress:
        progress(0, len(tasks))
    if workers == 1:
        for task in tasks:
            records.append(run_point(task))
            if progress:
                progress(len(records), len(tasks))
        return records
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # Small batches, reported as each finishes (in any order): one point per batch below 200 points, else 1% of
    # the points, so progress moves by 1 or by 1% while the hand-over of a batch to a worker (about a millisecond;
    # a point plans for several) stays a small part of its work. pool.map's batches of 1/(8 x workers) of the
    # points made the progress jump by them (by 25 for 400 points on 2 workers) and come in point order only.
    size, done = max(1, len(tasks) // 100), 0
    pool = ProcessPoolExecutor(max_workers=workers)
    try:
        futures = {pool.submit(_run_points, tasks[i:i + size]): i for i in range(0, len(tasks), size)}
        by_batch: dict[int, list[dict]] = {}
        for future in as_completed(futures):
            by_batch[futures[future]] = future.result()
            done += len(by_batch[futures[future]])
            if progress:
                progress(done, len(tasks))
        records = [record for start in sorted(by_batch) for record in by_batch[start]]
    finally:
        # on an interrupt or error the points not started are dropped and the workers end with this process
        pool.shutdown(wait=True, cancel_futures=True)
    return records


def _run_points(tasks: list[tuple]) -> list[dict]:
    return [run_point(task) for task in tasks]


def _run_on_ray(tasks: list[tuple], progress, workers: int | None = None) -> list[dict]:
    """The points as Ray tasks, at most `workers` in flight (a local Ray started here gets that many CPUs; on a
    cluster already running, the window keeps the sweep to its share). Records come back in point order."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(include_dashboard=False, log_to_driver=False, **({"num_cpus": workers} if workers else {}))
    try:
        remote = ray.remote(run_point)
        window = workers or len(tasks)
        refs = {}
        records: dict[int, dict] = {}
        submitted = 0
        if progress:
            progress(0, len(tasks))
        while len(records) < len(tasks):
            while submitted < len(tasks) and len(refs) < window:
                refs[remote.remote(tasks[submitted])] = submitted
                submitted += 1
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                records[refs.pop(ref)] = ray.get(ref)
            if progress:
                progress(len(records), len(tasks))
        return [records[i] for i in range(len(tasks))]
    finally:
        if started_here:
            ray.shutdown()


def pareto_front(records: list[dict], x: str, y: str) -> list[dict]:
    """Points no other point beats on both: a lower-or-equal cost at a tighter-or-equal (smaller) x."""
    feasible = sorted((r for r in records if r.get(y) is not None and r.get("status") in ("optimal", "feasible")),
                      key=lambda r: (r[x], r[y], r["point"]))  # fmt: skip
    front, best = [], float("inf")
    for record in feasible:
        if record[y] < best - 1e-9:
            front.append(record)
            best = record[y]
    return front
