"""Materialize engine-iteration times from NVIDIA's aiconfigurator kernel database for calibrating the roofline.

aiconfigurator-core ships operator timings (GEMM, attention, all-reduce, norms) measured with TensorRT-LLM on each
GPU. This script asks it for single engine iterations (prefill-only, decode-only and fused prefill + decode steps)
over a grid of models, GPUs, TP and precisions, and writes them as a CSV that `planner/perf/calibration.py` fits
the roofline's per-generation efficiencies to. Needs the extra: pip install '.[aic]' in the planner checkout.

Run:  python benchmarks/calibration/aic_step_table.py --out catalogs/calibration/aic-steps.csv
"""

from __future__ import annotations

import argparse
import csv
import time

from planner.catalog import load_catalog
from planner.perf import aic
from planner.perf.roofline import kv_bytes_for

GPUS = ("H100-SXM-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "A100-SXM-80GB", "L40S-48GB")
ENGINES = {  # model -> TPs
    "llama-3.1-8b": (1, 2, 4, 8),
    "llama-3.1-70b": (1, 2, 4, 8),
    "llama-3.1-405b": (8,),
}
PREFILLS = ((1, 128), (16, 128), (1, 512), (8, 512), (1, 2048), (4, 2048), (1, 8192), (1, 32768))
DECODES = tuple((b, ctx) for b in (1, 8, 32, 128, 512) for ctx in (512, 4096, 32768))
# (decode sequences, their context, prompts, prompt length): the package keeps decode context >= prompt length
MIXED = ((16, 2048, 1, 2048), (128, 2048, 1, 2048), (16, 4096, 4, 512), (128, 4096, 4, 512), (512, 1024, 1, 1024))
# aiconfigurator's L40S all-reduce timings at TP 4 and 8 reach 1.5-5 GB/s of bus bandwidth (crossing the host
# between PCIe switches); a ring over one PCIe link cannot follow them, so PCIe parts are calibrated at TP <= 2 and
# the roofline says 'extrapolated' beyond.
PCIE_TP_NOTE = "PCIe parts at TP <= 2"
COLUMNS = ("source", "model", "gpu", "tp", "precision", "decode_batch", "decode_context_tokens", "prefill_prompts",
           "prefill_isl", "time_ms", "provenance")  # fmt: skip


def fits(catalog, model: str, gpu: str, tp: int, precision: str, kv_tokens: int) -> bool:
    """Weights and the step's KV cache within 90% of the instance's memory."""
    arch, device = catalog.models[model], catalog.gpus[gpu]
    weights = arch.weight_gb(precision) * 1e9  # 4-bit weights with their block scales (docs/perf-model.md)
    kv = kv_tokens * arch.kv_bytes_per_token(kv_bytes_for(precision))
    return weights + kv <= 0.9 * tp * device.memory_gb * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    catalog = load_catalog()
    rows, started = [], time.perf_counter()
    for gpu in GPUS:
        for model, tps in ENGINES.items():
            for precision in catalog.gpus[gpu].precisions:
                if precision == "fp16" or aic.unsupported_reason(model, gpu, precision) is not None:
                    continue
                label = aic.provenance(gpu)
                for tp in tps:
                    if catalog.gpus[gpu].link == "pcie" and tp > 2:
                        continue  # see PCIE_TP_NOTE
                    grid = [(0, 0, n, isl) for n, isl in PREFILLS] + [(b, ctx, 0, 0) for b, ctx in DECODES] + list(MIXED)
                    for decode_batch, context, prompts, isl in grid:
                        if not fits(catalog, model, gpu, tp, precision, decode_batch * context + prompts * isl):
                            continue
                        point = aic.step_ms(model, gpu, tp, precision, decode_batch, context, prompts, isl)
                        if point.error:
                            print(f"skip {model} {gpu} TP{tp} {precision} {decode_batch}x{context} + {prompts}x{isl}: {point.error[:120]}")
                            continue
                        rows.append({
                            "source": f"aiconfigurator-core {aic.package_version()} {aic.DEFAULT_BACKEND} kernel database "
                                      f"on {aic.SYSTEM_NAMES[gpu]}: one engine iteration of {aic.MODEL_NAMES[model]}",
                            "model": model, "gpu": gpu, "tp": tp, "precision": precision, "decode_batch": decode_batch,
                            "decode_context_tokens": context, "prefill_prompts": prompts, "prefill_isl": isl,
                            "time_ms": f"{point.ttft_ms:.5g}", "provenance": label,
                        })  # fmt: skip
            print(f"{gpu} {model}: {len(rows)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    with open(args.out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows -> {args.out}")


if __name__ == "__main__":
    main()
