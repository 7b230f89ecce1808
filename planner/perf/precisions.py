"""Which precisions a model is served at on a GPU: those worth modeling there (`model_precisions`), the ones that
keep the model's quality (`keeps_quality`), and what a plan may try (`plan_precisions`)."""

from __future__ import annotations



from planner.catalog import PRECISION_SPECS, WEIGHT_ONLY_PRECISIONS, Catalog


def model_precisions(catalog: Catalog, gpu: str, model: str | None = None,
                     requested: tuple[str, ...] | None = None) -> tuple[str, ...]:  # fmt: skip
    """Precisions worth modeling for a model on a GPU: bf16, fp8 and fp4 where the GPU has their tensor cores (fp16
    runs at the bf16 rate, so bf16 stands for both). The weight-only formats (w4a16, w4a8) only for a model shipped
    in fp4 on a GPU without fp4 tensor cores (gpt-oss's MXFP4 experts: w4a16, and w4a8 where fp8 is), so that the
    search does not grow for every model; or where `requested` (a workload's `precisions:`) names them, as for
    fp16. Filtered to `requested` when given."""
    supported = catalog.gpus[gpu].precisions
    asked = set(requested or ())
    precisions = [p for p in supported if (p != "fp16" or p in asked) and p not in WEIGHT_ONLY_PRECISIONS]
    four_bit_checkpoint = model is not None and catalog.models[model].checkpoint_precision == "fp4"
    for p in WEIGHT_ONLY_PRECISIONS:
        if p in supported and ((four_bit_checkpoint and "fp4" not in supported) or (requested and p in requested)):
            precisions.append(p)
    if requested is not None:
        precisions = [p for p in precisions if p in requested]
    return tuple(precisions)


QUALITY_PRECISIONS = ("bf16", "fp16", "fp8")  # formats that keep a model's quality (fp8: per-tensor/block scales)


def keeps_quality(catalog: Catalog, model: str, precision: str | None) -> bool:
    """Whether serving `model` at `precision` keeps the model's quality: the rule of the default precisions (a
    workload that names no `precisions:`).

    bf16 (and fp16) and fp8 keep it. A 4-bit format keeps it only where the checkpoint itself is 4-bit (catalog
    `checkpoint_precision: fp4`: gpt-oss ships MXFP4 experts): its released weights served at fp4, or as w4a16 / w4a8
    on a GPU without fp4 tensor cores, lose nothing. fp4 and the weight-only formats (w4a16, w4a8) of a 16- or 8-bit
    checkpoint trade quality for cost: a decision the user makes (`precisions:` in the scenario, `--precisions`),
    never the planner; the plan says what allowing them would save. A benchmark row that states no precision
    (`None`) has no format to judge and keeps its place."""
    if precision is None or precision in QUALITY_PRECISIONS:
        return True
    four_bit = PRECISION_SPECS[precision].four_bit if precision in PRECISION_SPECS else False
    return four_bit and catalog.models[model].checkpoint_precision == "fp4"


def plan_precisions(catalog: Catalog, gpu: str, model: str, requested: tuple[str, ...] | None = None,
                    lower: bool = False) -> tuple[str, ...]:  # fmt: skip
    """The precisions a plan may serve `model` at on `gpu` (what candidate enumeration tries): those of `requested`
    (a workload's `precisions:`, or `--precisions`) that are modeled there; where none is requested, the default:
    the quality-keeping ones (`keeps_quality`) of what is modeled there (`model_precisions`). `lower` (the plan's
    one extra solve that prices the lower formats) drops the quality rule: every modeled format, fp4 included."""
    if requested is not None:
        return model_precisions(catalog, gpu, model, requested)
    modeled = model_precisions(catalog, gpu, model)
    return modeled if lower else tuple(p for p in modeled if keeps_quality(catalog, model, p))
