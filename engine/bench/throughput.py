"""`python -m engine bench throughput`: output tokens per second on one offline workload, ours beside
Hugging Face's loops in the same run, and how close it comes to the bandwidth roofline.

The workload (issue 15): 256 requests, prompt lengths uniform in [100, 1024] (random ids, seed 0), 256
output tokens each, EOS ignored, bf16, SmolLM2's shapes by default (`--model llama-3-8b-random` etc. for
others; random weights with --random-weights or a random-shape name).

    ours                      every request at once, max_num_seqs 256, decode steps from CUDA graphs
    ours_subset_eager         the first --hf-num-requests (64) requests, with --enforce-eager
    ours_subset               the same 64 with graphs
    hf_generate_batch         HF continuous batching, default settings, on the same 64
    hf_generate_batch_cuda_graphs   ... with use_cuda_graph=True
    hf_generate_static_64     HF generate over static batches of 64 (left-padded)
    hf_*_full                 each HF peer again on all 256 requests (--hf-full: which peers)

Every system is warmed up the same way before it is timed: one untimed call on other prompts (the
same count and length distribution, another seed), 3 tokens each. Ours builds a fresh engine for each
run (CUDA graphs captured then, untimed); each HF peer gets a fresh model, one warm-up call on as many
other prompts as its largest timed set, then its timed calls. `like_for_like` divides only figures taken
on the same requests. The roofline is computed, not measured: the bytes the steps must read (every
weight once per step, every sequence's K/V once per decode step) over the measured device-to-device
copy bandwidth. `--small` is a CPU smoke run of the same code (a tiny model).
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


def make_prompts(n: int, lo: int, hi: int, vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def run_ours(model: Llama, prompts: list[list[int]], warm: list[list[int]], out_len: int, **knobs) -> dict:
    """Every request added at once, stepped to the end; timings and the step breakdown from the trace.
    `warm`: other prompts of the same lengths' distribution, run first for WARM_TOKENS tokens, untimed."""
    cfg = EngineConfig(max_model_len=max(map(len, prompts + warm)) + out_len, enable_prefix_caching=False,
                       trace_capacity=1 << 16, **knobs)
    engine = LLMEngine(model, cfg)                         # (captures its CUDA graphs here, untimed)
    _drain(engine, warm, SamplingParams(temperature=0.0, max_tokens=WARM_TOKENS, ignore_eos=True), "warm")
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
    free_memory()
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
    return sum(len(output_token_ids(engine.take_output(rid))) for rid in ids)


def output_token_ids(out) -> list[int]:
    """The generated ids of a finished request's first (only) completion."""
    return out.outputs[0].token_ids


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
        return peer_error(e)
    finally:                # the peer's cache, before the next system
        free_memory()
    if "output_tokens" in r:
        r["output_tokens_per_s"] = round(r["output_tokens"] / r["duration_s"], 1)
        r["duration_s"] = round(r["duration_s"], 3)
    return r


