"""Loading catalogs from disk: YAML entries and CSV tables of each layer (shipped, then user directories), merged
and checked into one `Catalog`."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from planner.catalog.entries import (
    SHIPPED_LAYER,
    STEP_COLUMNS,
    STEP_COLUMNS_LAYOUT,
    STEP_INTEGER_COLUMNS,
    BenchmarkRow,
    Catalog,
    Gpu,
    InputModel,
    ModelArch,
    StepTable,
    System,
    _DefaultsFile,
)
from planner.catalog.names import (
    _VERSION_1_COLUMNS,
    BENCHMARK_COLUMNS,
    check_aliases,
    name_index,
    name_problem,
    normalize_name,
    resolve_name,
)
from planner.errors import PlannerInputError, unknown_id_message
from planner.loading import (
    MAX_TABLE_BYTES,
    StrictModel,
    open_bounded,
    read_yaml,
    short_repr,
    validate_model,
)

_REQUIRED_BENCHMARK_COLUMNS = ("source", "model", "gpu", "gpus", "per")


def benchmark_csv_text(rows) -> str:
    """Rows as a benchmark table (the columns above, whole numbers without decimals), for writing; text a
    spreadsheet would run as a formula (notes, sources from result files) is made inert."""
    import pandas as pd  # slow to import: only where a table is written

    from planner.spreadsheet import csv_safe_frame

    records = [{c: getattr(row, c) for c in BENCHMARK_COLUMNS} for row in rows]
    frame = pd.DataFrame(records, columns=list(BENCHMARK_COLUMNS))
    for column in ("gpus", "tp", "isl", "osl", "concurrency"):
        frame[column] = frame[column].astype("Int64")
    return csv_safe_frame(frame).to_csv(index=False, lineterminator="\n", float_format="%.6g")


def default_catalog_dir() -> Path:
    """The shipped catalogs: inside the installed wheel, or at the repository root in a checkout."""
    package = Path(__file__).resolve().parent.parent  # planner/ (this file is planner/catalog/files.py)
    packaged = package / "_catalogs"
    if packaged.is_dir():
        return packaged
    return package.parent / "catalogs"


def _load_entries(path: Path, key: str) -> list:
    data = read_yaml(path)
    if data is None:
        return []
    if not isinstance(data, dict) or set(data) != {key}:
        raise PlannerInputError(str(path), key, f"expected a mapping with the single key '{key}' holding a list")
    entries = data[key] or []
    if not isinstance(entries, list):
        raise PlannerInputError(str(path), key, f"expected a list of entries, got {type(entries).__name__}")
    return entries


def _csv_records(path: Path) -> tuple[list[str], list[list[str]]]:
    """(header, non-empty records) of a CSV file; an unreadable or empty file, or a record whose field count is not
    the header's, raises PlannerInputError naming its line."""
    try:
        with open_bounded(path, "a catalog table", MAX_TABLE_BYTES, newline="") as handle:
            records = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PlannerInputError(str(path), "", f"cannot read CSV: {exc}") from exc
    if not records:
        raise PlannerInputError(str(path), "", "empty file (expected a header line and rows)")
    for number, record in enumerate(records[1:], start=2):
        if record and len(record) != len(records[0]):
            raise PlannerInputError(
                str(path), f"line {number}",
                f"{len(record)} fields but the header has {len(records[0])} (quote a field that contains a comma)",
            )
    return list(records[0]), [record for record in records[1:] if record]


