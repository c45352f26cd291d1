"""Sweep the Triton paged-attention launch knobs on a few shapes (a tool for choosing the defaults).

    python -m kernels.tune [--out FILE]

Writes one JSON line per (shape, config) to FILE (GPU time in us, timing.gpu_time_us), then prints,
per shape, SDPA's time and the five fastest configs. The defaults in triton_attention come from this.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F

from .bench import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, _contiguous_kv
from .scenarios import make_paged_batch
from .timing import gpu_time_us, warm_gpu
from .triton_attention import paged_attention

# (batch, context, splits worth trying for one and for all kv heads per program)
DECODE_SHAPES = [
    (1, 1024, [1, 4]), (1, 16384, [32, 64]),
    (8, 4096, [4, 8, 16]), (8, 16384, [8, 16, 32]),
    (64, 1024, [1, 2]), (64, 4096, [1, 2, 4, 8]), (64, 16384, [1, 2, 4, 8]),
    (256, 4096, [1, 2]), (256, 16384, [1, 2]),
]


def _time(fn) -> float:
    return gpu_time_us(fn, reps=10, rounds=5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernels.tune")
    parser.add_argument("--out", default="tune.jsonl")
    parser.add_argument("--once", metavar="BATCH,CONTEXT",
                        help="only call the default launch a few times on this decode shape (for ncu)")
    args = parser.parse_args(argv)
    if args.once:
        batch, context = (int(x) for x in args.once.split(","))
        b = make_paged_batch([(context, 1)] * batch, block_size=16, dtype=torch.bfloat16, device="cuda",
                             spare_blocks=0, extra_table_cols=0)
        for _ in range(3):
            paged_attention(*b.args())
        torch.cuda.synchronize()
        return 0
    torch.manual_seed(0)
    warm_gpu()
    with open(args.out, "w") as log:
        def sweep(shape, b, configs):
            results = []
            for cfg in [{}] + configs:
                try:
                    us = _time(lambda: paged_attention(*b.args(), **cfg))
                except Exception as exc:  # a config that does not compile (shared memory) is skipped
                    us, cfg = float("inf"), {**cfg, "error": type(exc).__name__}
                log.write(json.dumps({"shape": shape, **cfg, "us": round(us, 2)}) + "\n")
                results.append((us, cfg))
            default_us = results[0][0]
            results.sort(key=lambda r: r[0])
            return {"shape": shape, "default_us": round(default_us, 2),
                    "best": [[round(us, 2), cfg] for us, cfg in results[:6]]}

        for batch, context, split_options in DECODE_SHAPES:
            b = make_paged_batch([(context, 1)] * batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
                                 head_dim=HEAD_DIM, block_size=16, dtype=torch.bfloat16, device="cuda",
                                 spare_blocks=0, extra_table_cols=0)
            configs = [dict(kv_per_program=kv, num_splits=sp, tile_n=t, num_warps=4, num_stages=st)
                       for kv, sp, t, st in itertools.product((1, 3), split_options, (64, 128, 256), (2, 3))]
            row = sweep([batch, context], b, configs)
            k = _contiguous_kv(b.k_cache, b.block_tables, context)
            v = _contiguous_kv(b.v_cache, b.block_tables, context)
            q = b.q.view(batch, 1, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
            row["sdpa_us"] = round(_time(lambda: F.scaled_dot_product_attention(
                q, k, v, scale=b.scale, enable_gqa=True)), 2)
            print(json.dumps(row), flush=True)
            del b, k, v
            torch.cuda.empty_cache()

        seqs = [(2048, 512)] * 4 + [(2048, 1)] * 60  # bench.py's mixed batch
        b = make_paged_batch(seqs, block_size=16, dtype=torch.bfloat16, device="cuda", spare_blocks=0)
        configs = [dict(tile_n=t, block_m=bm, num_warps=w, num_stages=st)
                   for t, bm, w, st in itertools.product((32, 64, 128), (64, 128), (4, 8), (2, 3))]
        print(json.dumps(sweep("mixed", b, configs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
