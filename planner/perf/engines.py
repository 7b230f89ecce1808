"""Serving engines: what vLLM, SGLang and TensorRT-LLM reach on the roofline's calibrated kernels, and how sure we are.

The roofline's kernel and engine factors are calibrated per GPU generation (`calibration.py`) on a TensorRT-LLM-
class engine running dense models. Measured serving rows of every engine (aiconfigurator-core's
`systems/silicon_sample.csv`) show what that misses: software efficiency per engine, and the MoE kernels (grouped
GEMMs at few tokens per expert, expert all-to-all) that dense models never exercise. A *class* is an engine x GPU
generation x dense/MoE; each has two scales and an overhead fitted to its rows (`benchmarks/calibration/engine_classes.py`):

    memory-bound time x memory_scale   (the bandwidth factors divided by it, at most 1: never beyond the hardware)
    compute-bound time x compute_scale (the GEMM and attention factors divided by it, likewise)
    ttft_overhead_ms                   what each request costs before its prefill (scheduling, tokenization)

and the error of the model with them, from leave-one-model-out and leave-one-GPU-out validations (each model's,
or GPU's, rows predicted by the scales fitted without them): `expected_error` is the relative error that covers 80%
of the held-out errors, for throughput, TTFT and TPOT. TensorRT-LLM on dense models is the reference the
generation's calibration was fitted to: its scales are 1. A class without rows borrows the same engine and kind of the
nearest generation (and says 'extrapolated'), else keeps scale 1 with the widest expected error of its kind.

Engine versions (issue 45). A class describes its current release line (`engine_version`, `release_line`: the newest
line its rows measured); an older line answers only through its time factor fitted with the class
(`catalogs/engines/versions.csv`, `pinned`), and a line no calibration covers is refused (`VersionNotCalibrated`).
A class whose held-out throughput band exceeds UNKNOWN_BAND is `known=False`: its answers say their error is
unknown, and `--confidence` leaves them out (planner/robustness.py).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.catalog import default_catalog_dir
from planner.perf.serving import (  # noqa: F401 (the engines' registry, re-exported)
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    ENGINES,
    release_line,
    version_key,
)
from planner.perf.step import Efficiency

SCALE_OUT_FILE = Path("engines") / "scale_out.csv"
CLASSES_FILE = Path("engines") / "classes.csv"
VERSIONS_FILE = Path("engines") / "versions.csv"
# generations that borrow another's class when they have no rows of their own, nearest first
NEAREST = {
    "hopper": ("blackwell",), "blackwell": ("hopper",), "blackwell-gb202": ("blackwell", "hopper"),
    "ampere": ("hopper",), "ada": ("hopper",), "cdna3": ("cdna4", "hopper"), "cdna4": ("cdna3", "blackwell"),
}  # fmt: skip
MEMORY_FACTORS = ("bandwidth", "kv_bandwidth")
UNKNOWN_BAND = 1.0  # a held-out throughput band wider than this is no answer: the class is unknown
COMPUTE_FACTORS = ("gemm_bf16", "gemm_fp8", "gemm_fp4", "attention_bf16", "attention_fp8")


@dataclass(frozen=True)
class ExpectedError:
    """Relative errors covering 80% of a class's held-out errors (leave one model out, leave one GPU out)."""

    throughput: float
    ttft: float
    tpot: float

    @classmethod
    def of(cls, record: dict) -> ExpectedError:
        """From a shipped CSV record's error_throughput, error_ttft and error_tpot columns."""
        return cls(float(record["error_throughput"]), float(record["error_ttft"]), float(record["error_tpot"]))

    def as_dict(self) -> dict[str, float]:
        """The JSON form; `itl` is TPOT's band: the measured rows give a request's mean gap, not one gap's law."""
        return {"throughput": self.throughput, "ttft": self.ttft, "tpot": self.tpot, "itl": self.tpot}