def load_benchmark_table(path: Path, origin: str = SHIPPED_LAYER) -> list[BenchmarkRow]:
    """Read one benchmark CSV into rows; a bad row raises PlannerInputError naming file, line and column."""
    header, records = _csv_records(path)
    missing = [c for c in _REQUIRED_BENCHMARK_COLUMNS if c not in header]
    if missing:
        raise PlannerInputError(str(path), missing[0], f"missing column; required: {', '.join(_REQUIRED_BENCHMARK_COLUMNS)}")
    if "tpot_ms" not in header and "tpot_ms_bound" not in header:
        header = [_VERSION_1_COLUMNS.get(c, c) for c in header]
    unknown = [c for c in header if c not in BENCHMARK_COLUMNS]
    if unknown:
        # the header of a file that is not a benchmark table may be anything: quote a little of it, no more
        name = unknown[0] if len(unknown[0]) <= 32 else unknown[0][:29] + "..."
        raise PlannerInputError(str(path), name, f"unknown column; allowed: {', '.join(BENCHMARK_COLUMNS)}")
    rows = []
    for index, record in enumerate(records):
        line = index + 2  # header is line 1
        values = {k: cell.strip() for k, cell in zip(header, record)}  # csv's cells are str
        values = {k: v for k, v in values.items() if v}  # an empty cell is no value
        values.update(table=path.name, line=line, origin=origin, path=str(path))
        rows.append(validate_model(BenchmarkRow, values, f"{path} line {line}"))
    return rows


