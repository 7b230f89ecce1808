"""The roofline (provenance 'modeled'): the performance model's stages 1, 2 and 4 under one name for the callers
that read them together. Each lives in its own module, read downward:

- planner/catalog/weights.py and planner/perf/shapes.py: model and weight shapes, the engine instance, KV bytes;
- planner/perf/step.py: the step cost of a batch (kernels, communication) and its efficiencies;
- planner/perf/closed_loop.py: the closed loop's steady state (planner/perf/open_loop.py: the open loop's), its
  tails and token gaps in planner/perf/token_gaps.py.
"""

from planner.perf.closed_loop import (  # noqa: F401
    SteadyState,
    closed_loop_throughput,
    concurrency_ladder,
    steady_state,
    steady_state_curve,
)
from planner.perf.token_gaps import TokenGaps, gamma_quantile, token_gaps  # noqa: F401
from planner.perf.shapes import (  # noqa: F401
    ACTIVATION_BYTES,
    LM_HEAD_BYTES,
    EngineShape,
    ModelShape,
    ShapeBatch,
    Speculation,
    WeightFormat,
    kv_bytes_for,
    kv_bytes_per_token_per_gpu,
    model_shape,
    supports_roofline,
    weight_format,
)
from planner.perf.step import (  # noqa: F401
    COMPUTE_BOUND_TOKENS,
    ENGINE_FACTORS,
    KERNEL_FACTORS,
    MOE_FACTORS,
    MOE_GEMM_FACTORS,
    NORM_PASSES,
    SCALE_OUT_FACTORS,
    Efficiency,
    allreduce_ms,
    decode_step_ms,
    fixed_ms,
    prefill_ms,
    step_ms,
)
from planner.perf.types import DEFAULT_TOKEN_BUDGET, PrefixCache, SteadyStateError, prompt_terms  # noqa: F401
