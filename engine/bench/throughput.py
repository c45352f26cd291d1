"""`python -m engine bench throughput`: output tokens per second on one offline workload, ours beside
Hugging Face's loops in the same run, and how close it comes to the bandwidth roofline.

The workload (issue 15): 256 requests, prompt lengths uniform in [100, 1024] (random ids, seed 0), 256
output tokens each, EOS ignored, bf16, SmolLM2's shapes (random weights with --random-weights).

    ours                      every request at once, max_num_seqs 256, decode steps from CUDA graphs
    ours (subset, eager)      the subset HF runs, with --enforce-eager: what the graphs buy
    ours (subset)             the same subset with graphs: the like-for-like figure for the ratios
    hf_generate_batch         HF continuous batching, default settings
    hf_generate_batch_graphs  ... with use_cuda_graph=True
    hf_generate_static_64     HF generate over static batches of 64 (left-padded)

HF's loops run ~1,300 tokens/s on this workload (~50 s each at full size), so by default they run the
first 64 requests only (--hf-num-requests; the JSON says so). The roofline: the bytes the steps must
read (every weight once per step, every sequence's K/V once per decode step) over the measured
device-to-device copy bandwidth. `--small` is a CPU smoke run of the same code (a tiny model).
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time

import torch

from ..config import EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..model.llama import Llama
from ..sampling_params import SamplingParams
from . import hf_baselines as hf
from .bench_env import add_common_args, bench_model, copy_bandwidth_gbs, device_of, environment, record_if_asked


def make_prompts(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def run_ours(model: Llama, prompts: list[list[int]], out_len: int, **knobs) -> dict:
    """Every request added at once, stepped to the end; timings and the step breakdown from the trace."""
    cfg = EngineConfig(max_model_len=max(map(len, prompts)) + out_len, enable_prefix_caching=False,
                       trace_capacity=1 << 16, **knobs)
    engine = LLMEngine(model, cfg)                         # (captures its CUDA graphs here, untimed)
    # Warm-up, untimed: the same prompts for 3 tokens compile every kernel variant the run will launch.
    _drain(engine, prompts, SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True), "warm")
    engine.trace.clear()
    sync = (lambda: torch.cuda.synchronize()) if engine.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    produced = _drain(engine, prompts, SamplingParams(temperature=0.0, max_tokens=out_len, ignore_eos=True), "r")
    sync()
    duration = time.perf_counter() - start
    steps = list(engine.trace)
    decodes = [r for r in steps if not r.num_prefill_tokens]
    config = {"max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
              "num_kv_blocks": engine.kv_plan.num_blocks, "kv_cache_gib": round(engine.kv_cache.total_bytes / 2**30, 2),
              "cuda_graphs": engine.runner.graphs is not None, "max_model_len": engine.max_model_len}
    del engine                                             # its KV cache and graph pool, before the next system
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {"duration_s": round(duration, 3), "output_tokens": produced, "requests": len(prompts),
            "output_tokens_per_s": round(produced / duration, 1), "steps": len(steps),
            "decode_steps": len(decodes), "decode_steps_from_cuda_graphs": sum(1 for r in decodes if r.cuda_graph_batch),
            "mean_decode_step_ms": _mean_breakdown(decodes), "mean_prefill_step_ms": _mean_breakdown(
                [r for r in steps if r.num_prefill_tokens]), "config": config}


def _drain(engine: LLMEngine, prompts, params: SamplingParams, prefix: str) -> int:
    ids = [f"{prefix}{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        engine.add_request(rid, p, params)
    while engine.has_unfinished():
        engine.step()
    return sum(len(engine.take_output(rid).outputs[0].token_ids) for rid in ids)


def _mean_breakdown(records) -> dict | None:
    """Mean milliseconds per phase (trace StepRecord.breakdown_ms), None where a phase was not timed."""
    if not records:
        return None
    rows = [r.breakdown_ms() for r in records]
    out = {}
    for key in rows[0]:
        values = [row[key] for row in rows if row[key] is not None]
        out[key] = round(sum(values) / len(values), 4) if values else None
    out["steps"] = len(records)
    return out


def run_peer(fn) -> dict:
    """A Hugging Face peer: its numbers, or the error that stopped it (our figures still get recorded)."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - a peer's API drift must not cost us the run
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    finally:                # the peer's model and cache, before the next system
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if "output_tokens" in r:
        r["output_tokens_per_s"] = round(r["output_tokens"] / r["duration_s"], 1)
        r["duration_s"] = round(r["duration_s"], 3)
    return r


