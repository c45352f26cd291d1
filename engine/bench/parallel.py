"""`python -m engine bench parallel`: the same requests on one process and split over several, as JSON.

For each size (one process = "single"; "tp=3"; "pp=2"; "tp=2xpp=2"; "tp=1" is the distributed path on one
rank, which on a GPU runs NCCL at world size 1) the same greedy workload runs through an LLMEngine:
throughput, time to first token and inter-token latency from the request outputs, and per step from the
trace the all-reduces, stage hand-offs and records each rank sent (calls, bytes, seconds) and the pipeline
bubble. Each split's numbers are also given against "single", and whether its tokens equal single's
(float32 on the CPU: they must; bf16 on a GPU adds partial sums in another order, so they may drift).

    python -m engine bench parallel                                      # SmolLM2 on the CPU: single, tp=3, pp=2, pp=3
    python -m engine bench parallel --device cuda --random-weights --sizes single tp=1 --record
    python -m engine bench parallel --tiny --sizes single tp=3 pp=2      # the CI smoke run

On the CPU every rank is a process on the same cores: splitting cannot make a 2-core machine faster,
and the numbers say by how much it makes it slower (communication, and the bubble).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch

from ..config import EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..model.llama import Llama
from ..sampling_params import SamplingParams

TINY = ModelConfig(num_layers=6, hidden_size=96, num_heads=6, num_kv_heads=3, head_dim=16, intermediate_size=160,
                   vocab_size=256, max_position_embeddings=512, name="tiny-3")


def tiny_model() -> Llama:
    return Llama.random(TINY, seed=0)


def parse_size(text: str) -> tuple[int, int] | None:
    """'single' -> None; 'tp=3' -> (3, 1); 'pp=2' -> (1, 2); 'tp=2xpp=2' -> (2, 2)."""
    if text == "single":
        return None
    tp = pp = 1
    for part in text.split("x"):
        key, _, value = part.partition("=")
        if key not in ("tp", "pp") or not value.isdigit():
            raise ValueError(f"not a size: {text!r} (use single, tp=N, pp=N or tp=NxPP=M)")
        tp, pp = (int(value), pp) if key == "tp" else (tp, int(value))
    return tp, pp


def workload(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


def run(engine: LLMEngine, prompts: list[list[int]], max_tokens: int) -> tuple[dict, list[list[int]]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    engine.add_request("warm-up", prompts[0][:8], SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    engine.take_output("warm-up")
    first_step = engine.trace.num_steps
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, params, arrival_s=start)
    while engine.has_unfinished():
        engine.step()
    wall = time.perf_counter() - start
    outs = [engine.take_output(f"r{i}") for i in range(len(prompts))]
    steps = [r for r in engine.trace.since(first_step)]
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    itl = [x for o in outs for x in o.metrics.itl_s]
    result = {"wall_s": round(wall, 4), "output_tokens": n_out, "throughput_tokens_per_s": round(n_out / wall, 2),
              "ttft_ms_mean": round(1e3 * sum(o.metrics.ttft_s for o in outs) / len(outs), 3),
              "itl_ms_mean": round(1e3 * sum(itl) / max(1, len(itl)), 3), "steps": len(steps)}
    par = [r for r in steps if r.parallel is not None]
    if par:
        result["per_step"] = communication(par, engine.model.config.hidden_size, engine.dtype.itemsize)
    return result, [o.outputs[0].token_ids for o in outs]


def communication(records, hidden: int, nbytes: int) -> dict:
    """Means per step, and whether every all-reduce moved batch tokens x hidden x bytes."""
    n = len(records)

    def mean(kind, total=False):
        counts = [(r.parallel.total(kind) if total else r.parallel.ranks[0].comm[kind]) for r in records]
        return {"calls": round(sum(c.calls for c in counts) / n, 2), "bytes": round(sum(c.bytes for c in counts) / n, 1),
                "ms": round(1e3 * sum(c.seconds for c in counts) / n, 4)}
    arithmetic = all(c.bytes == c.calls * r.num_batched_tokens * hidden * nbytes
                     for r in records for c in (rank.comm["all_reduce"] for rank in r.parallel.ranks))
    return {"all_reduce_per_rank": mean("all_reduce"), "stage_sends_all_ranks": mean("send", total=True),
            "records_rank0": mean("control"), "all_reduce_bytes_equal_tokens_x_hidden_x_bytes": arithmetic,
            "bubble_mean": round(sum(r.parallel.bubble for r in records) / n, 4),
            "micro_batches_mean": round(sum(len(r.parallel.micro_batch_tokens) for r in records) / n, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine bench parallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["single", "tp=3", "pp=2", "pp=3"])
    ap.add_argument("--device", default="cpu", help="cpu | cuda (one GPU per rank)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--random-weights", action="store_true", help="SmolLM2's shapes, random values (no model file)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (6 heads over 3 KV heads, 6 layers)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--micro-batches", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="CPU: torch threads in all (split among the ranks)")
    ap.add_argument("--record", action="store_true", help="save as engine/bench/data/parallel.json (recorded figures)")
    args = ap.parse_args(argv)
    from functools import partial

    from ..distributed import parallel_engine
    from ..loader.model_loader import resolve_device, resolve_dtype, whole_model
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    ecfg = EngineConfig(device=args.device, dtype=args.dtype, random_weights=args.random_weights, num_kv_blocks=256,
                        max_num_batched_tokens=512, micro_batches=args.micro_batches)
    build = tiny_model if args.tiny else partial(whole_model, ecfg)
    sizes = ["single"] + [s for s in args.sizes if s != "single"]
    vocab = (TINY if args.tiny else ModelConfig()).vocab_size
    prompts = workload(args.prompts, args.prompt_len, vocab)
    cpu = device.type == "cpu"
    if cpu and args.threads:
        torch.set_num_threads(args.threads)
    report = {"device": torch.cuda.get_device_name(device) if not cpu else f"cpu ({torch.get_num_threads()} threads)",
              "dtype": str(dtype).removeprefix("torch."), "model": "tiny-3 (random)" if args.tiny else
              ("SmolLM2-135M shapes, random weights" if args.random_weights else "SmolLM2-135M-Instruct"),
              "workload": {"prompts": args.prompts, "prompt_len": args.prompt_len, "max_tokens": args.max_tokens,
                           "greedy": True}, "torch": torch.__version__, "sizes": []}
    base, base_tokens, threads = None, None, torch.get_num_threads()
    for size in sizes:
        split = parse_size(size)
        print(f"[bench parallel] {size} ...", file=sys.stderr, flush=True)
        # on the CPU the ranks share the cores: each process gets its share of the threads, rank 0 too
        per_rank = max(1, threads // (split[0] * split[1])) if split else threads
        torch.set_num_threads(per_rank)
        started = time.perf_counter()
        try:
            if split is None:
                engine = LLMEngine(build().to(device=device, dtype=dtype).eval().requires_grad_(False), ecfg)
            else:
                cfg = EngineConfig(**{**{f: getattr(ecfg, f) for f in ecfg.__slots__},
                                      "tensor_parallel_size": split[0], "pipeline_parallel_size": split[1]})
                engine = parallel_engine(build(), build, cfg, device, dtype, threads=per_rank)
        except ValueError as e:                       # a split this model or machine cannot take
            report["sizes"].append({"size": size, "skipped": str(e)})
            continue
        try:
            startup = time.perf_counter() - started
            result, tokens = run(engine, prompts, args.max_tokens)
        finally:
            engine.close()
            torch.set_num_threads(threads)
        entry = {"size": size, "tensor_parallel_size": split[0] if split else 1,
                 "pipeline_parallel_size": split[1] if split else 1,
                 "processes": split[0] * split[1] if split else 1, "threads_per_process": per_rank if cpu else None,
                 "startup_s": round(startup, 2), **result}
        if base is None:
            base, base_tokens = result, tokens
        else:
            entry["same_tokens_as_single"] = tokens == base_tokens
            entry["vs_single"] = {k: round(result[k] / base[k], 3) for k in ("throughput_tokens_per_s", "ttft_ms_mean", "itl_ms_mean") if base[k]}
        report["sizes"].append(entry)
    print(json.dumps(report, indent=1))
    if args.record:
        from .recorded import save_recorded
        command = "python -m engine bench parallel " + " ".join(argv if argv is not None else sys.argv[1:])
        path = save_recorded("parallel", report["device"], command.strip(), report)
        print(f"[bench parallel] recorded {path}", file=sys.stderr)
    return 0