def load_step_table(path: Path, models: dict, gpus: dict, origin: str = SHIPPED_LAYER) -> StepTable:
    """Read one calibration CSV of timed engine iterations; a bad cell raises PlannerInputError naming its line.
    Plain csv (pandas is slow to import and every catalog load reads these)."""
    names, records = _csv_records(path)
    header = tuple(names)
    if header not in (STEP_COLUMNS, STEP_COLUMNS_LAYOUT):
        raise PlannerInputError(str(path), "header", f"expected the columns {', '.join(STEP_COLUMNS)} (dp and ep after tp "
                                                     "where the engines use attention DP or expert parallelism)")  # fmt: skip
    raw = {name: [record[i] for record in records] for i, name in enumerate(header)}
    if "dp" not in raw:
        raw["dp"] = raw["ep"] = ["1"] * len(records)

    def fail(bad: list[bool], column: str, allowed: str) -> None:
        if any(bad):
            index = bad.index(True)
            raise PlannerInputError(str(path), f"line {index + 2} column {column}", f"{allowed} (got {short_repr(raw[column][index])})")

    def number(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            return math.nan

    fail([v.strip() == "" for v in raw["source"]], "source", "every row names its source")
    fail([v not in models for v in raw["model"]], "model", "a model id of the catalog")
    fail([v not in gpus for v in raw["gpu"]], "gpu", "a GPU id of the catalog")
    precisions = {g: gpus[g].precisions for g in set(raw["gpu"])}  # every GPU is in gpus: checked just above
    fail([p not in precisions[g] for g, p in zip(raw["gpu"], raw["precision"])], "precision", "a precision the GPU supports")
    out: dict[str, list] = {name: raw[name] for name in ("source", "model", "gpu", "precision", "provenance")}
    for column in STEP_INTEGER_COLUMNS:
        low = 1 if column in ("tp", "dp", "ep") else 0
        values = [number(v) for v in raw[column]]
        fail([not (v == round(v) and low <= v <= 10_000_000) if math.isfinite(v) else True for v in values], column,
             f"a whole number >= {low}")  # fmt: skip
        out[column] = [int(v) for v in values]
    time_ms = [number(v) for v in raw["time_ms"]]
    fail([not (0 < v < 1e9) for v in time_ms], "time_ms", "a finite time > 0 ms")
    out["time_ms"] = time_ms
    rows = range(len(time_ms))
    fail([out["decode_batch"][i] == 0 and out["prefill_prompts"][i] == 0 for i in rows], "decode_batch",
         "an iteration decodes or prefills something")  # fmt: skip
    fail([(out["prefill_prompts"][i] > 0) != (out["prefill_isl"][i] > 0) for i in rows], "prefill_isl",
         "> 0 exactly when prefill_prompts > 0")  # fmt: skip
    fail([out["decode_batch"][i] > 0 and out["decode_context_tokens"][i] == 0 for i in rows], "decode_context_tokens",
         "> 0 when decode_batch > 0")  # fmt: skip
    fail([out["ep"][i] != 1 and out["ep"][i] != out["tp"][i] * out["dp"][i] for i in rows], "ep", "1 (experts split by TP) or tp x dp")
    return StepTable(str(path), origin, out)


_ENTRY_MODELS: dict[str, type[StrictModel]] = {"gpus": Gpu, "systems": System, "models": ModelArch}


class CatalogManifest(InputModel):
    """`catalog.yaml` of a user catalog: its name in provenance, and whether it adds to the shipped catalog."""

    name: str | None = Field(default=None, min_length=1)
    base: Literal["shipped", "none"] = "shipped"
    description: str = ""
    # the benchmark tables that are this catalog's own; another CSV dropped into its benchmarks/ (e.g. by
    # `planner ingest --out catalogs/benchmarks/x.csv`) is cited as 'local', not as this catalog's
    tables: list[str] | None = None
    # what its benchmark rows calibrate: `measured` (the default), only the engines they measured (model, GPU, TP,
    # precision, engine and version: they answer and anchor those); `generation`, also their GPU generation's shared
    # engine factors where they speak for it (planner.perf.calibration: OVERLAY_MIN_ROWS across OVERLAY_MIN_MODELS),
    # which moves every engine of that generation, other models' and engines' too
    calibrate: Literal["measured", "generation"] = "measured"


CatalogDirs = Path | str | Sequence[Path | str] | None


# a system's price fields: the layer whose entry gives any of them is where its price comes from (Catalog.price_layers)
PRICE_FIELDS = ("price_usd", "usd_per_hour", "spot_usd_per_hour_min", "spot_usd_per_hour_max", "price_source_kind")


@dataclass(frozen=True)
class _Entry:
    data: dict
    file: Path
    # (layer origin, file, price_source_kind it states) of the entry that gave its price fields; None: none did
    price_layer: tuple[str, str, str | None] | None = None


def _price_layer(entry: dict, file: Path, origin: str, base: _Entry | None) -> tuple[str, str, str | None] | None:
    """Where the merged entry's price comes from: this entry where it gives a price field, else the one below."""
    if any(name in entry for name in PRICE_FIELDS):
        return (origin, str(file), entry.get("price_source_kind"))
    return None if base is None else base.price_layer


def _merge_entries(merged: dict[str, _Entry], entries: list, file: Path, key: str, overlay: bool,
                   origin: str = SHIPPED_LAYER) -> None:  # fmt: skip
    """Add one file's entries; an id already known is overridden field by field and must name its own source. An
    entry that gives a price without its `price_source_kind` does not inherit the kind of the price it replaces."""
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise PlannerInputError(str(file), f"{key}[{index}]", "expected a mapping with a string 'id'")
        problem = name_problem(entry["id"])
        if problem:
            raise PlannerInputError(str(file), f"{key}[{index}].id", problem)
        entry_id = normalize_name(entry["id"])  # the form names are matched in: an id and its look-alike are one
        if entry_id in seen:
            raise PlannerInputError(str(file), f"{key}[{index}].id", f"duplicate id '{entry_id}'")
        seen.add(entry_id)
        base = merged.get(entry_id)
        if base is None or not overlay:
            merged[entry_id] = _Entry(dict(entry), file, _price_layer(entry, file, origin, None))
            continue
        if "source" not in entry:
            raise PlannerInputError(
                str(file), f"{key}[{index}:{entry_id}].source",
                f"required: an entry overriding {base.file}'s '{entry_id}' must name the source of its figures",
            )
        kept = sorted(set(base.data) - set(entry) - {"id", "source", "notes"})
        data = {**base.data, **entry}
        if any(name in entry for name in PRICE_FIELDS) and "price_source_kind" not in entry:
            data.pop("price_source_kind", None)  # the kind was the replaced price's
        if kept:
            data["source"] = f"{entry['source']} (overrides {', '.join(sorted(set(entry) - {'id', 'source'}))}); " \
                             f"other fields: {base.data.get('source', '')}"  # fmt: skip
        merged[entry_id] = _Entry(data, file, _price_layer(entry, file, origin, base))


def _validated(key: str, merged: dict[str, _Entry]) -> dict:
    """Validate every merged entry, naming the file that last touched it."""
    model_cls = _ENTRY_MODELS[key]
    result = {}
    for entry_id in sorted(merged):
        entry = merged[entry_id]
        try:
            result[entry_id] = validate_model(model_cls, entry.data, str(entry.file))
        except PlannerInputError as error:
            field = f"{key}[{entry_id}]" + (f".{error.field}" if error.field else "")
            raise PlannerInputError(error.file, field, error.problem.message) from None
    return result


def _manifest(directory: Path) -> CatalogManifest:
    file = directory / "catalog.yaml"
    if not file.is_file():
        return CatalogManifest()
    return validate_model(CatalogManifest, read_yaml(file), str(file))


def as_directory_list(directories: CatalogDirs) -> list[Path]:
    """None, one directory or several, as a list."""
    if directories is None:
        return []
    if isinstance(directories, (str, Path)):
        return [Path(directories)]
    return [Path(d) for d in directories]


@dataclass(frozen=True)
class CatalogLayer:
    directory: Path
    origin: str  # 'shipped' or the user catalog's name: how its rows are cited
    own_tables: tuple[str, ...] | None  # the manifest's `tables` (other CSVs there are cited as 'local')
    refits_generation: bool = False  # the manifest's `calibrate: generation`


def catalog_layers(directories: CatalogDirs) -> list[CatalogLayer]:
    """The layers from the bottom up: the shipped catalog unless the first user catalog says `base: none`, then
    each user directory in the order given. Each manifest is read once."""
    user = as_directory_list(directories)
    for directory in user:
        if not directory.is_dir():
            raise PlannerInputError(str(directory), "", "catalog directory not found")
    manifests = [_manifest(directory) for directory in user]
    layers: list[CatalogLayer] = []
    if not user or manifests[0].base == "shipped":
        shipped = _manifest(default_catalog_dir())
        layers.append(CatalogLayer(default_catalog_dir(), SHIPPED_LAYER, _tables(shipped)))
    for directory, manifest in zip(user, manifests):
        if directory.resolve() == default_catalog_dir().resolve() and layers and layers[0].origin == SHIPPED_LAYER:
            continue  # the shipped catalog named explicitly: nothing to add
        layers.append(CatalogLayer(directory, manifest.name or str(directory), _tables(manifest),
                                   manifest.calibrate == "generation"))  # fmt: skip
    return layers


def _tables(manifest: CatalogManifest) -> tuple[str, ...] | None:
    return None if manifest.tables is None else tuple(manifest.tables)


_MEASURED_FIELDS = ("ttft_ms", "ttft_ms_bound", "tpot_ms", "tpot_ms_bound", "itl_ms", "request_throughput_rps",
                    "output_tokens_per_s")  # fmt: skip


def _check_no_conflicting_rows(rows: list[BenchmarkRow]) -> None:
    """One source measuring one engine point twice with different results is ambiguous (the planner would take
    the better one without a word): refused, naming both lines. Different sources at one point are kept."""
    seen: dict[tuple, BenchmarkRow] = {}
    for row in rows:
        key = (row.source, *row.point_key)
        first = seen.setdefault(key, row)
        if first is not row and any(getattr(first, f) != getattr(row, f) for f in _MEASURED_FIELDS):
            raise PlannerInputError(
                f"{row.path} line {row.line}", "source",
                f"the same engine point as {first.path} line {first.line}, from the same source, with other results; "
                "keep one of them (or name the runs apart in `source`)",
            )  # fmt: skip


def _rows_with_ids(rows: list[BenchmarkRow], models: dict, gpus: dict) -> list[BenchmarkRow]:
    """Rows whose model or GPU is written as an alias ('meta-llama/Llama-3.1-8B-Instruct', 'H100') get the id; a
    name of neither raises with "did you mean"."""
    model_names, gpu_names = name_index(models), name_index(gpus)
    out = []
    for row in rows:
        where = f"{row.path} line {row.line}"
        model = row.model if row.model in models else resolve_name(models, model_names, "model", row.model, where, "model")
        gpu = row.gpu if row.gpu in gpus else resolve_name(gpus, gpu_names, "gpu", row.gpu, where, "gpu")
        out.append(row if (model, gpu) == (row.model, row.gpu) else row.model_copy(update={"model": model, "gpu": gpu}))
    return out


def load_catalog(directories: CatalogDirs = None) -> Catalog:
    """Load the shipped catalog with user catalogs layered over it (or a standalone catalog), cross-checked.

    A user directory may hold any of gpus.yaml, systems.yaml, models.yaml, defaults.yaml and benchmarks/*.csv.
    Its entries add to the layers below; an entry with a known id overrides the fields it gives; a benchmark
    row at the same operating point (model, GPU, GPUs, TP, precision, ISL, OSL, concurrency, run kind, per)
    replaces the rows of the layers below (rows of one layer never replace each other). Every row keeps its origin ('shipped' or the user catalog's name).
    """
    layers = catalog_layers(directories)
    merged: dict[str, dict[str, _Entry]] = {key: {} for key in _ENTRY_MODELS}
    defaults_raw: dict = {}
    layers_rows: list[list[BenchmarkRow]] = []
    step_files: list[tuple[Path, str]] = []
    for depth, layer in enumerate(layers):
        directory, origin, own_tables = layer.directory, layer.origin, layer.own_tables
        overlay = depth > 0
        for key in _ENTRY_MODELS:
            file = directory / f"{key}.yaml"
            if file.exists() or file.is_symlink() or not overlay:  # not a regular file: read_yaml says so by name
                _merge_entries(merged[key], _load_entries(file, key), file, key, overlay, origin)
        defaults_file = directory / "defaults.yaml"
        if defaults_file.exists() or defaults_file.is_symlink() or not overlay:
            data = read_yaml(defaults_file)
            if not isinstance(data, dict) or not isinstance(data.get("defaults"), dict) or set(data) != {"defaults"}:
                raise PlannerInputError(str(defaults_file), "defaults", "expected a mapping with the single key 'defaults'")
            defaults_raw.update({name: (value, defaults_file) for name, value in data["defaults"].items()})
        bench_dir = directory / "benchmarks"
        layer_rows = [
            row for table in (sorted(bench_dir.glob("*.csv")) if bench_dir.is_dir() else [])
            for row in load_benchmark_table(table, origin if own_tables is None or table.name in own_tables else "local")
        ]  # fmt: skip
        layers_rows.append(layer_rows)
        calibration_dir = directory / "calibration"
        step_files.extend((table, origin) for table in (sorted(calibration_dir.glob("*.csv")) if calibration_dir.is_dir() else []))
    gpus = _validated("gpus", merged["gpus"])
    systems = _validated("systems", merged["systems"])
    models = _validated("models", merged["models"])
    for key, entries in (("gpu", gpus), ("system", systems), ("model", models)):
        check_aliases(entries, key, {i: e.file for i, e in merged[f"{key}s"].items()})
    for system_id, system in systems.items():
        if system.gpu not in gpus:
            raise PlannerInputError(
                str(merged["systems"][system_id].file), f"systems[{system_id}].gpu",
                unknown_id_message("GPU", system.gpu, gpus, "planner catalog gpus"),
            )
    rows: list[BenchmarkRow] = []
    for layer_rows in layers_rows:  # names resolved first, so that a row naming a model by alias replaces too
        layer_rows = _rows_with_ids(layer_rows, models, gpus)
        _check_no_conflicting_rows(layer_rows)
        replaced = {row.point_key for row in layer_rows}
        rows = [row for row in rows if row.point_key not in replaced] + layer_rows
    defaults_files = sorted({str(file) for _, file in defaults_raw.values()})
    defaults = validate_model(
        _DefaultsFile, {"defaults": {name: value for name, (value, _) in defaults_raw.items()}}, " + ".join(defaults_files)
    ).defaults
    return Catalog(
        directory=" + ".join(str(layer.directory) for layer in layers), layers=tuple(layer.origin for layer in layers),
        generation_layers=tuple(layer.origin for layer in layers[1:] if layer.refits_generation),
        defaults=defaults, gpus=gpus, systems=systems, models=models, benchmarks=tuple(rows),
        steps=tuple(load_step_table(path, models, gpus, origin) for path, origin in step_files),
        price_layers={i: e.price_layer for i, e in merged["systems"].items() if e.price_layer is not None},
    )

