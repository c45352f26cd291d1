"""Sweep the decode kernel's launch knobs on the benchmark's shapes (a tool for choosing launch_plan).

    python -m kernels.bench.tune [--out FILE] [--budget-s SECONDS] [--workers N]

First compiles every kernel variant in N worker processes (Triton's on-disk cache then serves the
sweep; compiling 100+ variants one after another would take minutes), then times, per decode shape,
every (kv heads per program, tile, warps, stages, splits) config with timing.gpu_time_us next to
SDPA's best backend. Writes one JSON line per timing to FILE and prints per shape the fastest configs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import sys
import time

import torch

from .scenarios import make_paged_batch
from .timing import gpu_time_us, warm_gpu
from ..triton_attention import paged_attention

BATCHES, CONTEXTS = (1, 8, 64, 256), (128, 1024, 4096, 16384)
# (kv heads per program, tile positions, warps, stages): the leaders of wider sweeps (H200, NOTES.md).
CONFIGS = ((1, 64, 2, 2), (1, 64, 2, 4), (1, 128, 4, 4),
           (3, 32, 2, 2), (3, 32, 4, 2))


def variants() -> list[dict]:
    # heads_fastest only orders the one-kv-head kernel's grid
    return [dict(kv_per_program=kv, tile_n=t, num_warps=w, num_stages=s, heads_fastest=kv == 1)
            for kv, t, w, s in CONFIGS]


def splits_for(batch: int, context: int, kv: int, sms: int) -> list[int]:
    """Split counts up to ~12 programs per SM, never under 64 keys per split."""
    programs = batch * 3 // kv
    out = [1]
    s = 2
    while s <= 64 and context // s >= 64 and programs * s <= 12 * sms:
        out.append(s)
        s *= 2
    return out


def _compile_worker(args) -> int:
    index, count = args
    done = 0
    for cfg in variants()[index::count]:
        # Triton specialises integers on == 1 and on divisibility by 16 (splits, block-table width):
        # cover each combination the benchmark shapes meet.
        for context, splits in ((100, 1), (100, 2), (1024, 1), (1024, 2), (1024, 16), (2000, 16)):
            b = make_paged_batch([(context, 1)] * 2, block_size=16, dtype=torch.bfloat16, device="cuda",
                                 spare_blocks=0, extra_table_cols=0)
            try:
                paged_attention(*b.args(), num_splits=splits, **cfg)
                done += 1
            except Exception:  # a variant that does not compile is reported by the sweep
                pass
    torch.cuda.synchronize()
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernels.bench.tune")
    parser.add_argument("--out", default="tune.jsonl")
    parser.add_argument("--budget-s", type=float, default=240.0, help="stop timing after this long")
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--shapes", default="", help="BATCHxCONTEXT,... (default: the benchmark's 16)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.workers > 0:
        with mp.get_context("spawn").Pool(args.workers) as pool:
            compiled = sum(pool.map(_compile_worker, [(i, args.workers) for i in range(args.workers)]))
        print(json.dumps({"precompiled": compiled, "s": round(time.perf_counter() - start, 1)}), flush=True)
    import torch.nn.functional as F

    from .attention import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, _contiguous_kv

    torch.manual_seed(0)
    warm_gpu()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    with open(args.out, "w") as log:
        shapes = ([tuple(int(x) for x in sh.split("x")) for sh in args.shapes.split(",")] if args.shapes
                  else list(itertools.product(BATCHES, CONTEXTS)))
        for batch, context in shapes:
            if time.perf_counter() - start > args.budget_s:
                break
            b = make_paged_batch([(context, 1)] * batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
                                 head_dim=HEAD_DIM, block_size=16, dtype=torch.bfloat16, device="cuda",
                                 spare_blocks=0, extra_table_cols=0)
            try:
                results = [(gpu_time_us(lambda: paged_attention(*b.args()), reps=10, rounds=5), {"default": True})]
            except Exception as exc:
                results = [(float("inf"), {"default": True, "error": type(exc).__name__})]
            for cfg in variants():
                for sp in splits_for(batch, context, cfg["kv_per_program"], sms):
                    if context < cfg["tile_n"] * sp // 2:
                        continue
                    c = {**cfg, "num_splits": sp}
                    try:
                        us = gpu_time_us(lambda: paged_attention(*b.args(), **c), reps=10, rounds=5)
                    except Exception as exc:
                        us, c = float("inf"), {**c, "error": type(exc).__name__}
                    log.write(json.dumps({"shape": [batch, context], **c, "us": round(us, 2)}) + "\n")
                    results.append((us, c))
            k = _contiguous_kv(b.k_cache, b.block_tables, context)
            v = _contiguous_kv(b.v_cache, b.block_tables, context)
            q = b.q.view(batch, 1, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
            sdpa = gpu_time_us(lambda: F.scaled_dot_product_attention(q, k, v, scale=b.scale, enable_gqa=True),
                               reps=10, rounds=5)
            default_us = results[0][0]
            results.sort(key=lambda r: r[0])
            print(json.dumps({"shape": [batch, context], "sdpa_us": round(sdpa, 2), "default_us": round(default_us, 2),
                              "best": [[round(us, 2), c] for us, c in results[:5]]}), flush=True)
            del b, k, v, q
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
