"""`python -m engine bench parallel`: the same requests on one process and split over several, as JSON.

For each size (one process = "single"; "tp=2"; "pp=2"; "tp=2xpp=2"; "tp=1" is the distributed path on one
rank, which on a GPU runs NCCL at world size 1) and each batch size, the same greedy workload runs through
an LLMEngine, after the same untimed warm-up (the same batch of other prompts, 4 tokens each: it compiles
kernels and touches every code path the timed run takes, so no configuration pays for its first call).
Reported: throughput, time to first token and inter-token latency from the request outputs; whether each
split's token ids equal the single run's (ids, not text: random weights decode to nothing); and per step,
separately for decode steps and the others, what the ranks sent and how long it took:

    all_reduce   tensor parallelism, per rank: calls, bytes, ms, and the share of the step. Inside a decode
                 step's CUDA graph an all-reduce cannot be timed on its own (no event between two kernels
                 of one graph): its calls and bytes are counted, and its time is the same collectives
                 replayed alone in a graph of their own (`probe`: Comm.probe_all_reduce), on every rank
    send_recv    pipeline hand-offs, all ranks: calls, bytes, ms blocked (a recv also waits for the
                 previous stage to finish computing), and their share of the step's rank-time

    python -m engine bench parallel                                      # SmolLM2 on the CPU: single, tp=3, pp=2, pp=3
    python -m engine bench parallel --device cuda --model llama-3-8b-random --sizes single tp=2 pp=2 --batches 1 64 --record
    python -m engine bench parallel --tiny --sizes single tp=3 pp=2      # the CI smoke run

On the CPU every rank is a process on the same cores: splitting cannot make a 2-core machine faster,
and the numbers say by how much it makes it slower (communication, and the bubble).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from functools import partial

import torch

from ..config import RANDOM_SHAPES, EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..model.llama import Llama
from ..sampling_params import SamplingParams

TINY = ModelConfig(num_layers=6, hidden_size=96, num_heads=6, num_kv_heads=3, head_dim=16, intermediate_size=160,
                   vocab_size=256, max_position_embeddings=512, name="tiny-3")
WARM_TOKENS = 4


def tiny_model() -> Llama:
    return Llama.random(TINY, seed=0)


def random_on_device(shape: ModelConfig, seed: int, dtype: torch.dtype) -> Llama:
    """Random weights drawn on this process's current GPU (a picklable build for the workers): the same
    seed gives the same numbers on every GPU of a kind, so every rank cuts its shard from the same model
    as the single run's, without a float32 copy of an 8B model on the CPU."""
    return Llama.random(shape, seed=seed, device=torch.device("cuda", torch.cuda.current_device()), dtype=dtype)


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


def generate(engine: LLMEngine, prompts: list[list[int]], max_tokens: int, tag: str):
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}{i}", p, params, arrival_s=start)
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - start, [engine.take_output(f"{tag}{i}") for i in range(len(prompts))]


def run(engine: LLMEngine, prompts: list[list[int]], warm: list[list[int]], max_tokens: int,
        probe=None) -> tuple[dict, list[list[int]]]:
    """Warm up on `warm` (untimed), then time `prompts`. probe(rows, calls) -> seconds per rank, or None."""
    generate(engine, warm, WARM_TOKENS, "warm")
    first_step = engine.trace.num_steps
    wall, outs = generate(engine, prompts, max_tokens, "r")
    steps = list(engine.trace.since(first_step))
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    itl = [x for o in outs for x in o.metrics.itl_s]
    result = {"wall_s": round(wall, 4), "output_tokens": n_out, "throughput_tokens_per_s": round(n_out / wall, 2),
              "ttft_ms_mean": round(1e3 * sum(o.metrics.ttft_s for o in outs) / len(outs), 3),
              "itl_ms_mean": round(1e3 * sum(itl) / max(1, len(itl)), 3), "steps": len(steps),
              "decode_steps_in_cuda_graphs": sum(1 for r in steps if r.cuda_graph_batch and _decode(r))}
    par = [r for r in steps if r.parallel is not None]
    if par:
        cfg = engine.model.config
        result["per_step"] = communication(par, cfg.hidden_size, engine.dtype.itemsize, 2 * cfg.num_layers, probe)
    return result, [o.outputs[0].token_ids for o in outs]


def _decode(rec) -> bool:
    return bool(rec.entries) and all(e.kind == "decode" for e in rec.entries)


def _rows(rec) -> int:
    """Rows each all-reduce carried: a replayed graph's padded batch, else the step's tokens."""
    return rec.cuda_graph_batch or rec.num_batched_tokens