@dataclass(frozen=True)
class EngineClass:
    engine: str
    architecture: str
    kind: str  # dense | moe
    memory_scale: float
    compute_scale: float
    ttft_overhead_ms: float | None  # per request (scheduling, tokenization, first-step set-up); None: the generation's
    rows: int
    models: int
    expected_error: ExpectedError
    source: str
    basis: str = "measured"  # measured | extrapolated (borrowed from another generation) | prior
    # (coverage, relative throughput error) of the held-out errors: 50%, 80% (= expected_error) and 90%
    throughput_bands: tuple[tuple[float, float], ...] = ()
    engine_version: str = ""  # the newest version of the release line the class answers for ('' where unknown)
    release_line: str = ""  # its release line (planner/perf/serving.py release_line)
    known: bool = True  # False: its held-out band is too wide to be an answer (said, and --confidence leaves it out)

    def throughput_error_at(self, confidence: float) -> float:
        """The relative throughput error that covers `confidence` of the class's held-out errors: linear between
        the shipped coverages (0 at 0), the widest beyond the last."""
        bands = ((0.0, 0.0), *sorted(self.throughput_bands or ((0.8, self.expected_error.throughput),)))
        for (low, low_error), (high, high_error) in itertools.pairwise(bands):
            if confidence <= high:
                return low_error + (high_error - low_error) * (confidence - low) / (high - low)
        return bands[-1][1]

    def describe(self) -> str:
        overhead = "" if self.ttft_overhead_ms is None else f", {self.ttft_overhead_ms:.3g} ms per request"
        version = f" {self.engine_version}" if self.engine_version else ""
        unknown = "; throughput band too wide to answer: unknown" if not self.known else ""
        return (f"{ENGINE_NAMES[self.engine]}{version} on {self.architecture} {self.kind}: memory-bound time "
                f"x{self.memory_scale:.3g}, compute-bound x{self.compute_scale:.3g}{overhead} ({self.basis}: {self.rows} "
                f"rows of {self.models} model{'s' if self.models != 1 else ''}, catalogs/engines/classes.csv{unknown})")  # fmt: skip


def scaled(eff: Efficiency, engine_class: EngineClass | None) -> Efficiency:
    """The generation's factors as the engine reaches them on this kind of model (never beyond the hardware)."""
    if engine_class is None or (engine_class.memory_scale == 1.0 and engine_class.compute_scale == 1.0
                                and engine_class.ttft_overhead_ms is None):  # fmt: skip
        return eff
    changes = {name: min(1.0, getattr(eff, name) / engine_class.memory_scale) for name in MEMORY_FACTORS}
    # a mixture of experts' weight reads (bandwidth x moe_bandwidth of the peak) scale alike, never beyond the peak
    changes["moe_bandwidth"] = min(1.0, eff.bandwidth * eff.moe_bandwidth / engine_class.memory_scale) / changes["bandwidth"]
    changes.update({name: min(1.5, getattr(eff, name) / engine_class.compute_scale) for name in COMPUTE_FACTORS})
    if engine_class.ttft_overhead_ms is not None:
        changes["ttft_overhead_ms"] = engine_class.ttft_overhead_ms
    return dataclasses.replace(eff, **changes, source=f"{eff.source}; {engine_class.describe()}")


@lru_cache(maxsize=4)
def _classes(path: Path) -> dict[tuple[str, str, str], EngineClass]:
    if not path.is_file():
        return {}
    out = {}
    with path.open() as handle:
        for record in csv.DictReader(handle):
            cls = EngineClass(
                record["engine"], record["architecture"], record["kind"], float(record["memory_scale"]),
                float(record["compute_scale"]),
                float(record["ttft_overhead_ms"]) if record["ttft_overhead_ms"] else None, int(record["rows"]), int(record["models"]),
                ExpectedError.of(record),
                record["source"],
                throughput_bands=tuple((coverage, float(record[column])) for coverage, column in (
                    (0.5, "error_throughput_p50"), (0.8, "error_throughput"), (0.9, "error_throughput_p90"))
                    if record.get(column)),
                engine_version=record.get("engine_version", ""), release_line=record.get("release_line", ""),
                known=record.get("known", "yes") != "no",
            )  # fmt: skip
            out[(cls.engine, cls.architecture, cls.kind)] = cls
    return out


@dataclass(frozen=True)
class VersionFactor:
    """An older release line of an engine class: its memory- and compute-bound time against the class's current line
    (fitted with the class, `benchmarks/calibration/engine_classes.py`)."""

    engine: str
    architecture: str
    kind: str
    release_line: str
    newest_version: str
    time_factor: float
    rows: int
    source: str