def roofline(cfg: ModelConfig, prompts: list[list[int]], out_len: int, max_num_seqs: int, budget: int,
             weight_bytes: int, bytes_per_value: int, copy_gbs: float | None) -> dict:
    """The fastest the workload could go if every step only had to read its bytes at copy bandwidth."""
    kv_per_token = cfg.kv_bytes_per_token(bytes_per_value)
    # The prefill samples each request's first token; its out_len - 1 decode steps read contexts of
    # p + 1 ... p + out_len - 1 tokens. A wave of up to max_num_seqs requests decodes together.
    waves = -(-len(prompts) // max_num_seqs)
    prompt_tokens = sum(map(len, prompts))
    steps = waves * (out_len - 1) + -(-prompt_tokens // budget)
    kv_read = sum(kv_per_token * (len(p) * (out_len - 1) + out_len * (out_len - 1) // 2) for p in prompts)
    kv_write = kv_per_token * (prompt_tokens + len(prompts) * out_len)
    total = steps * weight_bytes + kv_read + kv_write
    out = {"steps_at_least": steps, "weight_bytes_per_step": weight_bytes, "kv_bytes_read": kv_read,
           "kv_bytes_written": kv_write, "total_bytes": total, "copy_bandwidth_gb_s": copy_gbs,
           "prefill_flops_not_counted": 2 * weight_bytes // bytes_per_value * prompt_tokens}
    if copy_gbs:
        seconds = total / (copy_gbs * 1e9)
        out.update(seconds=round(seconds, 4), output_tokens_per_s=round(len(prompts) * out_len / seconds, 1))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m engine bench throughput", description=__doc__.split("\n\n")[0])
    add_common_args(p, "throughput")
    p.add_argument("--num-requests", type=int, default=None, help="default 256 (8 with --small)")
    p.add_argument("--output-len", type=int, default=None, help="default 256 (6 with --small)")
    p.add_argument("--min-prompt", type=int, default=None)
    p.add_argument("--max-prompt", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--kv-cache-gib", type=float, default=8.0)
    p.add_argument("--hf-num-requests", type=int, default=64, help="requests the HF peers run (they are slow)")
    return p.parse_args(argv)


def run(argv=None) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    n = args.num_requests or (8 if args.small else 256)
    out_len = args.output_len or (6 if args.small else 256)
    lo, hi = args.min_prompt or (5 if args.small else 100), args.max_prompt or (40 if args.small else 1024)
    model, dtype = bench_model(args, device)
    cfg = model.config
    prompts = make_prompts(n, lo, hi, cfg.vocab_size, args.seed)
    subset = prompts[:min(args.hf_num_requests, n)]
    seqs = min(args.max_num_seqs, 16) if args.small else args.max_num_seqs
    kv = dict(kv_cache_bytes=int(args.kv_cache_gib * 2**30)) if not args.small else dict(num_kv_blocks=256)
    knobs = dict(max_num_seqs=seqs, max_num_batched_tokens=args.max_num_batched_tokens, **kv)
    systems = {"ours": run_ours(model, prompts, out_len, **knobs),
               "ours_subset_eager": run_ours(model, subset, out_len, enforce_eager=True, **knobs),
               "ours_subset": run_ours(model, subset, out_len, **knobs)}
    if not args.skip_hf:   # a fresh HF model for each (generate_batch may switch its attention implementation)
        small = args.small or device.type != "cuda"
        systems["hf_generate_batch"] = run_peer(lambda: hf.generate_batch(hf.hf_model(model), subset, out_len, small=small))
        systems["hf_generate_batch_cuda_graphs"] = run_peer(
            lambda: hf.generate_batch(hf.hf_model(model), subset, out_len, cuda_graphs=True, small=small))
        systems["hf_generate_static_64"] = run_peer(lambda: hf.generate_static(hf.hf_model(model), subset, out_len, 64))
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    copy_gbs = copy_bandwidth_gbs(device)
    line = roofline(cfg, prompts, out_len, seqs, args.max_num_batched_tokens, weight_bytes, dtype.itemsize, copy_gbs)
    results = {
        "workload": {"num_requests": n, "prompt_tokens": [lo, hi], "total_prompt_tokens": sum(map(len, prompts)),
                     "output_len": out_len, "eos": "ignored", "seed": args.seed, "dtype": str(dtype).removeprefix("torch."),
                     "model": cfg.name, "weights": "random" if (args.random_weights or args.small) else "real",
                     "hf_num_requests": len(subset),
                     "note": (f"HF peers run the first {len(subset)} requests of the workload (they take ~50 s each at "
                              "full size); ours_subset runs the same ones for like-for-like ratios")},
        "systems": systems, "roofline": line, "ratios": _ratios(systems, line),
    }
    return environment("throughput", device, results)


def _ratios(systems: dict, line: dict) -> dict:
    def tps(name):
        return (systems.get(name) or {}).get("output_tokens_per_s")

    def ratio(a, b):
        return round(tps(a) / tps(b), 2) if tps(a) and tps(b) else None

    out = {f"ours_subset_vs_{k}": ratio("ours_subset", k)
           for k in ("hf_generate_batch", "hf_generate_batch_cuda_graphs", "hf_generate_static_64")}
    out["ours_full_vs_hf_generate_batch"] = ratio("ours", "hf_generate_batch")
    out["cuda_graphs_speedup_subset"] = ratio("ours_subset", "ours_subset_eager")
    roof = line.get("output_tokens_per_s")
    out["ours_fraction_of_roofline"] = round(tps("ours") / roof, 3) if roof and tps("ours") else None
    out["goals"] = {"throughput_at_least_20x_hf_generate_batch": (out["ours_full_vs_hf_generate_batch"] or 0) >= 20,
                    "at_least_25000_tok_s": (tps("ours") or 0) >= 25_000,
                    "at_least_half_the_roofline": (out["ours_fraction_of_roofline"] or 0) >= 0.5}
    return out


def main(argv=None) -> int:
    report = run(argv)
    print(json.dumps(report, indent=1))
    record_if_asked(report, "python -m engine bench throughput", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