def _group(records, hidden: int, nbytes: int, calls_per_pass: int, probe) -> dict:
    n = len(records)
    step_ms = 1e3 * sum(r.parallel.end_s - r.parallel.start_s for r in records) / n
    world = len(records[0].parallel.ranks)

    def mean(counts):
        return {"calls": round(sum(c.calls for c in counts) / n, 2), "bytes": round(sum(c.bytes for c in counts) / n, 1),
                "ms": round(1e3 * sum(c.seconds for c in counts) / n, 4),
                "in_graph": round(sum(c.in_graph for c in counts) / n, 2)}
    ar = mean([r.parallel.ranks[0].comm["all_reduce"] for r in records])
    if ar["in_graph"] and probe is not None:       # graph steps: the same collectives, timed alone
        size, _ = Counter(_rows(r) for r in records if r.cuda_graph_batch).most_common(1)[0]
        ar["probe_ms"] = round(1e3 * max(probe(size, calls_per_pass)), 4)
        ar["probe_rows"] = size
    ar_ms = ar["ms"] + ar.get("probe_ms", 0.0) * (ar["in_graph"] / calls_per_pass if calls_per_pass else 0)
    ar["share_of_step"] = round(ar_ms / step_ms, 4) if ar["calls"] else 0.0
    sends = [r.parallel.total("send") for r in records]
    recvs = [r.parallel.total("recv") for r in records]
    hand = {"send": mean(sends), "recv": mean(recvs)}
    blocked = hand["send"]["ms"] + hand["recv"]["ms"]
    hand["share_of_rank_time"] = round(blocked / (world * step_ms), 4) if hand["send"]["calls"] else 0.0
    arithmetic = all(c.bytes == c.calls * _rows(r) * hidden * nbytes
                     for r in records for c in (rank.comm["all_reduce"] for rank in r.parallel.ranks))
    return {"steps": n, "step_ms": round(step_ms, 4), "all_reduce_per_rank": ar, "send_recv_all_ranks": hand,
            "all_reduce_bytes_equal_rows_x_hidden_x_bytes": arithmetic,
            "bubble_mean": round(sum(r.parallel.bubble for r in records) / n, 4),
            "micro_batches_mean": round(sum(len(r.parallel.micro_batch_tokens) for r in records) / n, 2)}


def communication(records, hidden: int, nbytes: int, calls_per_pass: int, probe=None) -> dict:
    """Means per step, decode steps and the others apart; whether every all-reduce moved rows x hidden x bytes."""
    out = {"all": _group(records, hidden, nbytes, calls_per_pass, None)}
    for name, keep in (("decode", _decode), ("prefill_or_mixed", lambda r: not _decode(r))):
        group = [r for r in records if keep(r)]
        if group:
            out[name] = _group(group, hidden, nbytes, calls_per_pass, probe if name == "decode" else None)
    # the names the chapter's widget and the CPU test read (the whole run)
    whole = out["all"]
    out |= {"all_reduce_per_rank": whole["all_reduce_per_rank"],
            "stage_sends_all_ranks": whole["send_recv_all_ranks"]["send"],
            "all_reduce_bytes_equal_tokens_x_hidden_x_bytes": whole["all_reduce_bytes_equal_rows_x_hidden_x_bytes"],
            "bubble_mean": whole["bubble_mean"], "micro_batches_mean": whole["micro_batches_mean"]}
    return out


def _compare(tokens: list[list[int]], base: list[list[int]]) -> dict:
    """Greedy token ids against the single run: prompts equal, and where the first that differs diverges."""
    diverged = [(i, next((j for j, (a, b) in enumerate(zip(t, b0)) if a != b), min(len(t), len(b0))))
                for i, (t, b0) in enumerate(zip(tokens, base)) if t != b0]
    return {"same_tokens_as_single": not diverged, "prompts_equal": len(tokens) - len(diverged),
            "prompts": len(tokens), "first_divergence": [{"prompt": i, "token": j} for i, j in diverged[:4]]}


