"""Sweep the Triton paged-attention launch knobs on a few shapes (a tool for choosing the defaults).

    python -m kernels.tune

Prints one JSON line per (shape, config): median GPU time and achieved GB/s. The defaults in
triton_attention.paged_attention come from reading this output on an H100.
"""

from __future__ import annotations

import itertools
import json
import sys

import torch

from .bench import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, _bench_ms, copy_bandwidth_gbs
from .scenarios import make_paged_batch
from .triton_attention import paged_attention

DECODE_SHAPES = [(1, 16384), (8, 4096), (8, 16384), (64, 4096), (64, 16384), (256, 4096), (256, 16384)]


def main(argv: list[str] | None = None) -> int:
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth_gbs()
    print(json.dumps({"device": torch.cuda.get_device_name(), "copy_bandwidth_gbs": round(copy_gbs, 1)}))
    for batch, context in DECODE_SHAPES:
        b = make_paged_batch([(context, 1)] * batch, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
                             head_dim=HEAD_DIM, block_size=16, dtype=torch.bfloat16, device="cuda",
                             spare_blocks=0, extra_table_cols=0)
        nbytes = batch * context * NUM_KV_HEADS * HEAD_DIM * 2 * 2 + 2 * b.q.numel() * 2
        splits = [None, 1, 2, 4, 8, 16, 32, 64]
        configs = [dict(num_splits=s) for s in splits]
        configs += [dict(tile_n=t, num_warps=w, num_stages=st)
                    for t, w, st in itertools.product((32, 64, 128), (2, 4, 8), (2, 3, 4))]
        for cfg in configs:
            try:
                ms = _bench_ms(lambda: paged_attention(*b.args(), **cfg))
            except Exception as exc:  # a config that does not compile (shared memory) is just skipped
                print(json.dumps({"shape": [batch, context], **cfg, "error": type(exc).__name__}))
                continue
            gbs = nbytes / (ms * 1e-3) / 1e9
            print(json.dumps({"shape": [batch, context], **cfg, "us": round(ms * 1e3, 2),
                              "gbs": round(gbs, 1), "frac": round(gbs / copy_gbs, 3)}))
        del b
        torch.cuda.empty_cache()
    # Prefill-heavy: the mixed batch of bench.py, varying the prefill tile.
    seqs = [(2048, 512)] * 4 + [(2048, 1)] * 60
    b = make_paged_batch(seqs, block_size=16, dtype=torch.bfloat16, device="cuda", spare_blocks=0)
    for t, w, st in itertools.product((32, 64, 128), (4, 8), (2, 3)):
        cfg = dict(tile_n=t, num_warps=w, num_stages=st)
        try:
            ms = _bench_ms(lambda: paged_attention(*b.args(), **cfg))
        except Exception as exc:
            print(json.dumps({"shape": "mixed", **cfg, "error": type(exc).__name__}))
            continue
        print(json.dumps({"shape": "mixed", **cfg, "us": round(ms * 1e3, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
