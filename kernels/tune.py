"""Sweep the Triton paged-attention launch knobs on a few shapes (a tool for choosing the defaults).

    python -m kernels.tune [--out FILE]

Writes one JSON line per (shape, config) to FILE (median GPU time in us), then prints, per shape,
SDPA's time and the five fastest configs. The defaults in triton_attention come from this output.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch
import torch.nn.functional as F

from .bench import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, _bench_ms, _contiguous_kv, warm_gpu
from .scenarios import make_paged_batch
from .triton_attention import paged_attention

# (batch, context, splits worth trying)
DECODE_SHAPES = [
    (1, 1024, [1, 2, 4]), (1, 16384, [16, 32, 64]),
    (8, 1024, [1, 2, 4]), (8, 4096, [4, 8, 16]), (8, 16384, [8, 16, 32, 64]),
    (64, 1024, [1, 2, 4]), (64, 4096, [1, 2, 4, 8]), (64, 16384, [2, 4, 8, 16]),
    (256, 1024, [1, 2]), (256, 4096, [1, 2]), (256, 16384, [1, 2]),
]


def _sdpa_us(b, batch: int, context: int) -> float:
    k = _contiguous_kv(b.k_cache, b.block_tables, context)
    v = _contiguous_kv(b.v_cache, b.block_tables, context)
    q = b.q.view(batch, 1, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
    return _bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, scale=b.scale, enable_gqa=True), 30) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kernels.tune")
    parser.add_argument("--out", default="tune.jsonl")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    warm_gpu()
    summary = []
    with open(args.out, "w") as log:
        def record(shape, cfg, fn):
            try:
                us = _bench_ms(fn, 30) * 1e3
            except Exception as exc:  # a config that does not compile (shared memory) is skipped
                us = float("inf")
                cfg = {**cfg, "error": type(exc).__name__}
            log.write(json.dumps({"shape": shape, **cfg, "us": round(us, 2)}) + "\n")
            return us, cfg

        for batch, context, split_options in DECODE_SHAPES:
            b = make_paged_batch([(context, 1)] * batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
                                 head_dim=HEAD_DIM, block_size=16, dtype=torch.bfloat16, device="cuda",
                                 spare_blocks=0, extra_table_cols=0)
            results = [record([batch, context], {"default": True}, lambda: paged_attention(*b.args()))]
            for splits, tile, warps, stages in itertools.product(split_options, (64, 128, 256), (4, 8), (2, 3)):
                cfg = dict(num_splits=splits, tile_n=tile, num_warps=warps, num_stages=stages)
                results.append(record([batch, context], cfg, lambda: paged_attention(*b.args(), **cfg)))
            results.sort(key=lambda r: r[0])
            summary.append({"shape": [batch, context], "sdpa_us": round(_sdpa_us(b, batch, context), 2),
                            "best": [[round(us, 2), cfg] for us, cfg in results[:5]],
                            "default_us": round(next(us for us, c in results if c.get("default")), 2)})
            print(json.dumps(summary[-1]), flush=True)
            del b
            torch.cuda.empty_cache()

        seqs = [(2048, 512)] * 4 + [(2048, 1)] * 60  # bench.py's mixed batch
        b = make_paged_batch(seqs, block_size=16, dtype=torch.bfloat16, device="cuda", spare_blocks=0)
        results = [record("mixed", {"default": True}, lambda: paged_attention(*b.args()))]
        for tile, block_m, warps, stages in itertools.product((32, 64, 128), (64, 128), (4, 8), (2, 3)):
            cfg = dict(tile_n=tile, block_m=block_m, num_warps=warps, num_stages=stages)
            results.append(record("mixed", cfg, lambda: paged_attention(*b.args(), **cfg)))
        results.sort(key=lambda r: r[0])
        print(json.dumps({"shape": "mixed", "best": [[round(us, 2), cfg] for us, cfg in results[:5]],
                          "default_us": round(next(us for us, c in results if c.get("default")), 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
