"""The serving engines the planner knows, and the limits each applies to a running batch: how many sequences its KV
cache keeps running, how many sequences and tokens one iteration takes. The one place the closed and open loops,
candidate enumeration and the simulator read these rules (a light module: no numpy, nothing above it).

KV admission. An engine's cache holds `kv_tokens` tokens (planner/perf/memory.py). How many sequences of ISL prompt
and OSL output tokens it keeps running depends on how it admits them (`KV_ADMISSION`):

- **reserve** (TensorRT-LLM): its capacity scheduler's default policy, GUARANTEED_NO_EVICT, admits a request only
  when the blocks of its whole prompt and output are free and never evicts a running one: ISL + OSL tokens per
  sequence. aiconfigurator-core sizes every backend's KV cache per slot the same way (`isl + osl`, its
  `_get_memory_usage`).
- **paged** (vLLM, SGLang, ATOM): blocks are allocated as tokens are made; when the cache is full the newest
  sequence is preempted (vLLM: recomputed later) or retracted (SGLang). A running sequence holds its prompt and, on
  average over its life, half its output: ISL + OSL/2 tokens. (ATOM is AMD's engine; its scheduler is taken to page
  like vLLM's.)

Both are the engines' defaults; a deployment may change them (TensorRT-LLM's MAX_UTILIZATION pages as vLLM does).

Per attention-DP rank. Engines cap the sequences (vLLM `max_num_seqs`, SGLang `max_running_requests`, TensorRT-LLM
`max_batch_size`) and the tokens of one iteration (`max_num_batched_tokens`, `chunked_prefill_size`,
`max_num_tokens`) per scheduler, and every attention-DP rank runs its own: an instance of DP ranks runs `cap x DP`
sequences and `budget x DP` tokens per iteration (`instance_batch`, `instance_budget`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENGINES: tuple[str, ...] = ("trtllm", "vllm", "sglang", "atom")
_VERSION_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
DEFAULT_ENGINE = "trtllm"
ENGINE_NAMES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang", "atom": "ATOM"}
KV_ADMISSION = {"trtllm": "reserve", "vllm": "paged", "sglang": "paged", "atom": "paged"}
# the share of its output a running sequence holds in the cache, on average over its life
OUTPUT_HELD = {"reserve": 1.0, "paged": 0.5}
# the GPU generations each engine runs on (None: any): TensorRT-LLM is NVIDIA's, ATOM AMD's (ROCm)
NVIDIA = ("hopper", "blackwell", "blackwell-gb202", "ampere", "ada")
AMD = ("cdna3", "cdna4")
ENGINE_ARCHITECTURES = {"trtllm": NVIDIA, "atom": AMD}
ADMISSION_TEXT = {
    "reserve": "reserves each request's ISL + OSL tokens at admission (GUARANTEED_NO_EVICT)",
    "paged": "pages the cache and preempts the newest sequence when it is full (ISL + OSL/2 held on average)",
}


def engine_named(engine: str, version: str = "") -> str:
    """How reports name an engine and its release: 'vLLM 0.19.0'; the name alone where no release is stated (the
    `engine_version` field says which: 'not stated', or the quarter unversioned rows were measured in)."""
    name = ENGINE_NAMES.get(engine, engine)
    return f"{name} {version}" if release_line(engine, version) is not None else name


def kv_admission(engine: str) -> str:
    """'reserve' or 'paged' (module docstring); an engine not listed pages."""
    return KV_ADMISSION.get(engine, "paged")


def engine_problem(engine: str, architecture: str) -> str | None:
    """Why `engine` does not run on a GPU of `architecture`, or None where it does."""
    allowed = ENGINE_ARCHITECTURES.get(engine)
    if allowed is None or architecture in allowed:
        return None
    vendor = "NVIDIA" if allowed == NVIDIA else "AMD"
    return f"{ENGINE_NAMES[engine]} runs on {vendor} GPUs only, not on {architecture}"


def tokens_held(isl: float, osl: float, engine: str) -> float:
    """KV tokens one running sequence of ISL + OSL holds under the engine's admission, on average."""
    return isl + OUTPUT_HELD[kv_admission(engine)] * osl


def running_limit(kv_tokens: float, isl: float, osl: float, engine: str, whole: int = 0) -> int:
    """Sequences of ISL + OSL tokens the engine keeps running in a cache of `kv_tokens` tokens: at least `whole`
    (the sequences it holds in full) and 1."""
    return max(int(kv_tokens // tokens_held(isl, osl, engine)), whole, 1)


def instance_batch(cap_per_rank: int, dp: int) -> int:
    """Sequences an instance of `dp` attention-DP ranks runs under a per-rank cap."""
    return cap_per_rank * max(dp, 1)


def instance_budget(budget_per_rank: int, dp: int) -> int:
    """Tokens one iteration of an instance takes under a per-rank budget."""
    return budget_per_rank * max(dp, 1)


@dataclass(frozen=True)
class EngineSpec:
    """A serving engine and, where pinned, its version ('vllm', 'vllm@0.19')."""

    engine: str
    version: str | None = None

    @property
    def label(self) -> str:
        return self.engine + (f"@{self.version}" if self.version else "")

    @classmethod
    def parse(cls, text: str) -> EngineSpec:
        """'vllm' or 'vllm@0.19' (any version label after '@'). Raises ValueError saying what is allowed."""
        name, _, version = str(text).strip().partition("@")
        name = name.strip().lower()
        if name not in ENGINES:
            raise ValueError(f"engine '{text}' not known: give one of {', '.join(ENGINES)}, optionally pinned to a "
                             "version as engine@version (e.g. vllm@0.19)")  # fmt: skip
        version = version.strip()
        if "@" in str(text) and not _VERSION_LABEL.fullmatch(version):
            raise ValueError(f"engine '{text}': give a version after '@' of letters, digits, '.', '-' or '+' "
                             f"(e.g. {name}@0.19)")  # fmt: skip
        return cls(name, version or None)


_VERSION_PART = re.compile(r"(\d+)|([A-Za-z]+)")


def version_key(version: str) -> tuple:
    """Orders version labels as releases: numbers numerically ('0.19.0' > '0.9.1'), a pre-release ('1.2.0rc6')
    before its release, labels without numbers ('nightly-dev') after every numbered one."""
    parts = []
    for number, word in _VERSION_PART.findall(version.split("+")[0]):
        parts.append((1, int(number), "") if number else (0, 0, word.lower()))
    if not any(p[0] == 1 for p in parts):
        return (1, (), version)
    # a release sorts after its pre-releases: '1.2.0' > '1.2.0rc6' (a word part sorts before a number part)
    return (0, tuple(parts) + ((2, 0, ""),), version)


def release_line(engine: str, version: str | None) -> str | None:
    """The release line a version belongs to, what the calibration fits and `engine@version` pins: major.minor
    ('0.19.0' and '0.19' -> '0.19'); ATOM, which has no releases, by the year of its main branch ('2026.04.16' ->
    '2026'); None for a label without a version number."""
    if not version:
        return None
    found = re.match(r"v?(\d+)\.(\d+)", version) or (re.match(r"v?(\d{4})$", version) if engine == "atom" else None)
    if found is None:
        return None
    return found.group(1) if engine == "atom" else f"{found.group(1)}.{found.group(2)}"