def _machine(device: torch.device) -> dict:
    """What the record needs to be trusted: GPU link topology, NCCL, versions."""
    info = {"python": sys.version.split()[0], "torch": torch.__version__}
    if device.type == "cuda":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["gpus"] = torch.cuda.device_count()
        info["NCCL_NVLS_ENABLE"] = "0"          # set by process_group.connect on every rank
        try:
            import triton
            info["triton"] = triton.__version__
        except ImportError:
            pass
        try:
            topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20).stdout
            info["link"] = re.sub(r"\x1b\[[0-9;]*m", "", topo).strip()      # without its terminal underlining
        except (OSError, subprocess.SubprocessError) as e:
            info["link"] = f"nvidia-smi topo -m failed: {e}"
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine bench parallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", default=["single", "tp=3", "pp=2", "pp=3"])
    ap.add_argument("--device", default="cpu", help="cpu | cuda (one GPU per rank)")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--model", default=None, choices=sorted(RANDOM_SHAPES), help="public shapes, random weights")
    ap.add_argument("--random-weights", action="store_true", help="SmolLM2's shapes, random values (no model file)")
    ap.add_argument("--tiny", action="store_true", help="a tiny random model (6 heads over 3 KV heads, 6 layers)")
    ap.add_argument("--prompts", type=int, default=None, help="one batch of this many prompts (= --batches N)")
    ap.add_argument("--batches", type=int, nargs="+", default=[4], help="batch sizes, each a workload of its own")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--micro-batches", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="CPU: torch threads in all (split among the ranks)")
    ap.add_argument("--record", nargs="?", const="parallel", default=None, metavar="NAME",
                    help="save as engine/bench/data/NAME.json (default parallel; recorded figures)")
    args = ap.parse_args(argv)
    from ..distributed import parallel_engine
    from ..loader.model_loader import resolve_device, resolve_dtype, whole_model
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    batches = [args.prompts] if args.prompts else args.batches
    shape = TINY if args.tiny else RANDOM_SHAPES[args.model] if args.model else ModelConfig()
    random_weights = args.tiny or args.model is not None or args.random_weights
    blocks = max(batches) * -(-(args.prompt_len + args.max_tokens) // 16) + 16
    ecfg = EngineConfig(model=args.model, device=args.device, dtype=args.dtype, random_weights=args.random_weights,
                        num_kv_blocks=blocks, max_num_batched_tokens=2048, max_num_seqs=max(64, max(batches)),
                        micro_batches=args.micro_batches)
    if args.tiny:
        build = tiny_model
    elif device.type == "cuda" and random_weights:
        build = partial(random_on_device, shape, ecfg.seed, dtype)
    else:
        build = partial(whole_model, ecfg)
    sizes = ["single"] + [s for s in args.sizes if s != "single"]
    cpu = device.type == "cpu"
    if cpu and args.threads:
        torch.set_num_threads(args.threads)
    work = {b: (workload(b, args.prompt_len, shape.vocab_size, seed=b), workload(b, args.prompt_len, shape.vocab_size,
                                                                                 seed=1000 + b)) for b in batches}
    report = {"device": torch.cuda.get_device_name(device) if not cpu else f"cpu ({torch.get_num_threads()} threads)",
              "dtype": str(dtype).removeprefix("torch."),
              "model": f"{shape.name} ({'random weights' if random_weights else 'trained weights'})",
              "shape": {k: getattr(shape, k) for k in ("num_layers", "hidden_size", "num_heads", "num_kv_heads",
                                                       "head_dim", "intermediate_size", "vocab_size")},
              "workload": {"batches": batches, "prompt_len": args.prompt_len, "max_tokens": args.max_tokens,
                           "greedy": True, "warm_up": f"the same batch of other prompts, {WARM_TOKENS} tokens, untimed"},
              "torch": torch.__version__, "sizes": []}
    base, threads = {}, torch.get_num_threads()

    def record() -> None:       # after every size: a run cut short still leaves what it measured
        if not args.record:
            return
        from .recorded import save_recorded
        command = "python -m engine bench parallel " + " ".join(argv if argv is not None else sys.argv[1:])
        model = {"name": shape.name, "weights": "random" if random_weights else "trained", "dtype": report["dtype"],
                 "shape": report["shape"]}
        path = save_recorded(args.record, report["device"], command.strip(), report, software=_machine(device),
                             date=datetime.date.today().isoformat(), commit=os.environ.get("ENGINE_COMMIT"), model=model)
        print(f"[bench parallel] recorded {path}", file=sys.stderr)
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
            torch.set_num_threads(threads)
            continue
        probe = engine.runner.probe_all_reduce if split and split[0] > 1 else None
        try:
            startup = time.perf_counter() - started
            for b in batches:
                prompts, warm = work[b]
                result, tokens = run(engine, prompts, warm, args.max_tokens, probe)
                entry = {"size": size, "batch": b, "tensor_parallel_size": split[0] if split else 1,
                         "pipeline_parallel_size": split[1] if split else 1,
                         "processes": split[0] * split[1] if split else 1,
                         "threads_per_process": per_rank if cpu else None, "startup_s": round(startup, 2), **result}
                if b not in base:
                    base[b] = (result, tokens)
                else:
                    ref, ref_tokens = base[b]
                    entry |= _compare(tokens, ref_tokens)
                    entry["vs_single"] = {k: round(result[k] / ref[k], 3) for k in
                                          ("throughput_tokens_per_s", "ttft_ms_mean", "itl_ms_mean") if ref[k]}
                report["sizes"].append(entry)
        finally:
            engine.close()
            del engine
            if not cpu:
                torch.cuda.empty_cache()
            torch.set_num_threads(threads)
        record()
    print(json.dumps(report, indent=1))
    return 0
