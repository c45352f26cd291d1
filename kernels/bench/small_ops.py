"""Micro-benchmark of a Llama block's small ops: the PyTorch eager reference against one Triton launch.

    python -m kernels.bench.small_ops [--tokens 1,64,256] [--dtype bfloat16] [--calls 200]

Prints one JSON object. SmolLM2-135M shapes (hidden 576, 9 query / 3 KV heads of 64, intermediate 1,536).
For each op and token count, on each backend:
- eager_us: wall time per call of back-to-back calls from Python, synchronised once at the end (warm L2).
  What a step pays today, launch overhead included: the number that matters while steps are launch-bound.
- graph_us: GPU time per call when the same calls replay from a CUDA graph (no Python, no launch gaps).
  What remains once decode steps run as CUDA graphs.
- launches: GPU kernels one call starts (counted with torch.profiler).
per_decode_step sums these over the small ops of one SmolLM2 step (STEP_CALLS): modelled from the
measured per-call figures, not a measured step. Without CUDA only the reference is timed, eagerly.
Self-contained on purpose (no shared timing module), so it can move with the other kernel benchmarks.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import torch

from .. import reference_small_ops as reference
from .timing import capture, replay_ms

HIDDEN, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, INTERMEDIATE, EPS = 576, 9, 3, 64, 1536, 1e-5
NUM_LAYERS = 30
# One step of the fused model: each layer's two norms take the residual add except the very first,
# and the final norm adds the last MLP output.
STEP_CALLS = {"rms_norm": 1, "rms_norm+residual": 2 * NUM_LAYERS, "rope": NUM_LAYERS, "swiglu": NUM_LAYERS}


def _inputs(tokens: int, dtype: torch.dtype, device: str) -> dict[str, tuple]:
    g = torch.Generator(device=device).manual_seed(tokens)

    def rand(*shape, dt=dtype):
        return torch.randn(*shape, generator=g, device=device).to(dt)

    x, residual, weight = rand(tokens, HIDDEN), rand(tokens, HIDDEN), rand(HIDDEN)
    angles = torch.rand(tokens, HEAD_DIM // 2, generator=g, device=device) * 1000  # values do not matter here
    return {
        "rms_norm": (x, weight, EPS),
        "rms_norm+residual": (x, weight, EPS, residual),
        "rope": (rand(tokens, NUM_HEADS, HEAD_DIM), rand(tokens, NUM_KV_HEADS, HEAD_DIM), angles.cos(), angles.sin()),
        "swiglu": (rand(tokens, INTERMEDIATE), rand(tokens, INTERMEDIATE)),
    }


def _implementations() -> dict[str, dict[str, object]]:
    impls = {"reference": {"rms_norm": reference.rms_norm, "rms_norm+residual": reference.rms_norm,
                           "rope": reference.rope, "swiglu": reference.swiglu}}
    if torch.cuda.is_available():
        from ..triton_rms_norm import rms_norm
        from ..triton_rope import rope
        from ..triton_swiglu import swiglu
        impls["triton"] = {"rms_norm": rms_norm, "rms_norm+residual": rms_norm, "rope": rope, "swiglu": swiglu}
    return impls


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def eager_us(fn, calls: int) -> float:
    for _ in range(5):  # compile (Triton) and warm the allocator
        fn()
    _sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us(fn, reps: int = 50, rounds: int = 7) -> float:
    """Median GPU time per call, `reps` calls captured in one CUDA graph and replayed `rounds` times."""
    graph = capture(fn, reps)
    graph.replay()                      # the first replay uploads the graph
    return statistics.median(replay_ms(graph) for _ in range(rounds)) / reps * 1e3


def launches(fn) -> int | None:
    """GPU kernels started by one call, or None where the profiler cannot tell."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        fn()
        _sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            _sync()
        return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    except Exception:  # a count is a nicety; the timings stand without it
        return None


def run(tokens: list[int], dtype: torch.dtype, calls: int) -> dict:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    impls = _implementations()
    rows, step = [], {}
    for t in tokens:
        inputs = _inputs(t, dtype, device)
        per_step = {name: {"eager_us": 0.0, "graph_us": 0.0, "launches": 0} for name in impls}
        for op, args in inputs.items():
            row = {"op": op, "tokens": t}
            for name, table in impls.items():
                fn = (lambda f=table[op], a=args: f(*a))
                m = {"eager_us": round(eager_us(fn, calls), 2)}
                if device == "cuda":
                    m["graph_us"], m["launches"] = round(graph_us(fn), 2), launches(fn)
                row[name] = m
                for key, value in m.items():
                    if value is not None:
                        per_step[name][key] += value * STEP_CALLS[op]
            if "triton" in row:
                row["eager_speedup"] = round(row["reference"]["eager_us"] / row["triton"]["eager_us"], 2)
                row["graph_speedup"] = round(row["reference"]["graph_us"] / row["triton"]["graph_us"], 2)
            rows.append(row)
        step[str(t)] = {name: {k: round(v, 1) for k, v in m.items() if device == "cuda" or k == "eager_us"}
                        for name, m in per_step.items()}
    return {
        "benchmark": "small_ops",
        "device": torch.cuda.get_device_name() if device == "cuda" else f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "triton": _triton_version(),
        "dtype": str(dtype).removeprefix("torch."),
        "shapes": {"hidden": HIDDEN, "num_heads": NUM_HEADS, "num_kv_heads": NUM_KV_HEADS, "head_dim": HEAD_DIM,
                   "intermediate": INTERMEDIATE},
        "results": rows,
        "per_decode_step": {"modelled_from": "per-call figures x calls per step", "calls": STEP_CALLS,
                            "by_tokens": step},
    }


def _triton_version() -> str | None:
    try:
        import triton
        return triton.__version__
    except ImportError:
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="1,64,256", help="comma-separated token counts (a decode batch is tokens)")
    p.add_argument("--dtype", default=None, help="bfloat16 | float16 | float32 (default bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--calls", type=int, default=200, help="back-to-back calls per eager timing")
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype) if a.dtype else (torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    result = run([int(t) for t in a.tokens.split(",")], dtype, a.calls)
    json.dump(result, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
