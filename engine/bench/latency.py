"""`python -m engine bench latency`: time to first token and inter-token latency at batch 1, 8 and 64 for
prompts of 128 and 2,048 tokens; ours beside HF `generate` eager and HF with the static KV cache (which
HF compiles with torch.compile on CUDA), in the same run. SmolLM2's shapes by default; `--model
llama-3-8b-random` (or another name or path) for others.

How each figure is taken (the same for every system): a batch of equal-length random prompts is
submitted at once; TTFT is the time until every request has its first token, ITL the mean gap
between later steps (new_tokens - 1 gaps). Every system, for every shape: one untimed warm-up run on
other prompts, then the median of --reps (default 3) runs, each on fresh prompts. Ours: prefix caching
off, so nothing is served from the cache.

HF's compiled path recompiles for every new shape (about a minute each), so by default it runs the
batch-1, 128-token shape only (--hf-compile-shapes); the JSON says which shapes were skipped.

Computed, not measured (each marked "figure": "computed"): kv_cache_speedup, one decode step at the
longest prompt beside the prefill of that prompt (what every step would cost without a KV cache); and
each row's decode-step floor, the bytes a step must read (the weights once, every sequence's K/V) over
the measured copy bandwidth.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

import torch

from ..config import EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..sampling_params import SamplingParams
from . import hf_baselines as hf
from .bench_env import (
    add_common_args,
    bench_model,
    copy_bandwidth_gbs,
    decode_weight_bytes,
    device_of,
    environment,
    model_record,
    record_if_asked,
    weights_kind,
)
from .throughput import output_token_ids, run_peer


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
        assert len(output_token_ids(engine.take_output(f"{tag}-{i}"))) == new_tokens
    return {"ttft_ms": (first_all - start) * 1e3, "itl_ms": (last - first_all) / (new_tokens - 1) * 1e3}


def median_of(runs: list[dict]) -> dict:
    """The median of each figure over the runs, and the runs themselves (rounded)."""
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    out["runs"] = {k: [round(r[k], 3) for r in runs] for k in runs[0]}
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m engine bench latency", description=__doc__.split("\n\n")[0])
    add_common_args(p, "latency")
    p.add_argument("--batches", default=None, help="default 1,8,64 (1,2 with --small)")
    p.add_argument("--prompts", default=None, help="prompt lengths, default 128,2048 (8,32 with --small)")
    p.add_argument("--new-tokens", type=int, default=None, help="default 64 (4 with --small)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per shape and system; the median is reported")
    p.add_argument("--hf-compile-shapes", default="1x128",
                   help="BxP shapes for HF static cache + compile, 'all' or 'none'")
    return p.parse_args(argv)


CAVEATS = [
    "HF eager and HF static cache + compile are transformers' generate loops, not a serving engine "
    "(vLLM or SGLang, not installed on the GPU machine, would be the peers to beat)",
    "HF static cache + compile runs only the --hf-compile-shapes shapes (it recompiles per shape); every "
    "other shape compares ours with HF eager, whose per-token Python work dominates a small model",
    "ours is timed from add_request, HF from its generate() call: each includes its own input preparation",
    "every system runs in one process, one after another (ours first in each shape)",
]


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
    compile_shapes = {"all": None, "none": set()}.get(args.hf_compile_shapes, set(args.hf_compile_shapes.split(",")))
    copy_gbs = copy_bandwidth_gbs(device)
    weight_bytes = decode_weight_bytes(cfg, dtype.itemsize)
    rows = []
    for n in lengths:
        for b in batches:
            ours_once(engine, fresh(b, n), new_tokens, f"warm{b}x{n}")                 # untimed warm-up
            ours = median_of([ours_once(engine, fresh(b, n), new_tokens, f"{b}x{n}-{r}") for r in range(args.reps)])
            row = {"batch": b, "prompt_tokens": n, "itl_ms": ours["itl_ms"], "ttft_ms": ours["ttft_ms"],
                   "decode_tokens_per_s": round(b / ours["itl_ms"] * 1e3, 1), "runs": ours["runs"],
                   "computed": _step_floor(cfg, dtype.itemsize, weight_bytes, copy_gbs, b, n, new_tokens,
                                           ours["itl_ms"])}
            if peer is not None:
                row["hf_eager"] = run_peer(lambda: _peer_median(peer, fresh, b, n, new_tokens, False, args.reps))
                wanted = compile_shapes is None or f"{b}x{n}" in compile_shapes
                row["hf_static_compile"] = run_peer(lambda: _peer_median(
                    peer, fresh, b, n, new_tokens, True, args.reps)) if wanted else {"skipped": "not in --hf-compile-shapes"}
                for key in ("hf_eager", "hf_static_compile"):
                    theirs = row[key].get("itl_ms")
                    row[f"itl_speedup_vs_{key}"] = round(theirs / row["itl_ms"], 2) if theirs else None
            rows.append(row)
    weights = weights_kind(args)
    results = {
        "workload": {"batches": batches, "prompt_tokens": lengths, "new_tokens": new_tokens, "reps": args.reps,
                     "model": cfg.name, "weights": weights, "dtype": str(dtype).removeprefix("torch."),
                     "hf_static_compile_shapes": "all" if compile_shapes is None else sorted(compile_shapes),
                     "warm_up": "every system, every shape: one untimed run on other prompts, then the median "
                                f"of {args.reps} runs on fresh prompts",
                     "engine": {"max_num_seqs": max(batches), "max_num_batched_tokens": engine.config.max_num_batched_tokens,
                                "cuda_graphs": engine.runner.graphs is not None, "prefix_caching": False},
                     "copy_bandwidth_gb_s": copy_gbs, "decode_weight_bytes": weight_bytes},
        "rows": rows, "kv_cache_speedup": _kv_speedup(rows, max(lengths)), "goals": _goals(rows, cfg),
        "could_flatter_us": CAVEATS if peer is not None else CAVEATS[-1:],
    }
    return environment("latency", device, results, model_record(model, dtype, weights))


def _peer_median(peer, fresh, b: int, n: int, new_tokens: int, static_cache: bool, reps: int) -> dict:
    """HF: one untimed call on other prompts (it compiles there, with the static cache), then the median
    of `reps` timed calls, each on fresh prompts."""
    hf.timed_generate(peer, fresh(b, n), new_tokens, static_cache)
    out = median_of([hf.timed_generate(peer, fresh(b, n), new_tokens, static_cache) for _ in range(reps)])
    if static_cache:   # HF compiles the static-cache decode step on its own (CUDA): say whether it did
        out["compiled"] = getattr(peer, "_compiled_call", None) is not None
    return out


def _step_floor(cfg: ModelConfig, itemsize: int, weight_bytes: int, copy_gbs: float | None, batch: int,
                prompt: int, new_tokens: int, itl_ms: float) -> dict:
    """Computed: the bytes a mean decode step of this row reads (weights once, each sequence's K/V at its
    mean context) over the measured copy bandwidth, and the measured ITL over that floor."""
    kv = batch * cfg.kv_bytes_per_token(itemsize) * (prompt + new_tokens // 2)
    out = {"figure": "computed", "step_bytes": weight_bytes + kv}
    if copy_gbs:
        floor = (weight_bytes + kv) / (copy_gbs * 1e9) * 1e3
        out |= {"step_floor_ms": round(floor, 4), "measured_over_floor": round(itl_ms / floor, 2)}
    return out


def _kv_speedup(rows: list[dict], longest: int) -> dict | None:
    row = next((r for r in rows if r["batch"] == 1 and r["prompt_tokens"] == longest), None)
    if row is None:
        return None
    return {"figure": "computed", "context_tokens": longest, "decode_step_ms": row["itl_ms"],
            "prefill_ms": row["ttft_ms"], "speedup": round(row["ttft_ms"] / row["itl_ms"], 1),
            "what": "computed from two measured medians at batch 1: one cached decode step vs recomputing the "
                    "whole context (its prefill)"}


def _goals(rows: list[dict], cfg: ModelConfig) -> dict:
    b1 = next((r for r in rows if r["batch"] == 1), None)
    if b1 is None:
        return {}
    goals = {}
    if cfg.name == ModelConfig().name:            # issue 23's SmolLM2 goals
        goals["batch1_itl_at_or_below_0_8_ms"] = b1["itl_ms"] <= 0.8
        t128 = next((r["ttft_ms"] for r in rows if r["batch"] == 1 and r["prompt_tokens"] == 128), None)
        if t128 is not None:
            goals["batch1_ttft_128_at_or_below_3_ms"] = t128 <= 3.0
        if b1.get("hf_static_compile", {}).get("itl_ms"):
            goals["batch1_itl_at_or_below_hf_static_compile"] = b1["itl_ms"] <= b1["hf_static_compile"]["itl_ms"]
    else:                                          # larger shapes: batch 1 near the bandwidth floor
        ratio = b1["computed"].get("measured_over_floor")
        if ratio is not None:
            goals["batch1_itl_within_1_2x_of_the_bandwidth_floor"] = ratio <= 1.2
    return goals


def main(argv=None) -> int:
    report = run(argv)
    print(json.dumps(report, indent=1))
    record_if_asked(report, "python -m engine bench latency", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
