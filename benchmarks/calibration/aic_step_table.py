"""Materialize engine-iteration times from NVIDIA's aiconfigurator kernel database for calibrating the roofline.

aiconfigurator-core ships operator timings (GEMM, attention, all-reduce, norms) measured with TensorRT-LLM on each
GPU. This script asks it for single engine iterations (prefill-only, decode-only and fused prefill + decode steps)
over a grid of models, GPUs, TP and precisions, and writes them as a CSV that `planner/perf/calibration.py` fits
the roofline's per-generation efficiencies to. Needs the extra: pip install '.[aic]' in the planner checkout.

Two tables: dense models over TP (the GPU's kernel factors) and mixtures of experts over TP, attention DP and
expert parallelism (their grouped-GEMM factors, fitted with the dense ones held).

Run:  python benchmarks/calibration/aic_step_table.py --set dense --out catalogs/calibration/aic-steps.csv
      python benchmarks/calibration/aic_step_table.py --set moe --out catalogs/calibration/aic-moe-steps.csv
"""

from __future__ import annotations

import argparse
import csv
import time

from planner.catalog import load_catalog
from planner.catalog.weights import weight_gb
from planner.perf import aic, model_precisions
from planner.perf.types import Layout
from planner.perf.roofline import kv_bytes_for

GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM-80GB", "L40S-48GB")
ENGINES = {  # model -> TPs
    "llama-3.1-8b": (1, 2, 4, 8),
    "llama-3.1-70b": (1, 2, 4, 8),
    "llama-3.1-405b": (8,),
}
# mixtures of experts (the kernel database's grouped GEMMs, MoE routing, all-to-all and MLA tables): model ->
# layouts; a step's tokens per expert (tokens x top-k / experts) decide whether the experts are read- or compute-bound
MOE_ENGINES = {
    "qwen3-30b-a3b": ("TP1", "TP2"),
    "qwen3-235b-a22b": ("TP4", "TP8", "DEP8"),
    "deepseek-r1": ("TP8", "DEP8"),
    "gpt-oss-120b": ("TP1", "TP2", "TP4", "DEP4"),
}
MOE_GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB")
MOE_DECODES = tuple((b, ctx) for b in (1, 8, 32, 128, 512, 2048) for ctx in (1024, 8192))
PREFILLS = ((1, 128), (16, 128), (1, 512), (8, 512), (1, 2048), (4, 2048), (1, 8192), (1, 32768))
DECODES = tuple((b, ctx) for b in (1, 8, 32, 128, 512) for ctx in (512, 4096, 32768))
# (decode sequences, their context, prompts, prompt length): the package keeps decode context >= prompt length
MIXED = ((16, 2048, 1, 2048), (128, 2048, 1, 2048), (16, 4096, 4, 512), (128, 4096, 4, 512), (512, 1024, 1, 1024))
# aiconfigurator's L40S all-reduce timings at TP 4 and 8 reach 1.5-5 GB/s of bus bandwidth (crossing the host
# between PCIe switches); a ring over one PCIe link cannot follow them, so PCIe parts are calibrated at TP <= 2 and
# the roofline says 'extrapolated' beyond.
PCIE_TP_NOTE = "PCIe parts at TP <= 2"
COLUMNS = ("source", "model", "gpu", "tp", "dp", "ep", "precision", "decode_batch", "decode_context_tokens", "prefill_prompts",
           "prefill_isl", "time_ms", "provenance")  # fmt: skip


def fits(catalog, model: str, gpu: str, tp: int, precision: str, kv_tokens: int) -> bool:
    """Weights and the step's KV cache within 90% of the instance's memory (`tp`: its GPUs)."""
    arch, device = catalog.models[model], catalog.gpus[gpu]
    weights = weight_gb(arch, precision) * 1e9  # 4-bit weights with their block scales (docs/perf-model.md)
    kv = kv_tokens * arch.kv_bytes_per_token(kv_bytes_for(precision))
    return weights + kv <= 0.9 * tp * device.memory_gb * 1e9


def engine_rows(catalog, model: str, gpu: str, layout: Layout, precision: str, grid) -> list[dict]:
    """The kernel database's iterations of one engine over a grid of (decode batch, context, prompts, ISL)."""
    rows = []
    for decode_batch, context, prompts, isl in grid:
        if not fits(catalog, model, gpu, layout.gpus, precision, decode_batch * context + prompts * isl):
            continue
        # the package's batch and prompts are per attention-DP rank: the instance holds DP times as many of each
        point = aic.step_ms(model, gpu, layout.tp, precision, max(decode_batch // layout.dp, 1) if decode_batch else 0,
                            context, prompts, isl, layout=layout)  # fmt: skip
        if point.error:
            print(f"skip {model} {gpu} {layout.label} {precision} {decode_batch}x{context} + {prompts}x{isl}: {point.error[:120]}")
            continue
        rows.append({
            "source": f"aiconfigurator-core {aic.package_version()} {aic.DEFAULT_BACKEND} kernel database "
                      f"on {aic.SYSTEM_NAMES[gpu]}: one engine iteration of {aic.MODEL_NAMES[model]}",
            "model": model, "gpu": gpu, "tp": layout.tp, "dp": layout.dp, "ep": layout.ep, "precision": precision,
            "decode_batch": max(decode_batch // layout.dp, 1) * layout.dp if decode_batch else 0,
            "decode_context_tokens": context, "prefill_prompts": prompts * layout.dp,
            "prefill_isl": isl, "time_ms": f"{point.ttft_ms:.5g}", "provenance": aic.provenance(gpu),
        })  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", choices=("dense", "moe"), default="dense", help="which engines to time")
    args = parser.parse_args()
    catalog = load_catalog()
    rows, started = [], time.perf_counter()
    dense_grid = [(0, 0, n, isl) for n, isl in PREFILLS] + [(b, ctx, 0, 0) for b, ctx in DECODES] + list(MIXED)
    for gpu in GPUS if args.set == "dense" else ():
        for model, tps in ENGINES.items():
            for precision in catalog.gpus[gpu].precisions:
                if precision == "fp16" or aic.unsupported_reason(model, gpu, precision) is not None:
                    continue
                for tp in tps:
                    if catalog.gpus[gpu].link == "pcie" and tp > 2:
                        continue  # see PCIE_TP_NOTE
                    rows += engine_rows(catalog, model, gpu, Layout(tp), precision, dense_grid)
            print(f"{gpu} {model}: {len(rows)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    moe_grid = [(0, 0, n, isl) for n, isl in PREFILLS] + [(b, ctx, 0, 0) for b, ctx in MOE_DECODES] + list(MIXED)
    for gpu in MOE_GPUS if args.set == "moe" else ():
        for model, layouts in MOE_ENGINES.items():
            for precision in model_precisions(catalog, gpu, model):
                # gpt-oss keeps its MXFP4 experts: timed as served, 16-bit (w4a16) or 8-bit activations (w4a8; fp4 parts)
                mxfp4 = model in aic.MXFP4_MODELS
                if (precision not in ("w4a16", "w4a8", "fp4") if mxfp4 else precision in ("fp16", "w4a16", "w4a8")) or (
                        aic.unsupported_reason(model, gpu, precision) is not None):  # fmt: skip
                    continue
                for label in layouts:
                    rows += engine_rows(catalog, model, gpu, Layout.parse(label), precision, moe_grid)
            print(f"{gpu} {model}: {len(rows)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    with open(args.out, "w", newline="", encoding="utf-8") as handle:
        columns = COLUMNS if args.set == "moe" else tuple(c for c in COLUMNS if c not in ("dp", "ep"))
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