@lru_cache(maxsize=4)
def _versions(path: Path) -> dict[tuple[str, str, str], tuple[VersionFactor, ...]]:
    if not path.is_file():
        return {}
    out: dict[tuple[str, str, str], list[VersionFactor]] = {}
    with path.open() as handle:
        for record in csv.DictReader(handle):
            factor = VersionFactor(record["engine"], record["architecture"], record["kind"], record["release_line"],
                                   record["newest_version"], float(record["time_factor"]), int(record["rows"]),
                                   record["source"])  # fmt: skip
            out.setdefault((factor.engine, factor.architecture, factor.kind), []).append(factor)
    return {key: tuple(values) for key, values in out.items()}


def version_factors() -> dict[tuple[str, str, str], tuple[VersionFactor, ...]]:
    """The shipped release lines' factors (`catalogs/engines/versions.csv`)."""
    return _versions(default_catalog_dir() / VERSIONS_FILE)


def in_line_group(engine: str, line: str | None, group: str) -> bool:
    """Whether a release line is one of a fitted group ('0.10' of '0.9-0.11'; a group of one line is that line)."""
    if line is None or not group:
        return False
    low, _, high = group.partition("-")
    if release_line(engine, low) is None or (high and release_line(engine, high) is None):
        return False
    return version_key(low) <= version_key(line) <= version_key(high or low)


class VersionNotCalibrated(ValueError):
    """A pinned engine version no calibration covers on a class: says which versions it does."""


def pinned(cls: EngineClass, version: str) -> EngineClass:
    """The class at a pinned version (`engine@version`): as it is on its current release line; scaled by the fitted
    time factor on an older line (`versions.csv`); VersionNotCalibrated (naming the lines it knows) otherwise."""
    line = release_line(cls.engine, version)
    if version == cls.engine_version or in_line_group(cls.engine, line, cls.release_line):
        return cls
    for factor in version_factors().get((cls.engine, cls.architecture, cls.kind), ()):
        if version == factor.newest_version or in_line_group(cls.engine, line, factor.release_line):
            return dataclasses.replace(
                cls, memory_scale=cls.memory_scale * factor.time_factor, compute_scale=cls.compute_scale * factor.time_factor,
                engine_version=factor.newest_version, release_line=factor.release_line,
                source=f"{cls.source}; release line {factor.release_line}: time x{factor.time_factor:.3g} against "
                       f"{cls.release_line} (fitted on {factor.rows} rows; catalogs/engines/versions.csv)",
            )  # fmt: skip
    known = [cls.release_line] + [f.release_line for f in version_factors().get((cls.engine, cls.architecture, cls.kind), ())]
    known = sorted({k for k in known if k and release_line(cls.engine, k.split("-")[0]) is not None}, key=version_key)
    raise VersionNotCalibrated(
        f"{ENGINE_NAMES[cls.engine]} {version} is not calibrated on {cls.architecture} {cls.kind} models: calibrated "
        f"release lines there: {', '.join(known) or 'none (the class has no versioned rows)'} "
        f"(pin one as {cls.engine}@<line>, or leave the version out for the newest)")  # fmt: skip


@dataclass(frozen=True)
class ScaleOut:
    """The scale-out network as engines spanning several link domains reach it (one fit for every engine and
    generation, `benchmarks/calibration/scale_out.py`): its share of the NIC's bandwidth, its latency per collective,
    and the held-out error of throughput over the measured multi-domain rows."""

    efficiency: float
    latency_us: float
    rows: int
    expected_error: ExpectedError
    source: str


@lru_cache(maxsize=4)
def _scale_out(path: Path) -> ScaleOut | None:
    if not path.is_file():
        return None
    with path.open() as handle:
        record = next(csv.DictReader(handle))
    return ScaleOut(float(record["efficiency"]), float(record["latency_us"]), int(record["rows"]),
                    ExpectedError.of(record),
                    record["source"])  # fmt: skip


def scale_out() -> ScaleOut | None:
    """The shipped scale-out fit (`catalogs/engines/scale_out.csv`), None where it is absent."""
    return _scale_out(default_catalog_dir() / SCALE_OUT_FILE)


