#!/usr/bin/env python3
"""Measure prefill and decode step times of Llama-shaped decoders with PyTorch.

Self-contained (needs only torch). Builds a Llama-architecture decoder with
RANDOM bf16 weights (timings do not depend on weight values): RMSNorm, GQA
attention with RoPE through torch.nn.functional.scaled_dot_product_attention,
SwiGLU MLP, fused QKV and gate/up projections (as serving engines do), a random
embedding table and an LM head.

Measured (CUDA events, warm-up, median of several repeats):
  * prefill: batch 1, ISL in {128..8192}: one forward over the whole prompt,
    writing K/V into a preallocated cache, LM head on the last token only.
  * decode: one step (one new token per sequence) at batch B and context L,
    attention over a pre-filled static KV cache of L tokens plus the new one.
  Both phases are timed eagerly and as a CUDA-graph replay (separate rows,
  column `mode`). The SDPA backend for each phase is the fastest fused one
  (flash / memory-efficient / cuDNN) on a probe shape, picked at start-up.
  * membw: device-to-device copy bandwidth (bytes read + bytes written).
  * gemm: 8192^3 bf16 matmul throughput.
  * gemm, fp8 (after the models, skip with --no-fp8): torch._scaled_mm with
    float8_e4m3fn inputs, per-tensor scales, bf16 output, on an 8192^3 GEMM and
    on the weight GEMMs of one llama-3.1-8b layer (QKV, O, gate/up, down) at
    M = 1, 64, 256, 2048 tokens, each next to the same shape in bf16 (F.linear),
    so that fp8/bf16 can be read per shape. If _scaled_mm is not usable on the
    device, no fp8 row is written and the reason goes into the log's problems.

Models: llama-3.1-8b (full model, TP1), llama-3.1-70b (a stack of a few layers,
scaled linearly to 80 layers; the LM head is measured separately).

Usage:
  python3 benchmarks/gpu/measure_steps.py --out steps.csv          # full run
  python3 benchmarks/gpu/measure_steps.py --out steps.csv --quick  # smoke run
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MODE_NOTE = {
    "eager": "eager PyTorch (host launch overhead included)",
    "graph": "CUDA graph replay of the whole step",
}

CSV_COLUMNS = [
    "source", "model", "gpu", "tp", "precision", "phase", "batch",
    "context_tokens", "new_tokens", "layers_measured", "layers_total",
    "time_ms", "scaled_time_ms", "mode", "notes",
]


@dataclass(frozen=True)
class Shape:
    name: str
    layers_total: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    rope_theta: float = 500000.0
    eps: float = 1e-5


LLAMA_8B = Shape("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256)
LLAMA_70B = Shape("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256)
# Tiny shape only for CPU smoke tests of the code paths (--tiny).
TINY = Shape("tiny", 4, 256, 8, 2, 32, 512, 1000)


# ----------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------

def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_fn(fn, dev: torch.device, warmup: int, repeats: int) -> tuple[float, list[float]]:
    """Median wall time of fn() in ms, each repeat timed separately.

    On CUDA: events around one call, after a synchronize, so that an eager
    call's launch overhead (GPU waiting for the host) is included, as it is in
    a real engine step.
    """
    for _ in range(warmup):
        fn()
    _sync(dev)
    times = []
    for _ in range(repeats):
        if dev.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), times


def spread(times: list[float]) -> str:
    return f"min {min(times):.3f} / max {max(times):.3f} ms over {len(times)} repeats"


def capture_graph(fn):
    """Capture fn() into a CUDA graph (warm-up on a side stream first)."""
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(st)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, out


# ----------------------------------------------------------------------------
# attention helpers
# ----------------------------------------------------------------------------

class Attn:
    """Decides once, on the device, how SDPA is called.

    On CUDA each fused SDPA backend (flash, memory-efficient, cuDNN) that
    accepts the call is timed on a representative prefill and decode shape and
    the fastest is used, as an engine would pick its fastest kernel. The math
    fallback is never used on CUDA unless no fused backend works.
    """

    def __init__(self, dev: torch.device):
        self.dev = dev
        self.gqa_native = False
        self.prefill_backend = None  # SDPBackend or None (= default dispatch)
        self.decode_backend = None
        self.probe_times: dict = {}
        self.desc = ""
        self._probe()

    def _ctx(self, backend):
        import contextlib
        if backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel
        return sdpa_kernel([backend])

    def _time_backends(self, backends, calls):
        """calls: list of zero-arg fns. Returns {backend_name: total median ms} for backends that work."""
        res = {}
        for bk in backends:
            try:
                tot = 0.0
                for fn in calls:
                    with self._ctx(bk):
                        med, _ = time_fn(fn, self.dev, 3, 10)
                    tot += med
                res[bk] = tot
            except Exception as e:  # noqa: BLE001
                self.probe_times[f"{bk.name}_error"] = str(e).splitlines()[0][:160]
        return res

    def _probe(self) -> None:
        dev = self.dev
        dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
        # correctness of native GQA against an explicit repeat, fp32 reference
        q = torch.randn(1, 8, 64, 128, device=dev, dtype=dt)
        k = torch.randn(1, 2, 64, 128, device=dev, dtype=dt)
        v = torch.randn(1, 2, 64, 128, device=dev, dtype=dt)
        ref = F.scaled_dot_product_attention(
            q.float(), k.repeat_interleave(4, 1).float(), v.repeat_interleave(4, 1).float(), is_causal=True)
        try:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            self.gqa_native = ((out.float() - ref).norm() / ref.norm()).item() < 2e-2
        except Exception as e:  # noqa: BLE001
            print(f"[attn] enable_gqa=True unusable: {e!r}", file=sys.stderr)
        if dev.type == "cuda":
            from torch.nn.attention import SDPBackend
            fused = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
            if hasattr(SDPBackend, "CUDNN_ATTENTION"):
                fused.append(SDPBackend.CUDNN_ATTENTION)
            # prefill-shaped: batch 1, 32 q heads, 8 kv heads, S in {1024, 4096}, causal
            pcalls = []
            for S in (1024, 4096):
                qp = torch.randn(1, 32, S, 128, device=dev, dtype=dt)
                kp = torch.randn(1, 8, S, 128, device=dev, dtype=dt)
                vp = torch.randn(1, 8, S, 128, device=dev, dtype=dt)
                pcalls.append(lambda qp=qp, kp=kp, vp=vp: self._prefill_call(qp, kp, vp))
            pt = self._time_backends(fused, pcalls)
            # decode-shaped: q heads folded into the KV-group dim, L = 8192, B in {1, 32}
            dcalls = []
            for B in (1, 32):
                qd = torch.randn(B, 8, 4, 128, device=dev, dtype=dt)
                kd = torch.randn(B, 8, 8193, 128, device=dev, dtype=dt)
                vd = torch.randn(B, 8, 8193, 128, device=dev, dtype=dt)
                dcalls.append(lambda qd=qd, kd=kd, vd=vd: F.scaled_dot_product_attention(qd, kd, vd))
            dtm = self._time_backends(fused, dcalls)
            self.probe_times.update(
                {f"prefill_S1024+S4096_ms[{b.name}]": round(t, 4) for b, t in pt.items()})
            self.probe_times.update(
                {f"decode_L8192_B1+B32_ms[{b.name}]": round(t, 4) for b, t in dtm.items()})
            self.prefill_backend = min(pt, key=pt.get) if pt else None
            self.decode_backend = min(dtm, key=dtm.get) if dtm else None
            del pcalls, dcalls
            torch.cuda.empty_cache()
        pb = self.prefill_backend.name if self.prefill_backend is not None else "default dispatch"
        db = self.decode_backend.name if self.decode_backend is not None else "default dispatch"
        self.desc = (
            f"prefill SDPA {pb} " + ("enable_gqa=True" if self.gqa_native else "K/V repeat_interleave")
            + f"; decode SDPA {db} with query heads folded into the KV-group dim (q [B,Hkv,G,D])"
        )

    def _prefill_call(self, q, k, v):
        if self.gqa_native:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)

    def prefill(self, q, k, v):
        # q [1,H,S,D], k/v [1,Hkv,S,D]
        with self._ctx(self.prefill_backend):
            return self._prefill_call(q, k, v)

    def decode(self, q, k, v):
        # q [B,H,D] one new token; k/v [B,Hkv,L+1,D] full valid cache (no mask needed)
        b, h, d = q.shape
        hkv = k.shape[1]
        q4 = q.view(b, hkv, h // hkv, d)  # head h uses kv head h // G
        with self._ctx(self.decode_backend):
            o = F.scaled_dot_product_attention(q4, k, v)
        return o.reshape(b, h * d)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------

def rope_tables(shape: Shape, max_pos: int, dev, dtype):
    inv = 1.0 / (shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, device=dev, dtype=torch.float32) / shape.head_dim))
    t = torch.arange(max_pos, device=dev, dtype=torch.float32)
    f = torch.outer(t, inv)
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x, cos, sin):
    # x [..., T, D] or [B, H, D] with cos/sin broadcastable
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


class Layer:
    def __init__(self, s: Shape, dev, dtype):
        def w(o, i):
            return torch.randn(o, i, device=dev, dtype=dtype) * (1.0 / math.sqrt(i))
        self.s = s
        self.ln1 = torch.ones(s.hidden, device=dev, dtype=dtype)
        self.ln2 = torch.ones(s.hidden, device=dev, dtype=dtype)
        self.wqkv = w((s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden)
        self.wo = w(s.hidden, s.heads * s.head_dim)
        self.wgu = w(2 * s.ffn, s.hidden)
        self.wd = w(s.hidden, s.ffn)

    def mlp(self, x):
        h = F.rms_norm(x, (self.s.hidden,), self.ln2, self.s.eps)
        gu = F.linear(h, self.wgu)
        g, u = gu.split(self.s.ffn, dim=-1)
        return x + F.linear(F.silu(g) * u, self.wd)

    def prefill(self, x, cos, sin, kc, vc, attn: Attn):
        # x [S, hidden] (batch 1); kc/vc [1, Hkv, Smax, D]
        s = self.s
        S = x.shape[0]
        h = F.rms_norm(x, (s.hidden,), self.ln1, s.eps)
        qkv = F.linear(h, self.wqkv)
        q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
        q = q.view(S, s.heads, s.head_dim).transpose(0, 1).unsqueeze(0)
        k = k.view(S, s.kv_heads, s.head_dim).transpose(0, 1).unsqueeze(0)
        v = v.view(S, s.kv_heads, s.head_dim).transpose(0, 1).unsqueeze(0)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        kc[:, :, :S].copy_(k)
        vc[:, :, :S].copy_(v)
        o = attn.prefill(q, k, v)  # [1,H,S,D]
        o = o.squeeze(0).transpose(0, 1).reshape(S, s.heads * s.head_dim)
        x = x + F.linear(o, self.wo)
        return self.mlp(x)

    def decode(self, x, cos, sin, kc, vc, pos: int, attn: Attn):
        # x [B, hidden]; kc/vc [B, Hkv, L+1, D], new token written at index pos=L
        s = self.s
        B = x.shape[0]
        h = F.rms_norm(x, (s.hidden,), self.ln1, s.eps)
        qkv = F.linear(h, self.wqkv)
        q, k, v = qkv.split([s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
        q = apply_rope(q.view(B, s.heads, s.head_dim), cos, sin)
        k = apply_rope(k.view(B, s.kv_heads, s.head_dim), cos, sin)
        kc[:, :, pos].copy_(k)
        vc[:, :, pos].copy_(v.view(B, s.kv_heads, s.head_dim))
        o = attn.decode(q, kc, vc)
        x = x + F.linear(o, self.wo)
        return self.mlp(x)


class Head:
    """Embedding table + final norm + LM head."""

    def __init__(self, s: Shape, dev, dtype):
        self.s = s
        self.emb = torch.randn(s.vocab, s.hidden, device=dev, dtype=dtype)
        self.norm = torch.ones(s.hidden, device=dev, dtype=dtype)
        self.lm = torch.randn(s.vocab, s.hidden, device=dev, dtype=dtype) * (1.0 / math.sqrt(s.hidden))

    def embed(self, ids):
        return F.embedding(ids, self.emb)

    def logits(self, x):
        return F.linear(F.rms_norm(x, (self.s.hidden,), self.norm, self.s.eps), self.lm)


class Model:
    def __init__(self, s: Shape, n_layers: int, dev, dtype, with_head: bool, attn: Attn):
        self.s = s
        self.n = n_layers
        self.dev = dev
        self.dtype = dtype
        self.attn = attn
        self.layers = [Layer(s, dev, dtype) for _ in range(n_layers)]
        self.head = Head(s, dev, dtype) if with_head else None

    def prefill(self, ids, cos, sin, caches):
        x = self.head.embed(ids) if self.head is not None else ids
        for layer, (kc, vc) in zip(self.layers, caches):
            x = layer.prefill(x, cos, sin, kc, vc, self.attn)
        if self.head is not None:
            return self.head.logits(x[-1:])  # last token only, as engines do
        return x

    def decode(self, ids, cos, sin, caches, pos):
        x = self.head.embed(ids) if self.head is not None else ids
        for layer, (kc, vc) in zip(self.layers, caches):
            x = layer.decode(x, cos, sin, kc, vc, pos, self.attn)
        if self.head is not None:
            return self.head.logits(x)
        return x


# ----------------------------------------------------------------------------
# benchmark driver
# ----------------------------------------------------------------------------

class Runner:
    def __init__(self, args):
        self.args = args
        self.dev = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
        self.dtype = torch.bfloat16 if self.dev.type == "cuda" else torch.float32
        self.t0 = time.time()
        self.rows: list[dict] = []
        self.problems: list[str] = []
        self.skipped: list[str] = []
        if self.dev.type == "cuda":
            name = torch.cuda.get_device_name(self.dev)
            props = torch.cuda.get_device_properties(self.dev)
            self.dev_name = name
            total_gb = props.total_memory / 1e9
            is_sxm80 = ("H100" in name and "HBM3" in name and "80GB" in name.replace(" ", "")
                        and 75 < total_gb < 90)
            # The H200 SXM reports plainly 'NVIDIA H200' (the NVL part says 'H200 NVL'), ~150 GB (1e9 bytes).
            is_h200_sxm = ("H200" in name and "NVL" not in name.upper() and 130 < total_gb < 160)
            if is_sxm80:
                self.gpu = "H100-SXM-80GB"
            elif is_h200_sxm:
                self.gpu = "H200-SXM-141GB"
            else:
                self.gpu = name
            known = is_sxm80 or is_h200_sxm
            self.gpu_note = "" if known else f"gpu column is torch.cuda.get_device_name ({name}), not a catalog id"
            cuda_v = torch.version.cuda
        else:
            self.dev_name = "cpu"
            self.gpu = "cpu"
            self.gpu_note = "CPU smoke run, not a GPU measurement"
            cuda_v = "none"
        date = _dt.date.today().isoformat()
        self.source = (f"own measurement: PyTorch {torch.__version__}, CUDA {cuda_v}, {self.dev_name}, "
                       f"random bf16 weights, {date}")
        self.attn = Attn(self.dev)
        self.out = args.out
        os.makedirs(os.path.dirname(os.path.abspath(self.out)) or ".", exist_ok=True)
        with open(self.out, "w", newline="") as f:
            csv.writer(f).writerow(CSV_COLUMNS)

    # -- bookkeeping ---------------------------------------------------------
    def elapsed(self) -> float:
        return time.time() - self.t0

    def out_of_time(self, what: str) -> bool:
        if self.elapsed() > self.args.time_budget_s:
            self.skipped.append(f"{what}: skipped, time budget {self.args.time_budget_s}s reached")
            return True
        return False

    def add(self, **kw):
        row = {c: "" for c in CSV_COLUMNS}
        row.update(source=self.source, gpu=self.gpu, tp=1,
                   precision="bf16" if self.dtype == torch.bfloat16 else "fp32")
        row.update(kw)
        notes = [n for n in [row.get("notes", ""), self.gpu_note] if n]
        row["notes"] = "; ".join(notes)
        for k in ("time_ms", "scaled_time_ms"):
            if isinstance(row[k], float):
                row[k] = f"{row[k]:.4f}"
        self.rows.append(row)
        with open(self.out, "a", newline="") as f:
            csv.DictWriter(f, CSV_COLUMNS).writerow(row)
        print(f"[{self.elapsed():6.1f}s] {row['model']:>22} {row['phase']:>7} {row['precision']:>4} B={row['batch']!s:>4} "
              f"ctx={row['context_tokens']!s:>5} {row['mode']:>5} t={row['time_ms']} ms "
              f"scaled={row['scaled_time_ms']}", flush=True)

    def measure(self, fn, modes, warmup, reps, tag):
        """Time fn eagerly and/or as a CUDA graph replay. Yields (mode, median_ms, times)."""
        if "eager" in modes:
            med, times = time_fn(fn, self.dev, warmup, reps)
            yield "eager", med, times
        if "graph" in modes and self.dev.type == "cuda":
            graph = None
            try:
                graph, gout = capture_graph(fn)
                ref = fn()
                if not torch.allclose(gout.float(), ref.float(), rtol=2e-2, atol=2e-2):
                    self.problems.append(f"{tag}: graph replay output differs from eager (recorded anyway)")
                med, times = time_fn(graph.replay, self.dev, warmup, reps)
            finally:
                del graph
            yield "graph", med, times

    def free_bytes(self) -> int:
        if self.dev.type != "cuda":
            return 8 << 30
        torch.cuda.empty_cache()
        return torch.cuda.mem_get_info(self.dev)[0]

    # -- ceilings --------------------------------------------------------------
    def membw(self):
        n = (64 << 20) if self.dev.type != "cuda" else (2 << 30)  # 2 GiB each way
        src = torch.randn(n // 2, device=self.dev, dtype=torch.bfloat16)
        dst = torch.empty_like(src)
        med, _ = time_fn(lambda: dst.copy_(src), self.dev, 3, 20)
        tbps = 2 * n / (med * 1e-3) / 1e12
        self.add(model="-", phase="membw", time_ms=med, mode="eager",
                 notes=f"device-to-device copy of {n / 2**30:.1f} GiB (bf16 tensor.copy_); "
                       f"bandwidth_TBps={tbps:.3f} counting bytes read + written; median of 20")
        del src, dst
        return tbps

    def gemm(self):
        n = 8192 if self.dev.type == "cuda" else 512
        a = torch.randn(n, n, device=self.dev, dtype=self.dtype)
        b = torch.randn(n, n, device=self.dev, dtype=self.dtype)
        med, _ = time_fn(lambda: a @ b, self.dev, 5, 20)
        tf = 2 * n ** 3 / (med * 1e-3) / 1e12
        self.add(model="-", phase="gemm", time_ms=med, mode="eager",
                 notes=f"{n}x{n}x{n} matmul (torch.matmul/cuBLAS) on random data; TFLOPS={tf:.1f}; median of 20")
        del a, b
        return tf

    # -- fp8 vs bf16 GEMMs -----------------------------------------------------
    FP8_MAX = 448.0  # largest finite float8_e4m3fn

    def _fp8_quant(self, x):
        """Per-tensor quantization to float8_e4m3fn: returns (x_fp8, scale) with x ~= x_fp8 * scale."""
        amax = x.abs().amax().float().clamp(min=1e-12)
        scale = (amax / self.FP8_MAX).reshape(())
        xq = (x.float() / scale).clamp(-self.FP8_MAX, self.FP8_MAX).to(torch.float8_e4m3fn)
        return xq, scale.to(torch.float32)

    @staticmethod
    def _scaled_mm(a8, w8, sa, sw, fast_accum=False):
        # a8 [M, K] row-major, w8 [N, K] row-major -> w8.t() is the column-major [K, N] _scaled_mm wants
        return torch._scaled_mm(a8, w8.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16,
                                use_fast_accum=fast_accum)

    def fp8_probe(self) -> str | None:
        """None if _scaled_mm (e4m3, per-tensor scales, bf16 out) runs and is numerically sane, else why not."""
        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return f"torch {torch.__version__} has no float8_e4m3fn/_scaled_mm"
        try:
            a = torch.randn(32, 256, device=self.dev, dtype=torch.bfloat16)
            w = torch.randn(64, 256, device=self.dev, dtype=torch.bfloat16)
            a8, sa = self._fp8_quant(a)
            w8, sw = self._fp8_quant(w)
            out = self._scaled_mm(a8, w8, sa, sw)
            ref = a.float() @ w.float().t()
            rel = ((out.float() - ref).norm() / ref.norm()).item()
            if not (out.dtype == torch.bfloat16 and rel < 0.1):
                return f"_scaled_mm probe: dtype {out.dtype}, relative error {rel:.3g} vs fp32 reference"
        except Exception as e:  # noqa: BLE001
            return f"_scaled_mm probe failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return None

    def gemm_fp8(self):
        """8192^3 (or 512^3 on CPU) GEMM with torch._scaled_mm in fp8 e4m3, eager like the bf16 gemm row."""
        n = 8192 if self.dev.type == "cuda" else 512
        a = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        a8, sa = self._fp8_quant(a)
        b8, sb = self._fp8_quant(b)
        del a, b
        for fast in (False, True):
            try:
                med, times = time_fn(lambda: self._scaled_mm(a8, b8, sa, sb, fast), self.dev, 5, 20)
            except Exception as e:  # noqa: BLE001
                self.problems.append(f"fp8 gemm {n}^3 use_fast_accum={fast}: {e!r}"[:300])
                continue
            tf = 2 * n ** 3 / (med * 1e-3) / 1e12
            self.add(model="-", phase="gemm", precision="fp8", time_ms=med, mode="eager",
                     notes=f"{n}x{n}x{n} torch._scaled_mm, float8_e4m3fn inputs, per-tensor scales, bf16 output, "
                           f"use_fast_accum={fast}, on random data (inputs quantized beforehand, not timed); "
                           f"TFLOPS={tf:.1f}; median of 20, {spread(times)}")
        del a8, b8

    def layer_gemms(self, shape: Shape, ms, do_fp8: bool):
        """The weight GEMMs of one decoder layer, bf16 (F.linear) and fp8 (_scaled_mm), at M tokens.

        Each timing is a CUDA-graph replay of `per_graph` back-to-back GEMMs that cycle through enough
        copies of the weight (>= 512 MiB per precision) that the weight is read from HBM, not L2, as in
        a real forward pass; time_ms is replay time / per_graph. On CPU: a plain loop (code path only).
        """
        s = shape
        projs = [
            ("qkv_proj", (s.heads + 2 * s.kv_heads) * s.head_dim, s.hidden),
            ("o_proj", s.hidden, s.heads * s.head_dim),
            ("gate_up_proj", 2 * s.ffn, s.hidden),
            ("down_proj", s.hidden, s.ffn),
        ]
        min_bytes = (512 << 20) if self.dev.type == "cuda" else (8 << 20)
        reps = 10 if self.dev.type == "cuda" else 3
        for pname, N, K in projs:
            w = torch.randn(N, K, device=self.dev, dtype=torch.bfloat16) * (1.0 / math.sqrt(K))
            variants = {"bf16": None, "fp8": None}
            n_bf = max(2, min(64, math.ceil(min_bytes / (N * K * 2))))
            variants["bf16"] = [w] + [w.clone() for _ in range(n_bf - 1)]
            if do_fp8:
                w8, sw = self._fp8_quant(w)
                n_f8 = max(2, min(64, math.ceil(min_bytes / (N * K))))
                variants["fp8"] = ([w8] + [w8.clone() for _ in range(n_f8 - 1)], sw)
            for M in ms:
                tag = f"{shape.name} {pname} M={M}"
                x = torch.randn(M, K, device=self.dev, dtype=torch.bfloat16)
                res = {}
                for prec in ("bf16", "fp8"):
                    if variants[prec] is None:
                        continue
                    if prec == "bf16":
                        ws = variants["bf16"]
                        calls = [lambda wi=wi: F.linear(x, wi) for wi in ws]
                        ref_fn = calls[0]
                    else:
                        ws8, sw8 = variants["fp8"]
                        x8, sx = self._fp8_quant(x)
                        calls = [lambda wi=wi: self._scaled_mm(x8, wi, sx, sw8) for wi in ws8]
                        ref_fn = calls[0]
                    per_graph = max(len(calls), 20 if M <= 256 else 8)
                    seq = [calls[i % len(calls)] for i in range(per_graph)]

                    def chain(seq=seq):
                        out = None
                        for c in seq:
                            out = c()
                        return out
                    graph = None
                    try:
                        out = ref_fn()
                        ref = x.float() @ w.float().t()
                        rel = ((out.float() - ref).norm() / ref.norm()).item()
                        if self.dev.type == "cuda":
                            graph, _ = capture_graph(chain)
                            med, times = time_fn(graph.replay, self.dev, 3, reps)
                            mode = "graph"
                        else:
                            med, times = time_fn(chain, self.dev, 1, reps)
                            mode = "eager"
                    except Exception as e:  # noqa: BLE001
                        self.problems.append(f"{tag} {prec}: {e!r}"[:300])
                        traceback.print_exc()
                        continue
                    finally:
                        del graph
                    t = med / per_graph
                    res[prec] = t
                    flops = 2 * M * N * K
                    wbytes = N * K * (2 if prec == "bf16" else 1)
                    abytes = M * K * (2 if prec == "bf16" else 1) + M * N * 2
                    kern = ("F.linear (cuBLAS), bf16" if prec == "bf16" else
                            "torch._scaled_mm, float8_e4m3fn, per-tensor scales, bf16 output, use_fast_accum=False; "
                            "activation quantized beforehand (quantization not timed)")
                    ratio = ""
                    if prec == "fp8" and "bf16" in res:
                        ratio = f"; fp8/bf16 time ratio {t / res['bf16']:.3f}"
                    self.add(model=shape.name, phase="gemm", precision=prec, new_tokens=M, time_ms=t,
                             mode=mode,
                             notes=f"one-layer weight GEMM {pname}: M={M} tokens x K={K} -> N={N} (x @ W^T); {kern}; "
                                   f"TFLOPS={flops / (t * 1e-3) / 1e12:.1f}, "
                                   f"GBps={(wbytes + abytes) / (t * 1e-3) / 1e9:.0f} (weight+activation+output bytes); "
                                   f"{per_graph} GEMMs per replay cycling {len(calls)} weight copies (not L2-resident); "
                                   f"median of {reps}, per GEMM min {min(times) / per_graph:.4f} / "
                                   f"max {max(times) / per_graph:.4f} ms; rel. error vs fp32 {rel:.3g}{ratio}")
                    if rel > (0.01 if prec == "bf16" else 0.1):
                        self.problems.append(f"{tag} {prec}: relative error {rel:.3g} vs fp32 reference")
                del x
            del w, variants
            _sync(self.dev)
            self.free_bytes()

    # -- model phases ----------------------------------------------------------
    def run_model(self, shape: Shape, n_layers: int, isls, batches, ctxs):
        full = n_layers == shape.layers_total
        model = Model(shape, n_layers, self.dev, self.dtype, with_head=full, attn=self.attn)
        head = None if full else Head(shape, self.dev, self.dtype)
        scale = shape.layers_total / n_layers
        scope = ("full model incl. embedding + final norm + LM head" if full else
                 f"stack of {n_layers} decoder layers only; scaled_time_ms = time_ms*{shape.layers_total}/{n_layers} "
                 f"(SCALED, excludes embedding/final norm/LM head: add model {shape.name}-lmhead)")
        max_pos = max(list(isls) + [c + 1 for c in ctxs]) + 1
        cos, sin = rope_tables(shape, max_pos, self.dev, self.dtype)
        s = shape
        kv_per_tok = n_layers * 2 * s.kv_heads * s.head_dim * torch.tensor([], dtype=self.dtype).element_size()

        # ---- prefill ----
        for S in isls:
            tag = f"{shape.name} prefill ISL={S}"
            if self.out_of_time(tag):
                continue
            caches = None
            try:
                caches = [(torch.zeros(1, s.kv_heads, S, s.head_dim, device=self.dev, dtype=self.dtype),
                           torch.zeros(1, s.kv_heads, S, s.head_dim, device=self.dev, dtype=self.dtype))
                          for _ in range(n_layers)]
                if full:
                    inp = torch.randint(0, s.vocab, (S,), device=self.dev)
                else:
                    inp = torch.randn(S, s.hidden, device=self.dev, dtype=self.dtype)
                c, sn = cos[:S], sin[:S]
                fn = lambda: model.prefill(inp, c, sn, caches)  # noqa: E731
                out = fn()
                ok = bool(torch.isfinite(out.float()).all().item())
                reps = self.args.prefill_repeats
                for mode, med, times in self.measure(fn, self.args.prefill_modes, 3, reps, tag):
                    self.add(model=shape.name, phase="prefill", batch=1, context_tokens=S, new_tokens=S,
                             layers_measured=n_layers, layers_total=s.layers_total, time_ms=med,
                             scaled_time_ms=med * scale, mode=mode,
                             notes=f"{scope}; writes KV cache; LM head on last token only; "
                                   f"{MODE_NOTE[mode]}; median, {spread(times)}"
                                   + ("" if ok else "; WARNING non-finite output"))
                if head is not None:
                    ids = torch.randint(0, s.vocab, (S,), device=self.dev)
                    hfn = lambda: head.logits(head.embed(ids)[-1:])  # noqa: E731
                    for mode, hmed, times in self.measure(hfn, self.args.prefill_modes, 3, reps, tag + " lmhead"):
                        self.add(model=f"{shape.name}-lmhead", phase="prefill", batch=1, context_tokens=S,
                                 new_tokens=S, layers_measured=0, layers_total=s.layers_total, time_ms=hmed,
                                 scaled_time_ms=hmed, mode=mode,
                                 notes=f"embedding lookup of {S} tokens + final norm + LM head on last token; "
                                       f"{MODE_NOTE[mode]}; median, {spread(times)}")
            except torch.OutOfMemoryError as e:
                self.problems.append(f"{tag}: OOM ({str(e).splitlines()[0]})")
            except Exception as e:  # noqa: BLE001
                self.problems.append(f"{tag}: {e!r}")
                traceback.print_exc()
            finally:
                del caches
                _sync(self.dev)
                self.free_bytes()

        # ---- decode ----
        for L in ctxs:
            for B in batches:
                tag = f"{shape.name} decode B={B} L={L}"
                if self.out_of_time(tag):
                    continue
                kv_bytes = kv_per_tok * B * (L + 1)
                free = self.free_bytes()
                margin = self.args.margin_gib << 30
                if kv_bytes > free - margin:
                    self.skipped.append(f"{tag}: KV cache {kv_bytes / 2**30:.1f} GiB > free {free / 2**30:.1f} GiB "
                                        f"- margin {self.args.margin_gib} GiB (layers in memory: {n_layers})")
                    print(f"skip {self.skipped[-1]}", flush=True)
                    continue
                caches = None
                try:
                    caches = []
                    for _ in range(n_layers):
                        kc = torch.empty(B, s.kv_heads, L + 1, s.head_dim, device=self.dev, dtype=self.dtype)
                        vc = torch.empty_like(kc)
                        kc.normal_()
                        vc.normal_()
                        caches.append((kc, vc))
                    if full:
                        inp = torch.randint(0, s.vocab, (B,), device=self.dev)
                    else:
                        inp = torch.randn(B, s.hidden, device=self.dev, dtype=self.dtype)
                    c, sn = cos[L:L + 1], sin[L:L + 1]  # position L for every sequence
                    fn = lambda: model.decode(inp, c, sn, caches, L)  # noqa: E731
                    out = fn()
                    ok = bool(torch.isfinite(out.float()).all().item())
                    reps = self.args.decode_repeats
                    common = dict(model=shape.name, phase="decode", batch=B, context_tokens=L, new_tokens=1,
                                  layers_measured=n_layers, layers_total=s.layers_total)
                    base_note = (f"{scope}; one step, attention over pre-filled static KV cache of {L} tokens + "
                                 f"the new one; KV {kv_bytes / 2**30:.2f} GiB in memory")
                    if not ok:
                        base_note += "; WARNING non-finite output"
                    for mode, med, times in self.measure(fn, self.args.decode_modes, 3, reps, tag):
                        self.add(**common, time_ms=med, scaled_time_ms=med * scale, mode=mode,
                                 notes=f"{base_note}; {MODE_NOTE[mode]}; median, {spread(times)}")
                    if head is not None and L == ctxs[0]:
                        ids = torch.randint(0, s.vocab, (B,), device=self.dev)
                        hfn = lambda: head.logits(head.embed(ids))  # noqa: E731
                        for mode, hmed, times in self.measure(hfn, self.args.decode_modes, 3, reps, tag + " lmhead"):
                            self.add(model=f"{shape.name}-lmhead", phase="decode", batch=B, context_tokens="",
                                     new_tokens=1, layers_measured=0, layers_total=s.layers_total, time_ms=hmed,
                                     scaled_time_ms=hmed, mode=mode,
                                     notes=f"embedding lookup + final norm + LM head for {B} tokens (independent of "
                                           f"context); {MODE_NOTE[mode]}; median, {spread(times)}")
                except torch.OutOfMemoryError as e:
                    self.problems.append(f"{tag}: OOM ({str(e).splitlines()[0]})")
                    print(f"OOM {tag}", flush=True)
                except Exception as e:  # noqa: BLE001
                    self.problems.append(f"{tag}: {e!r}")
                    traceback.print_exc()
                finally:
                    del caches
                    _sync(self.dev)
                    self.free_bytes()
        del model, head


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="CSV output path")
    p.add_argument("--quick", action="store_true", help="few configurations, few repeats (smoke test)")
    p.add_argument("--models", default="8b,70b", help="comma list of 8b,70b")
    p.add_argument("--layers-70b", type=int, default=8, help="layers of the 70B stack to measure")
    p.add_argument("--decode-modes", default="eager,graph")
    p.add_argument("--prefill-modes", default="eager,graph")
    p.add_argument("--warmup-s", type=float, default=3.0, help="seconds of GEMMs before measuring (clocks)")
    p.add_argument("--prefill-repeats", type=int, default=None)
    p.add_argument("--decode-repeats", type=int, default=None)
    p.add_argument("--margin-gib", type=int, default=6, help="GPU memory kept free besides the KV cache")
    p.add_argument("--time-budget-s", type=float, default=420.0,
                   help="skip remaining configurations after this many seconds")
    p.add_argument("--cpu", action="store_true", help="force CPU (code smoke test only)")
    p.add_argument("--tiny", action="store_true", help="tiny model shape (code smoke test only)")
    p.add_argument("--no-fp8", action="store_true",
                   help="skip the fp8 (_scaled_mm) and per-shape bf16/fp8 GEMM rows written after the models")
    args = p.parse_args(argv)

    if args.quick:
        isls, batches, ctxs = [128, 2048], [1, 64], [2048]
        args.prefill_repeats = args.prefill_repeats or 3
        args.decode_repeats = args.decode_repeats or 5
    else:
        isls, batches, ctxs = [128, 512, 1024, 2048, 4096, 8192], [1, 8, 32, 64, 128, 256], [512, 2048, 8192]
        args.prefill_repeats = args.prefill_repeats or 10
        args.decode_repeats = args.decode_repeats or 20
    if args.tiny:
        isls, batches, ctxs = [16, 64], [1, 4], [32]

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    r = Runner(args)
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": r.dev_name, "gpu": r.gpu,
            "attention": r.attn.desc, "argv": sys.argv}
    if r.dev.type == "cuda":
        props = torch.cuda.get_device_properties(r.dev)
        info.update(sm_count=props.multi_processor_count, total_mem_gib=props.total_memory / 2**30)
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
                                "clocks.mem,power.limit,temperature.gpu", "--format=csv"],
                               capture_output=True, text=True, timeout=20)
            info["nvidia_smi"] = q.stdout.strip()
        except Exception as e:  # noqa: BLE001
            info["nvidia_smi"] = repr(e)
        info["sdpa_backend_probe"] = r.attn.probe_times
    print(json.dumps(info, indent=1), flush=True)

    if r.dev.type == "cuda" and args.warmup_s > 0:
        a = torch.randn(8192, 8192, device=r.dev, dtype=torch.bfloat16)
        t_end = time.time() + args.warmup_s
        while time.time() < t_end:
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        del a
    r.membw()
    r.gemm()
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if args.tiny:
            r.run_model(TINY, TINY.layers_total if m == "8b" else 2, isls, batches, ctxs)
        elif m == "8b":
            r.run_model(LLAMA_8B, LLAMA_8B.layers_total, isls, batches, ctxs)
        elif m == "70b":
            r.run_model(LLAMA_70B, args.layers_70b, isls, batches, ctxs)
        else:
            raise SystemExit(f"unknown model {m}")

    if not args.no_fp8:
        why = r.fp8_probe()
        if why is not None:
            r.problems.append(f"fp8 GEMM rows not recorded: {why}")
            print(f"fp8: {why}", flush=True)
        else:
            try:
                r.gemm_fp8()
            except Exception as e:  # noqa: BLE001
                r.problems.append(f"fp8 gemm: {e!r}"[:300])
                traceback.print_exc()
        r.free_bytes()
        try:
            r.layer_gemms(TINY if args.tiny else LLAMA_8B, [1, 64, 256, 2048], do_fp8=why is None)
        except Exception as e:  # noqa: BLE001
            r.problems.append(f"layer GEMMs: {e!r}"[:300])
            traceback.print_exc()
        info["fp8"] = "ok" if why is None else why

    info.update(problems=r.problems, skipped=r.skipped, elapsed_s=round(r.elapsed(), 1), rows=len(r.rows))
    with open(os.path.splitext(args.out)[0] + ".log.json", "w") as f:
        json.dump(info, f, indent=1)
    print("\n=== summary ===")
    for row in r.rows:
        print(f"{row['model']:>22} {row['phase']:>7} {row['precision']:>4} B={row['batch']!s:>4} "
              f"ctx={row['context_tokens']!s:>5} new={row['new_tokens']!s:>5} "
              f"{row['mode']:>5} {row['time_ms']:>10} ms  scaled {row['scaled_time_ms']}")
    print("skipped:", *r.skipped, sep="\n  ")
    print("problems:", *r.problems, sep="\n  ")
    print(f"elapsed {r.elapsed():.1f}s")


if __name__ == "__main__":
    main()
