"""The roofline against the real benchmark runs whose GPU is known (`../shared/real/bench`, SOURCES.md there).

Ingests each run as a user would, asks the calibrated roofline (`--perf-source model`) for the same engine at the
run's lengths and mean requests in flight, and prints modeled / measured. Run on demand:

    python benchmarks/real_files_vs_model.py [--real ../shared/real]

vLLM's Llama 3.3 70B TP8 runs were made on Azure ND96asr_v4 (8 x A100 40GB); the AIPerf runs on an RTX 5090. The
genai-perf and GuideLLM runs do not record their GPU and are left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.api import perf_layers
from planner.catalog import load_catalog
from planner.ingest import IngestOptions, ingest
from planner.metrics import statistic_percentile
from planner.perf import PerfMiss, PerfQuery, estimate

RUNS = [  # (tool, path under bench/, options)
    ("vllm", "vllm", {"gpu": "A100", "precision": "bf16"}),
    ("aiperf", "aiperf", {"gpu": "RTX5090", "tp": 1}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "real")
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"{'run':<44} {'C':>4} {'ISL/OSL':>9} {'TTFT ms meas/model':>20} {'TPOT ms meas/model':>19} "
          f"{'ITL ms meas/model':>19} {'rps meas/model':>16}  (latencies at each run's statistic)")  # fmt: skip
    for tool, folder, options in RUNS:
        result = ingest(tool, [args.real / "bench" / folder], IngestOptions(**options), catalog)
        for row in result.rows:
            if row.concurrency is None:  # every request at once: no concurrency to ask the model at
                continue
            query = PerfQuery(model=row.model, gpu=row.gpu, isl=row.isl, osl=row.osl, tp=row.tp, precision=row.precision,
                              concurrency=row.concurrency)  # fmt: skip
            modeled = estimate(query, catalog, sources=perf_layers("model"), percentile=statistic_percentile(row.statistic))
            if isinstance(modeled, PerfMiss):
                print(f"{row.source[-44:]:<44} no model answer: {modeled.reason}")
                continue
            print(
                f"{row.source.split(': ')[-1][-44:]:<44} {row.concurrency:>4} {row.isl:>4}/{row.osl:<4} "
                f"{row.ttft_ms:>9.1f}/{modeled.ttft_ms:<9.1f} {row.tpot_ms or 0:>8.2f}/{modeled.tpot_ms:<9.2f} "
                f"{row.itl_ms or 0:>8.2f}/{modeled.itl_ms:<9.2f} "
                f"{row.request_throughput_rps:>7.3f}/{modeled.request_throughput_rps:<7.3f}"
            )
    print("\nRequest-rate runs are compared at their mean in flight (Little's law); a rate run below saturation "
          "measures the offered rate, not capacity.")  # fmt: skip


if __name__ == "__main__":
    main()
