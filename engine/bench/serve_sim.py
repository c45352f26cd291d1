"""`python -m engine bench serve-sim`: a synthetic serving workload through the engine, as JSON.

The four traffic patterns of the serving chapters (input / output lengths in tokens):

    summarization    ISL 2000-4000   OSL 100-300     prefill-heavy: TTFT is the pain
    chatbot          ISL   50-200    OSL 100-500     balanced; each prompt also starts with one shared
                                                     system prompt (100 tokens, scaled, at least 2 blocks)
    codegen          ISL  200-500    OSL 500-2000    decode-heavy: KV memory is the pain
    mixed            a third of each, shuffled

Each run is measured twice on the same engine settings: continuous batching, and static batching
(StaticBatchScheduler: a batch of up to max_num_seqs requests is admitted into an empty engine, its
prompts are prefilled in chunks before anyone decodes, finished requests keep their seat until the
batch ends). Everything reported is read from the step trace and the request outputs.
`--small` is the CPU smoke version: a tiny random-weights model and lengths scaled by 0.1.
Token ids are random: with random weights text means nothing; lengths and timings are what count.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..config import RANDOM_SHAPES, EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..model.llama import Llama
from ..outputs import RequestOutput
from ..sampling_params import SamplingParams
from .bench_env import TINY, environment, model_record, record_if_asked

PATTERNS = {  # (ISL range, OSL range)
    "summarization": ((2000, 4000), (100, 300)),
    "chatbot": ((50, 200), (100, 500)),
    "codegen": ((200, 500), (500, 2000)),
}
SYSTEM_PROMPT_TOKENS = 100      # chatbot requests start with the same system prompt (scaled with lengths)
MIN_SYSTEM_PROMPT_TOKENS = 32   # ... but never under two 16-token blocks, so prefix caching has something to reuse


@dataclass(slots=True)
class SimRequest:
    request_id: str
    pattern: str
    prompt_ids: list[int]
    output_len: int
    arrival_s: float            # offset from the start of the run


def make_workload(pattern: str, num_requests: int, scale: float, vocab: int, rate: float = float("inf"),
                  seed: int = 0) -> list[SimRequest]:
    """`num_requests` requests of one pattern (PATTERNS, or "mixed": a third of each, shuffled), with
    random token ids in [3, vocab), lengths drawn from the pattern's ranges times `scale`, and Poisson
    arrivals at `rate` per second (inf: all at t=0). The same seed gives the same workload."""
    rng = random.Random(seed)
    system = [rng.randrange(3, vocab) for _ in range(max(MIN_SYSTEM_PROMPT_TOKENS, int(SYSTEM_PROMPT_TOKENS * scale)))]
    kinds = [pattern] * num_requests if pattern != "mixed" else [list(PATTERNS)[i % 3] for i in range(num_requests)]
    if pattern == "mixed":
        rng.shuffle(kinds)
    out, t = [], 0.0
    for i, kind in enumerate(kinds):
        (i_lo, i_hi), (o_lo, o_hi) = PATTERNS[kind]
        isl = max(1, int(rng.randint(i_lo, i_hi) * scale))
        osl = max(1, int(rng.randint(o_lo, o_hi) * scale))
        prompt = [rng.randrange(3, vocab) for _ in range(isl)]
        if kind == "chatbot":
            prompt = system + prompt
        if rate != float("inf"):
            t += rng.expovariate(rate)
        out.append(SimRequest(f"{kind}-{i}", kind, prompt, osl, t))
    return out


def workload_lengths(pattern: str, num_requests: int, scale: float = 1.0, seed: int = 0) -> list[tuple[str, int, int]]:
    """(pattern, input tokens, output tokens) of each request of `make_workload`, for callers that make
    their own prompts (the batching-timeline widget). The prompts' ids are drawn from the default
    model's vocabulary, as `make_workload`'s are: the lengths depend on that draw, so they are fixed."""
    if pattern not in (*PATTERNS, "mixed"):
        raise ValueError(f"pattern must be one of {', '.join([*PATTERNS, 'mixed'])}, not {pattern!r}")
    reqs = make_workload(pattern, num_requests, scale, ModelConfig().vocab_size, float("inf"), seed)
    return [(r.pattern, len(r.prompt_ids), r.output_len) for r in reqs]


def pct(values: list[float], scale: float = 1.0) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    a = np.asarray(values) * scale
    return {"mean": round(float(a.mean()), 3), "p50": round(float(np.percentile(a, 50)), 3),
            "p90": round(float(np.percentile(a, 90)), 3), "p99": round(float(np.percentile(a, 99)), 3)}


@dataclass(slots=True)
class ServeRun:
    metrics: dict                       # what serve-sim reports: throughput, TTFT/ITL percentiles, steps, ...
    outputs: list[RequestOutput]        # one per workload request, in workload order


def serve_workload(engine: LLMEngine, workload: list[SimRequest], check: Callable[[], None] = lambda: None,
                   on_step: Callable[[LLMEngine, int], None] | None = None) -> ServeRun:
    """Serve `workload` on `engine`, stepping it on this thread until every request has finished.

    Each request joins when its arrival time (seconds after the start) has come, greedy, with EOS
    ignored so that lengths are the workload's. `check()` runs before every step and may raise to
    stop (a widget's Cancel): every request still in the engine is then aborted, so no block stays
    held. `on_step(engine, steps)` runs after every step (progress). Everything reported is read
    from the step trace and the request outputs, like `python -m engine bench serve-sim` does."""
    pending = sorted(workload, key=lambda r: r.arrival_s)
    steps = preempt = batch_sum = tokens_sum = padding = 0
    usage, hits, queries, last = [], 0, 0, None
    start = time.perf_counter()
    try:
        while pending or engine.has_unfinished():
            check()
            now = time.perf_counter() - start
            while pending and pending[0].arrival_s <= now:
                r = pending.pop(0)
                engine.add_request(r.request_id, r.prompt_ids,
                                   SamplingParams(temperature=0.0, max_tokens=r.output_len, ignore_eos=True),
                                   arrival_s=start + r.arrival_s)
            if not engine.has_unfinished():
                time.sleep(min(0.01, max(0.0, pending[0].arrival_s - now)))
                continue
            engine.step()
            last = rec = engine.trace.records[-1]
            steps += 1
            preempt += len(rec.preempted)
            batch_sum += len(rec.entries)
            tokens_sum += rec.num_batched_tokens
            usage.append(rec.kv_usage)
            hits += rec.prefix_hit_tokens
            queries += rec.prefix_query_tokens
            padding += rec.num_padding_tokens
            if on_step is not None:
                on_step(engine, steps)
    except BaseException:
        for request_id in engine.unfinished_request_ids():
            engine.abort(request_id)            # frees its blocks; its output is dropped below
        for r in workload:
            engine.take_output(r.request_id)
        raise
    duration = time.perf_counter() - start
    outs = [engine.take_output(r.request_id) for r in workload]
    assert all(o is not None and len(o.outputs[0].token_ids) == r.output_len for o, r in zip(outs, workload))
    n_in = sum(len(r.prompt_ids) for r in workload)
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    metrics = {
        "duration_s": round(duration, 3),
        "requests_per_s": round(len(workload) / duration, 3),
        "output_tokens_per_s": round(n_out / duration, 2),
        "total_tokens_per_s": round((n_in + n_out) / duration, 2),
        "ttft_ms": pct([o.metrics.ttft_s for o in outs], 1e3),
        "itl_ms": pct([x for o in outs for x in o.metrics.itl_s], 1e3),
        "e2e_s": pct([o.metrics.e2e_s for o in outs]),
        "steps": steps,
        "mean_batch_size": round(batch_sum / max(1, steps), 2),
        "mean_tokens_per_step": round(tokens_sum / max(1, steps), 2),
        "padding_decodes": padding,
        "preemptions": preempt,
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else 0.0,
        "kv_usage": {"mean": round(float(np.mean(usage)), 4), "max": round(float(np.max(usage)), 4)},
        "num_kv_blocks": last.num_blocks,
        "all_blocks_free_at_end": last.num_free_blocks == last.num_blocks,
    }
    return ServeRun(metrics, outs)


def run_once(model: Llama, cfg: EngineConfig, workload: list[SimRequest], static: bool, label: str = "") -> dict:
    """One measured run on a fresh engine (continuous or static batching), as the report's JSON."""
    clock = {"start": time.perf_counter(), "last_log": time.perf_counter()}

    def sign_of_life(engine: LLMEngine, steps: int) -> None:      # long runs say they are alive
        if label and time.perf_counter() - clock["last_log"] > 10:
            clock["last_log"] = time.perf_counter()
            print(f"[serve-sim] {label}: {steps} steps, {len(engine.unfinished_request_ids())} requests left, "
                  f"{clock['last_log'] - clock['start']:.0f} s", file=sys.stderr, flush=True)
    return serve_workload(LLMEngine(model, cfg, static_batching=static), workload, on_step=sign_of_life).metrics


def load_model(name: str, device: str, dtype: str | None, seed: int) -> tuple[Llama, str]:
    """'tiny' (random, small shapes), a RANDOM_SHAPES name (real shapes, random values), or a real model."""
    if name == "tiny":
        dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
        return Llama.random(TINY, seed=seed).to(dev).eval(), "random"
    from ..loader import model_loader    # loads weights (or builds random ones) the way LLM() does
    model = model_loader.load_model(EngineConfig(model=None if name == "default" else name,
                                                 device=device, dtype=dtype, seed=seed)).model
    return model, "random" if name in RANDOM_SHAPES else "real"


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    n = torch.get_num_threads()
    return f"cpu ({n} thread{'' if n == 1 else 's'})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m engine bench serve-sim", description=__doc__.split("\n\n")[0])
    p.add_argument("--pattern", choices=[*PATTERNS, "mixed"], default="mixed")
    p.add_argument("--num-requests", type=int, default=None)
    p.add_argument("--scale", type=float, default=None, help="multiply every ISL/OSL by this (default 1; 0.1 with --small)")
    p.add_argument("--small", action="store_true", help="CPU smoke run: tiny random model, 24 requests, lengths x0.1")
    p.add_argument("--model", default=None, help="tiny | smollm2-random | llama-3.2-1b-random | llama-3-8b-random | default | PATH "
                   "(default: tiny with --small, else default)")
    p.add_argument("--mode", choices=["both", "continuous", "static"], default="both")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads on CPU")
    p.add_argument("--request-rate", type=float, default=float("inf"), help="Poisson arrivals per second (inf = all at once)")
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-kv-blocks", type=int, default=None)
    p.add_argument("--preemption-mode", choices=["recompute", "swap"], default="recompute")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", action="store_true",
                   help="also save the run as engine/bench/data/serve-sim.json (chapter 14 cites it)")
    p.add_argument("--warmup", choices=["short", "full"], default="short",
                   help="full: the whole workload once untimed first (GPUs compile kernels per shape family); "
                        "static then warms up on its first batch only, whose shapes the continuous run has compiled")
    return p.parse_args(argv)


