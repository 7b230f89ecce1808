"""Catalogs: GPUs, systems (on-prem servers, cloud instances), model architectures, benchmark tables.

Loaded from `catalogs/*.yaml` and `catalogs/benchmarks/*.csv` into frozen, validated objects.
Every entry carries the `source` of its numbers.
"""


from __future__ import annotations

from planner.catalog.entries import (  # noqa: F401 (re-exported)
    BYTES_PER_PARAM,
    DEFAULT_RANGES,
    EMBEDDING_BYTES,
    INFRASTRUCTURE_DEFAULTS,
    MXFP4_BITS,
    PRECISION_SPECS,
    PRECISIONS,
    SHIPPED_LAYER,
    STEP_COLUMNS,
    STEP_COLUMNS_LAYOUT,
    STEP_INTEGER_COLUMNS,
    WEIGHT_ONLY_PRECISIONS,
    BenchmarkRow,
    Catalog,
    CatalogDefaults,
    ComputePrecision,
    Gpu,
    InputModel,
    MlaSpec,
    ModelArch,
    MoeSpec,
    Precision,
    PrecisionSpec,
    SourcedValue,
    StepTable,
    System,
    _DefaultsFile,
    compute_precision,
    default_bounds,
)
from planner.catalog.files import (  # noqa: F401 (re-exported)
    _ENTRY_MODELS,
    _MEASURED_FIELDS,
    _REQUIRED_BENCHMARK_COLUMNS,
    CatalogDirs,
    CatalogLayer,
    CatalogManifest,
    _check_no_conflicting_rows,
    _csv_records,
    _Entry,
    _load_entries,
    _manifest,
    _merge_entries,
    _rows_with_ids,
    _tables,
    _validated,
    as_directory_list,
    benchmark_csv_text,
    catalog_layers,
    default_catalog_dir,
    load_benchmark_table,
    load_catalog,
    load_step_table,
)
from planner.catalog.names import (  # noqa: F401 (re-exported)
    _COUNT,
    _VERSION_1_COLUMNS,
    BENCHMARK_COLUMNS,
    MAX_NAME_CHARS,
    Alias,
    Name,
    _fold,
    _name_candidates,
    _strip_count,
    accelerator_count,
    check_aliases,
    clean_name,
    closest_name,
    name_index,
    name_problem,
    normalize_name,
    resolve_name,
)


