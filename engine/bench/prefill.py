"""`python -m engine bench prefill`: time to first token against prompt length, one request at a time,
beside what the compute and the bytes allow (computed).

    prompt lengths   128, 256, ..., 16,384 tokens (random ids); a length the model's context cannot hold
                     with its one output token is measured at context - 1 instead (the JSON says so)
    each length      one untimed run on another prompt of that length, then the median of --reps (3)
    the engine       one sequence, a token budget as large as the longest prompt (every prompt is one
                     prefill step), prefix caching off, max_tokens 1
    TTFT             from add_request until the step that returns the first token ends (synchronized)

Computed, not measured ("figure": "computed" in each row): the prefill's FLOPs (2 x matmul weights x
tokens, the causal attention's QK^T and PV, the LM head for the one row that samples) over the measured
bf16 matrix-product rate, and the bytes it must move (the weights once, the K/V it writes) over the
measured copy bandwidth; the larger of the two is the floor. `--small` is a CPU smoke run of the same code.
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
from .bench_env import (
    add_common_args,
    bench_model,
    copy_bandwidth_gbs,
    decode_weight_bytes,
    device_of,
    environment,
    matmul_tflops,
    model_record,
    record_if_asked,
    weights_kind,
)
from .throughput import output_token_ids

LENGTHS = "128,256,512,1024,2048,4096,8192,16384"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m engine bench prefill", description=__doc__.split("\n\n")[0])
    add_common_args(p, "prefill")
    p.add_argument("--lengths", default=None, help=f"prompt lengths, default {LENGTHS} (8,16,32,64 with --small)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per length; the median is reported")
    return p.parse_args(argv)


def prompt_lengths(requested: list[int], context: int) -> list[int]:
    """The lengths to measure: each requested one, or context - 1 where the prompt and its one output
    token would not fit the model's context; sorted, each once."""
    return sorted({min(n, context - 1) for n in requested})


def prefill_flops(cfg: ModelConfig, n: int) -> int:
    """Matrix FLOPs of one n-token prefill: the layers' weights for every token, causal attention (token i
    attends to i + 1 keys: QK^T and PV, 2 FLOPs a multiply-add each), the LM head for the last token."""
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * (n * (n + 1) // 2)
    return 2 * cfg.matmul_parameters() * n + attention + 2 * cfg.hidden_size * cfg.vocab_size


def ttft_once(engine: LLMEngine, prompt: list[int], tag: str) -> dict:
    """One prompt, one output token: TTFT and the prefill step's phases from the trace."""
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    sync = torch.cuda.synchronize if engine.device.type == "cuda" else (lambda: None)
    engine.trace.clear()
    sync()
    start = time.perf_counter()
    engine.add_request(tag, prompt, params)
    first = None
    while engine.has_unfinished():
        if engine.step() and first is None:
            sync()
            first = time.perf_counter()
    assert len(output_token_ids(engine.take_output(tag))) == 1
    steps = [r for r in engine.trace if r.num_prefill_tokens]
    assert len(steps) == 1, "the token budget must hold the whole prompt"
    phases = steps[0].breakdown_ms()
    return {"ttft_ms": (first - start) * 1e3, "step_wall_ms": phases["wall"], "gpu_forward_ms": phases["gpu_forward"]}


def run(argv=None) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    model, dtype = bench_model(args, device)
    cfg = model.config
    requested = [int(n) for n in (args.lengths or ("8,16,32,64" if args.small else LENGTHS)).split(",")]
    lengths = prompt_lengths(requested, cfg.max_position_embeddings)
    engine = LLMEngine(model, EngineConfig(
        max_num_seqs=1, max_num_batched_tokens=max(lengths), max_model_len=max(lengths) + 1,
        enable_prefix_caching=False, **({"num_kv_blocks": 64} if args.small else {})))
    rng = random.Random(args.seed)

    def fresh(n):
        return [rng.randrange(3, cfg.vocab_size) for _ in range(n)]

    tflops, copy_gbs = matmul_tflops(device), copy_bandwidth_gbs(device)
    weight_bytes = decode_weight_bytes(cfg, dtype.itemsize)
    rows = []
    for n in lengths:
        ttft_once(engine, fresh(n), f"warm{n}")                                   # untimed warm-up
        runs = [ttft_once(engine, fresh(n), f"{n}-{r}") for r in range(args.reps)]
        med = {k: None if runs[0][k] is None else round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
        flops = prefill_flops(cfg, n)
        compute_ms = flops / (tflops * 1e12) * 1e3
        bytes_ms = (weight_bytes + n * cfg.kv_bytes_per_token(dtype.itemsize)) / (copy_gbs * 1e9) * 1e3
        floor = max(compute_ms, bytes_ms)
        rows.append({"prompt_tokens": n, "ttft_ms": med["ttft_ms"], "prompt_tokens_per_s": round(n / med["ttft_ms"] * 1e3, 1),
                     "step_wall_ms": med["step_wall_ms"], "gpu_forward_ms": med["gpu_forward_ms"],
                     "runs": {"ttft_ms": [round(r["ttft_ms"], 3) for r in runs]},
                     "computed": {"figure": "computed", "flops": flops, "compute_floor_ms": round(compute_ms, 4),
                                  "bytes_floor_ms": round(bytes_ms, 4), "floor_ms": round(floor, 4),
                                  "bound": "compute" if compute_ms >= bytes_ms else "bytes",
                                  "ttft_over_compute_floor": round(med["ttft_ms"] / compute_ms, 2),
                                  "ttft_over_floor": round(med["ttft_ms"] / floor, 2)}})
    weights = weights_kind(args)
    results = {
        "workload": {"prompt_tokens": lengths, "requested": requested,
                     "clamped_to_context": sorted({n for n in requested if n not in lengths}), "batch": 1,
                     "reps": args.reps, "model": cfg.name, "weights": weights, "dtype": str(dtype).removeprefix("torch."),
                     "warm_up": "one untimed run on another prompt of each length",
                     "engine": {"max_num_batched_tokens": engine.config.max_num_batched_tokens,
                                "prefix_caching": False, "cuda_graphs_for_prefill": False}},
        "ceilings": {"figure": "measured", "matmul_tflops": tflops, "copy_bandwidth_gb_s": copy_gbs,
                     "what": "a large matrix product (bf16 8192^3 on CUDA) and a 1 GiB device copy, this run"},
        "rows": rows, "goals": _goals(rows, cfg),
        "could_flatter_us": ["no peer runs here: the figures stand against the computed floors only"],
    }
    return environment("prefill", device, results, model_record(model, dtype, weights))


def _goals(rows: list[dict], cfg: ModelConfig) -> dict:
    long = [r for r in rows if r["prompt_tokens"] >= 2048]
    goals = {}
    if long:
        goals["ttft_within_1_5x_of_the_compute_floor_from_2k_tokens"] = all(
            r["computed"]["ttft_over_compute_floor"] <= 1.5 for r in long)
    if cfg.name == ModelConfig().name and rows[-1]["prompt_tokens"] >= 8191 and rows[-1]["step_wall_ms"]:
        goals["prefill_step_of_8k_tokens_at_or_below_10_ms"] = rows[-1]["step_wall_ms"] <= 10.0
    return goals


def main(argv=None) -> int:
    report = run(argv)
    print(json.dumps(report, indent=1))
    record_if_asked(report, "python -m engine bench prefill", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