def run(argv: list[str] | None = None) -> dict:
    """Run the benchmark, print its JSON report, and return it."""
    a = parse_args(argv)
    model_name = a.model or ("tiny" if a.small else "default")
    scale = a.scale if a.scale is not None else (0.1 if a.small else 1.0)
    num_requests = a.num_requests or (24 if a.small else 96)
    if a.threads:
        torch.set_num_threads(a.threads)
    elif model_name == "tiny":
        torch.set_num_threads(1)        # tiny matrices: more threads only contend
    model, weights = load_model(model_name, a.device, a.dtype, a.seed)
    device = model.embed.weight.device
    workload = make_workload(a.pattern, num_requests, scale, model.config.vocab_size, a.request_rate, a.seed)
    warmup = make_workload("chatbot", 2, 0.05, model.config.vocab_size, float("inf"), a.seed + 1)
    longest = max(len(r.prompt_ids) + r.output_len for r in workload + warmup)
    cfg = EngineConfig(block_size=a.block_size, num_kv_blocks=a.num_kv_blocks, max_num_seqs=a.max_num_seqs,
                       max_num_batched_tokens=max(a.max_num_batched_tokens, longest) if a.no_chunked_prefill
                       else a.max_num_batched_tokens,
                       max_model_len=max(longest, 16), enable_prefix_caching=not a.no_prefix_caching,
                       enable_chunked_prefill=not a.no_chunked_prefill, preemption_mode=a.preemption_mode)
    # Warm-up (kernel compilation on GPUs, allocator caches everywhere), not measured.
    run_once(model, cfg, warmup, False)
    modes = ["continuous", "static"] if a.mode == "both" else [a.mode]
    if a.warmup == "full":
        # Continuous batching reaches every shape family a static batch does (decodes of up to
        # max_num_seqs rows at every context, budget-sized prefill chunks), so once it has run the
        # workload, one static batch is warm-up enough; static alone warms up on the whole workload.
        warm_continuous = "continuous" in modes
        if warm_continuous:
            run_once(model, cfg, workload, False, "warm-up continuous")
        if "static" in modes:
            run_once(model, cfg, workload[:cfg.max_num_seqs] if warm_continuous else workload, True, "warm-up static")
    results = {m: run_once(model, cfg, workload, m == "static", m) for m in modes}
    num_kv_blocks = {r.pop("num_kv_blocks") for r in results.values()}.pop()
    report = {
        "benchmark": "serve-sim",
        "measured_on": describe_device(device),
        "model": model.config.name, "weights": weights, "dtype": str(model.embed.weight.dtype).removeprefix("torch."),
        "warmup": a.warmup,
        "workload": {"pattern": a.pattern, "num_requests": num_requests, "length_scale": scale,
                     "request_rate": "all at t=0" if a.request_rate == float("inf") else a.request_rate,
                     "input_tokens": sum(len(r.prompt_ids) for r in workload),
                     "output_tokens": sum(r.output_len for r in workload),
                     "by_pattern": {k: sum(r.pattern == k for r in workload) for k in PATTERNS}},
        "engine": {"block_size": cfg.block_size, "num_kv_blocks": num_kv_blocks,
                   "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
                   "prefix_caching": cfg.enable_prefix_caching, "chunked_prefill": cfg.enable_chunked_prefill,
                   "preemption_mode": cfg.preemption_mode},
        "results": results,
    }
    if len(results) == 2:
        c, s = results["continuous"], results["static"]
        report["continuous_vs_static"] = {
            "output_throughput_ratio": round(c["output_tokens_per_s"] / s["output_tokens_per_s"], 2),
            "steps_ratio": round(s["steps"] / c["steps"], 2),
            "p50_e2e_ratio": round(s["e2e_s"]["p50"] / c["e2e_s"]["p50"], 2),
        }
    print(json.dumps(report, indent=2))
    # --record: the file chapter 14 quotes, under the same rules as the other benches' records
    # (device, model, software, date, commit, command).
    record = environment("serve-sim", device, {k: report[k] for k in ("workload", "engine", "warmup", "results",
                                                                      "continuous_vs_static") if k in report},
                         model_record(model, model.embed.weight.dtype, weights))
    record_if_asked(record, "python -m engine bench serve-sim", argv)
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m engine bench serve-sim`: the JSON goes to stdout, 0 is returned."""
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