def engine_classes() -> dict[tuple[str, str, str], EngineClass]:
    """The shipped classes (`catalogs/engines/classes.csv`)."""
    return _classes(default_catalog_dir() / CLASSES_FILE)


def engine_class(engine: str, architecture: str, kind: str, version: str | None = None) -> EngineClass:
    """The class of an engine on a generation and kind of model, borrowed where it has no rows (module docstring),
    at a pinned `version` (`pinned`; None: its newest calibrated release line)."""
    found = _unpinned_class(engine, architecture, kind)
    return found if version is None else pinned(found, version)


def _unpinned_class(engine: str, architecture: str, kind: str) -> EngineClass:
    classes = engine_classes()
    if (engine, architecture, kind) in classes:
        return classes[(engine, architecture, kind)]
    for donor in NEAREST.get(architecture, ()):
        if (engine, donor, kind) in classes:
            found = classes[(engine, donor, kind)]
            return dataclasses.replace(found, architecture=architecture, basis="extrapolated",
                                       source=f"{found.source}; borrowed from {donor}: no {architecture} rows")  # fmt: skip
    same_kind = [c.expected_error for c in classes.values() if c.kind == kind]
    widest = ExpectedError(*(max((getattr(e, f) for e in same_kind), default=0.5) for f in ("throughput", "ttft", "tpot")))
    return EngineClass(engine, architecture, kind, 1.0, 1.0, None, 0, 0, widest, "no measured rows of this engine", "prior",
                       known=widest.throughput <= UNKNOWN_BAND)  # fmt: skip


def engine_label(engine: str) -> str:
    """How plan lines, landscapes and reasons name an engine: '' for the reference engine (every line before
    engines were a dimension ran it), else its name."""
    return "" if engine == DEFAULT_ENGINE else ENGINE_NAMES[engine]


def class_of(catalog, model: str, gpu: str, engine: str = DEFAULT_ENGINE, version: str | None = None) -> EngineClass:
    """The class `engine` (at a pinned `version`) serving `model` on `gpu` belongs to (its generation, dense or MoE)."""
    return engine_class(engine, catalog.gpus[gpu].architecture, model_kind(catalog, model), version)


def engine_efficiency(catalog, model: str, gpu: str, engine: str = DEFAULT_ENGINE, version: str | None = None) -> Efficiency:
    """The calibrated factors of `gpu`'s generation as `engine` (at a pinned `version`) reaches them on `model`'s
    kind (dense or MoE)."""
    from planner.perf.calibration import efficiency_for

    architecture = catalog.gpus[gpu].architecture
    key = ("engine efficiency", architecture, engine, model_kind(catalog, model), version)
    if key not in catalog.derived:
        eff = scaled(efficiency_for(catalog, architecture), class_of(catalog, model, gpu, engine, version))
        network = scale_out()
        if network is not None:
            eff = dataclasses.replace(eff, scale_out=network.efficiency, scale_out_latency_us=network.latency_us)
        catalog.derived[key] = eff
    return catalog.derived[key]


def engine_error(catalog, model: str, gpu: str, engine: str = DEFAULT_ENGINE, crosses_domain: bool = False,
                 version: str | None = None) -> ExpectedError:  # fmt: skip
    """The class's band; for an engine spanning link domains, the wider of it and the scale-out fit's."""
    error = class_of(catalog, model, gpu, engine, version).expected_error
    network = scale_out() if crosses_domain else None
    if network is None:
        return error
    return ExpectedError(*(max(getattr(error, f), getattr(network.expected_error, f)) for f in ("throughput", "ttft", "tpot")))


def calibrated(catalog, model: str, gpu: str, engine: str = DEFAULT_ENGINE, version: str | None = None):
    """(factors, class) of `engine` at a pinned `version` serving `model` on `gpu`, or why there are none (an engine
    that does not run on the GPU's vendor; a version no calibration covers there)."""
    from planner.perf.serving import engine_problem

    unrun = engine_problem(engine, catalog.gpus[gpu].architecture)
    if unrun is not None:
        return unrun
    try:
        return engine_efficiency(catalog, model, gpu, engine, version), class_of(catalog, model, gpu, engine, version)
    except VersionNotCalibrated as error:
        return str(error)


def model_kind(catalog, model: str) -> str:
    return "moe" if catalog.models[model].moe is not None else "dense"