def peer_error(e: Exception) -> dict:
    return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def roofline(cfg: ModelConfig, prompts: list[list[int]], out_len: int, max_num_seqs: int, budget: int,
             weight_bytes: int, bytes_per_value: int, copy_gbs: float | None) -> dict:
    """Computed: the fastest the workload could go if every step only had to read its bytes at copy bandwidth
    (weight_bytes: what one step reads of the weights, bench_env.decode_weight_bytes)."""
    kv_per_token = cfg.kv_bytes_per_token(bytes_per_value)
    # The prefill samples each request's first token; its out_len - 1 decode steps read contexts of
    # p + 1 ... p + out_len - 1 tokens. A wave of up to max_num_seqs requests decodes together.
    waves = -(-len(prompts) // max_num_seqs)
    prompt_tokens = sum(map(len, prompts))
    steps = waves * (out_len - 1) + -(-prompt_tokens // budget)
    kv_read = sum(kv_per_token * (len(p) * (out_len - 1) + out_len * (out_len - 1) // 2) for p in prompts)
    kv_write = kv_per_token * (prompt_tokens + len(prompts) * out_len)
    total = steps * weight_bytes + kv_read + kv_write
    out = {"figure": "computed", "what": "bytes every step must read at the measured copy bandwidth",
           "steps_at_least": steps, "weight_bytes_per_step": weight_bytes, "kv_bytes_read": kv_read,
           "kv_bytes_written": kv_write, "total_bytes": total, "copy_bandwidth_gb_s": copy_gbs,
           "prefill_flops_not_counted": 2 * cfg.matmul_parameters() * prompt_tokens}
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
    p.add_argument("--hf-num-requests", type=int, default=64, help="the subset every HF peer runs (and ours_subset)")
    p.add_argument("--hf-full", default="all", help=f"HF peers that also run every request: all, none, or a comma "
                   f"list of {', '.join(PEERS)}")
    return p.parse_args(argv)


WARM_TOKENS = 3
PEERS = {   # name -> (fresh HF model, prompts, out_len, small) -> {"duration_s", "output_tokens", ...}
    "hf_generate_batch": lambda m, ps, n, small: hf.generate_batch(m, ps, n, small=small),
    "hf_generate_batch_cuda_graphs": lambda m, ps, n, small: hf.generate_batch(m, ps, n, cuda_graphs=True, small=small),
    "hf_generate_static_64": lambda m, ps, n, small: hf.generate_static(m, ps, n, 64),
}
CAVEATS = [
    "HF's loops are not serving engines: vLLM or SGLang (not installed on the GPU machine) would be the peers "
    "a serving engine is judged against; these ratios say how far a plain transformers loop is, no more",
    "HF runs transformers' default attention (SDPA; no flash-attention package on the machine)",
    "HF continuous batching sizes its own KV cache and token budget; ours gets --kv-cache-gib and "
    "--max-num-batched-tokens chosen for this workload",
    "HF generate_batch with CUDA graphs may capture graphs for batch sizes its short warm-up never met, "
    "inside the timed call; ours captures every size before its timer starts",
    "every system runs in one process, one after another (ours first): clocks and memory fragmentation "
    "are not the same for each",
    "random weights and ignored EOS: every system does the same work, which says nothing of output quality",
]


def run(argv=None) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    n = args.num_requests or (8 if args.small else 256)
    out_len = args.output_len or (6 if args.small else 256)
    lo, hi = args.min_prompt or (5 if args.small else 100), args.max_prompt or (40 if args.small else 1024)
    model, dtype = bench_model(args, device)
    cfg = model.config
    prompts = make_prompts(n, lo, hi, cfg.vocab_size, args.seed)
    warm = make_prompts(n, lo, hi, cfg.vocab_size, args.seed + 1)       # other prompts, same distribution
    k = min(args.hf_num_requests, n)
    seqs = min(args.max_num_seqs, 16) if args.small else args.max_num_seqs
    kv = dict(kv_cache_bytes=int(args.kv_cache_gib * 2**30)) if not args.small else dict(num_kv_blocks=256)
    knobs = dict(max_num_seqs=seqs, max_num_batched_tokens=args.max_num_batched_tokens, **kv)
    systems = {"ours": run_ours(model, prompts, warm, out_len, **knobs)}
    if not args.skip_hf:
        systems["ours_subset_eager"] = run_ours(model, prompts[:k], warm[:k], out_len, enforce_eager=True, **knobs)
        systems["ours_subset"] = run_ours(model, prompts[:k], warm[:k], out_len, **knobs)
        full = set(PEERS) if args.hf_full == "all" else set() if args.hf_full == "none" else set(args.hf_full.split(","))
        if full - set(PEERS):
            raise ValueError(f"--hf-full: unknown peer(s) {', '.join(sorted(full - set(PEERS)))}")
        small = args.small or device.type != "cuda"
        for name, call in PEERS.items():
            sets = {name: prompts[:k]} | ({f"{name}_full": prompts} if name in full and n > k else {})
            systems |= run_hf_peer(model, call, sets, warm[:max(map(len, sets.values()))], out_len, small)
    weight_bytes = decode_weight_bytes(cfg, dtype.itemsize)
    copy_gbs = copy_bandwidth_gbs(device)
    line = roofline(cfg, prompts, out_len, seqs, args.max_num_batched_tokens, weight_bytes, dtype.itemsize, copy_gbs)
    like = like_for_like(systems, n, k)
    weights = weights_kind(args)
    results = {
        "workload": {"num_requests": n, "prompt_tokens": [lo, hi], "total_prompt_tokens": sum(map(len, prompts)),
                     "output_len": out_len, "eos": "ignored", "seed": args.seed, "dtype": str(dtype).removeprefix("torch."),
                     "model": cfg.name, "weights": weights, "hf_num_requests": k,
                     "warm_up": f"every system: one untimed call on other prompts (seed {args.seed + 1}), "
                                f"{WARM_TOKENS} tokens each, before its timed calls",
                     "note": (f"HF peers run the first {k} requests (ours_subset runs the same ones); the *_full "
                              f"entries run all {n}") if not args.skip_hf else "HF peers skipped (--skip-hf)"},
        "systems": systems, "like_for_like": like, "roofline": line, "ratios": _ratios(systems, line, like, cfg),
        "could_flatter_us": CAVEATS if not args.skip_hf else CAVEATS[-1:],
    }
    return environment("throughput", device, results, model_record(model, dtype, weights))


def run_hf_peer(ours: Llama, call, sets: dict[str, list], warm: list, out_len: int, small: bool) -> dict:
    """One HF peer on a fresh model: an untimed call on `warm`, then one timed call per set of prompts."""
    model = None
    try:
        model = hf.hf_model(ours)
        call(model, warm, WARM_TOKENS, small)
        return {name: run_peer(lambda ps=ps: call(model, ps, out_len, small)) for name, ps in sets.items()}
    except Exception as e:  # noqa: BLE001 - the peer could not be built or warmed up
        return {name: peer_error(e) for name in sets}
    finally:
        del model
        free_memory()


def like_for_like(systems: dict, n: int, k: int) -> dict:
    """Ours and each peer on the same requests (all n, and the first k): tokens/s and ours ÷ theirs."""
    tables = {}
    for size, ours, suffix in ((n, "ours", "_full" if n > k else ""), (k, "ours_subset", "")):
        if ours not in systems or f"requests_{size}" in tables:
            continue
        row = {"ours": _tps(systems, ours)}
        row |= {peer: _tps(systems, peer + suffix) for peer in PEERS if peer + suffix in systems}
        row["ours_over"] = {peer: _ratio(row["ours"], row[peer]) for peer in PEERS if peer in row}
        tables[f"requests_{size}"] = row
    return tables


def _tps(systems: dict, name: str) -> float | None:
    return (systems.get(name) or {}).get("output_tokens_per_s")


def _ratio(a, b):
    return round(a / b, 2) if a and b else None


def _ratios(systems: dict, line: dict, like: dict, cfg: ModelConfig) -> dict:
    out = {f"ours_subset_vs_{k}": _ratio(_tps(systems, "ours_subset"), _tps(systems, k)) for k in PEERS
           if "ours_subset" in systems}
    out["cuda_graphs_speedup_subset"] = _ratio(_tps(systems, "ours_subset"), _tps(systems, "ours_subset_eager"))
    roof = line.get("output_tokens_per_s")
    ours = _tps(systems, "ours")
    out["ours_fraction_of_roofline_computed"] = round(ours / roof, 3) if roof and ours else None
    if cfg.name == ModelConfig().name:          # issue 23's goals are set on SmolLM2's shapes

        def widest(peer):                       # on every request where the peer ran them, else the subset
            return next((t["ours_over"][peer] for t in like.values() if t["ours_over"].get(peer)), 0)

        out["goals"] = {"at_least_50000_tok_s": (ours or 0) >= 50_000,
                        "at_least_0_3_of_the_roofline_computed": (out["ours_fraction_of_roofline_computed"] or 0) >= 0.3,
                        "at_least_20x_hf_generate_batch_like_for_like": widest("hf_generate_batch") >= 20,
                        "at_least_5x_hf_static_64_like_for_like": widest("hf_generate_static_64") >= 5}
    return out


def main(argv=None) -> int:
    report = run(argv)
    print(json.dumps(report, indent=1))
    record_if_asked(report, "python -m engine bench throughput", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
