"""`python -m engine bench latency`: time to first token and inter-token latency at batch 1, 8 and 64 for
prompts of 128 and 2,048 tokens; ours beside HF `generate` eager and HF with the static KV cache (which
HF compiles with torch.compile on CUDA), in the same run.

How each figure is taken (the same for every system): a batch of equal-length random prompts is
submitted at once; TTFT is the time until every request has its first token, ITL the mean gap
between later steps (new_tokens - 1 gaps). Ours: prefix caching off and fresh prompts every run,
so nothing is served from the cache; the median of --reps runs after one warm-up run per shape.

HF's compiled path recompiles for every new shape (about a minute each), so by default it runs the
batch-1, 128-token shape only (--hf-compile-shapes); the JSON says which shapes were skipped.
The kv_cache_speedup entry compares one decode step at the longest prompt with the prefill of that
prompt: what every step would cost without a KV cache (the whole context recomputed).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from ..config import EngineConfig
from ..llm_engine import LLMEngine
from ..sampling_params import SamplingParams
from . import hf_baselines as hf
from .bench_env import add_common_args, bench_model, device_of, environment, record_if_asked
from .throughput import run_peer


def ours_once(engine: LLMEngine, batch: list[list[int]], new_tokens: int, tag: str) -> dict:
    """One batch through the engine: {"ttft_ms", "itl_ms"} as defined above."""
    params = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for i, p in enumerate(batch):
        engine.add_request(f"{tag}-{i}", p, params)
    started, first_all, last = set(), None, None
    while engine.has_unfinished():
        for ev in engine.step():
            started.add(ev.request_id)
        last = time.perf_counter()
        if first_all is None and len(started) == len(batch):
            first_all = last
    for i in range(len(batch)):
        assert len(engine.take_output(f"{tag}-{i}").outputs[0].token_ids) == new_tokens
    return {"ttft_ms": (first_all - start) * 1e3, "itl_ms": (last - first_all) / (new_tokens - 1) * 1e3}


def median_of(runs: list[dict]) -> dict:
    return {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m engine bench latency", description=__doc__.split("\n\n")[0])
    add_common_args(p, "latency")
    p.add_argument("--batches", default=None, help="default 1,8,64 (1,2 with --small)")
    p.add_argument("--prompts", default=None, help="prompt lengths, default 128,2048 (8,32 with --small)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 64 (4 with --small)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--hf-compile-shapes", default="1x128", help="BxP shapes for HF static cache + compile, or 'all'")
    return p.parse_args(argv)


def run(argv=None) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    batches = [int(b) for b in (args.batches or ("1,2" if args.small else "1,8,64")).split(",")]
    lengths = [int(n) for n in (args.prompts or ("8,32" if args.small else "128,2048")).split(",")]
    new_tokens = args.new_tokens or (4 if args.small else 64)
    model, dtype = bench_model(args, device)
    cfg = model.config
    engine = LLMEngine(model, EngineConfig(
        max_num_seqs=max(batches), max_model_len=max(lengths) + new_tokens, enable_prefix_caching=False,
        max_num_batched_tokens=2048 if args.small else 16384, **({"num_kv_blocks": 256} if args.small else {})))
    rng = random.Random(args.seed)

    def fresh(b, n):
        return [[rng.randrange(3, cfg.vocab_size) for _ in range(n)] for _ in range(b)]

    peer = None if args.skip_hf else hf.hf_model(model)
    compile_shapes = None if args.hf_compile_shapes == "all" else set(args.hf_compile_shapes.split(","))
    rows = []
    for n in lengths:
        for b in batches:
            ours_once(engine, fresh(b, n), new_tokens, f"warm{b}x{n}")                 # untimed warm-up
            ours = median_of([ours_once(engine, fresh(b, n), new_tokens, f"{b}x{n}-{r}") for r in range(args.reps)])
            row = {"batch": b, "prompt_tokens": n, "itl_ms": ours["itl_ms"], "ttft_ms": ours["ttft_ms"],
                   "decode_tokens_per_s": round(b / ours["itl_ms"] * 1e3, 1)}
            if peer is not None:
                row["hf_eager"] = run_peer(lambda: _peer_twice(peer, fresh(b, n), new_tokens, False))
                wanted = compile_shapes is None or f"{b}x{n}" in compile_shapes
                row["hf_static_compile"] = run_peer(lambda: _peer_twice(
                    peer, fresh(b, n), new_tokens, True)) if wanted else {"skipped": "not in --hf-compile-shapes"}
                for key in ("hf_eager", "hf_static_compile"):
                    theirs = row[key].get("itl_ms")
                    row[f"itl_speedup_vs_{key}"] = round(theirs / row["itl_ms"], 2) if theirs else None
            rows.append(row)
    results = {
        "workload": {"batches": batches, "prompt_tokens": lengths, "new_tokens": new_tokens, "reps": args.reps,
                     "model": cfg.name, "weights": "random" if (args.small or args.random_weights) else "real",
                     "dtype": str(dtype).removeprefix("torch."),
                     "hf_static_compile_shapes": "all" if compile_shapes is None else sorted(compile_shapes),
                     "engine": {"max_num_seqs": max(batches), "max_num_batched_tokens": engine.config.max_num_batched_tokens,
                                "cuda_graphs": engine.runner.graphs is not None, "prefix_caching": False}},
        "rows": rows, "kv_cache_speedup": _kv_speedup(rows, max(lengths)), "goals": _goals(rows),
    }
    return environment("latency", device, results)


def _peer_twice(peer, batch, new_tokens: int, static_cache: bool) -> dict:
    """HF: one warm-up call (it compiles, with the static cache) and one timed call."""
    hf.timed_generate(peer, batch, new_tokens, static_cache)
    r = hf.timed_generate(peer, batch, new_tokens, static_cache)
    out = {"ttft_ms": round(r["ttft_ms"], 3), "itl_ms": round(r["itl_ms"], 3)}
    if static_cache:   # HF compiles the static-cache decode step on its own (CUDA): say whether it did
        out["compiled"] = getattr(peer, "_compiled_call", None) is not None
    return out


def _kv_speedup(rows: list[dict], longest: int) -> dict | None:
    row = next((r for r in rows if r["batch"] == 1 and r["prompt_tokens"] == longest), None)
    if row is None:
        return None
    return {"context_tokens": longest, "decode_step_ms": row["itl_ms"], "prefill_ms": row["ttft_ms"],
            "speedup": round(row["ttft_ms"] / row["itl_ms"], 1),
            "what": "batch 1: one cached decode step vs recomputing the whole context (its prefill)"}


def _goals(rows: list[dict]) -> dict:
    b1 = next((r for r in rows if r["batch"] == 1 and r.get("hf_static_compile", {}).get("itl_ms")), None)
    if b1 is None:
        return {}
    return {"batch1_itl_at_or_below_hf_static_compile": b1["itl_ms"] <= b1["hf_static_compile"]["itl_ms"],
            "batch1_itl_at_or_below_3_ms": b1["itl_ms"] <= 3.0,
            "batch1_itl_5x_below_hf_eager": (b1.get("itl_speedup_vs_hf_eager") or 0) >= 5}


def main(argv=None) -> int:
    report = run(argv)
    print(json.dumps(report, indent=1))
    record_if_asked(report, "python -m engine bench latency", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
