"""Benchmark the Triton paged-attention kernel against the memory-bandwidth limit and against SDPA.

    python -m kernels.bench [--batches 1,8,64,256] [--contexts 128,1024,4096,16384] [--block-size 16]

Prints one JSON object. Decode reads every K/V byte of the batch once and does little arithmetic, so
its floor is bytes / bandwidth; the bandwidth is measured in the same run as a large device-to-device
copy (bytes read + bytes written). The peer is torch's scaled_dot_product_attention on contiguous
[batch, kv_heads, context, head_dim] K/V with enable_gqa=True, best over its fused backends.
time_us is GPU time with L2 cleared before each call (see timing.py); eager_call_us adds what a
Python caller pays per call, launch overhead included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import torch
import torch.nn.functional as F

from .scenarios import make_paged_batch
from .timing import copy_bandwidth_gbs, eager_call_us, gpu_time_us, warm_gpu
from ..launch_plan import plan_launch
from ..triton_attention import paged_attention

# SmolLM2-135M attention shapes.
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM = 9, 3, 64


def _contiguous_kv(cache: torch.Tensor, block_tables: torch.Tensor, context: int) -> torch.Tensor:
    """[batch, kv_heads, context, head_dim]: the layout a user without a paged cache would hold."""
    num_blocks = -(-context // cache.shape[1])
    gathered = cache[block_tables[:, :num_blocks].long()]  # [batch, blocks, block_size, kv_heads, dim]
    batch = gathered.shape[0]
    return gathered.reshape(batch, -1, NUM_KV_HEADS, HEAD_DIM)[:, :context].transpose(1, 2).contiguous()


def _best_sdpa(fn) -> tuple[float, str]:
    """GPU time of fn under each fused SDPA backend that accepts it; the fastest (us, name)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fn()  # the default choice must work; the loop below only looks for a faster backend
    best = (float("inf"), "none")
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                fn()  # raises if this backend cannot run these inputs
                us = gpu_time_us(fn)
        except RuntimeError:
            continue
        best = min(best, (us, backend.name.lower()))
    return best


def _row(name: str, batch, groups: list[tuple[int, int, int]], block_size: int, copy_gbs: float) -> dict:
    """groups: (num_seqs, seq_len, q_len); each group runs as one SDPA call, all of them as one Triton call."""
    dtype = torch.bfloat16
    seqs = [(seq_len, q_len) for n, seq_len, q_len in groups for _ in range(n)]
    b = make_paged_batch(seqs, num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
                         block_size=block_size, dtype=dtype, device="cuda", spare_blocks=0, extra_table_cols=0)
    out = paged_attention(*b.args())

    # The peer: per group, contiguous K/V and an SDPA call (bottom-right causal for prefill chunks).
    from torch.nn.attention.bias import causal_lower_right

    calls, first_seq, first_tok, err = [], 0, 0, 0.0
    for n, seq_len, q_len in groups:
        tables = b.block_tables[first_seq:first_seq + n]
        k = _contiguous_kv(b.k_cache, tables, seq_len)
        v = _contiguous_kv(b.v_cache, tables, seq_len)
        q = b.q[first_tok:first_tok + n * q_len].view(n, q_len, NUM_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
        mask = causal_lower_right(q_len, seq_len) if q_len > 1 else None
        calls.append((q, k, v, mask))
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=b.scale, enable_gqa=True)
        mine = out[first_tok:first_tok + n * q_len].view(n, q_len, NUM_HEADS, HEAD_DIM).transpose(1, 2)
        err = max(err, ((mine.float() - ref.float()).norm() / ref.float().norm()).item())
        first_seq, first_tok = first_seq + n, first_tok + n * q_len

    def sdpa_all():
        for q, k, v, mask in calls:
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=b.scale, enable_gqa=True)

    us = gpu_time_us(lambda: paged_attention(*b.args()))
    sdpa_us, sdpa_backend = _best_sdpa(sdpa_all)

    elem = torch.finfo(dtype).bits // 8
    kv_bytes = sum(n * seq_len for n, seq_len, _ in groups) * NUM_KV_HEADS * HEAD_DIM * elem * 2
    qo_bytes = 2 * b.q.numel() * elem
    achieved = (kv_bytes + qo_bytes) / (us * 1e-6) / 1e9
    plan = plan_launch(b.q.shape[0], len(seqs), NUM_HEADS, NUM_KV_HEADS, b.block_tables.shape[1] * block_size,
                       torch.cuda.get_device_properties(0).multi_processor_count)
    return {
        "name": name, "batch": batch, "groups": [list(g) for g in groups],
        "plan": dataclasses.asdict(plan),
        "time_us": round(us, 2), "bytes": kv_bytes + qo_bytes, "achieved_gbs": round(achieved, 1),
        "fraction_of_copy_bw": round(achieved / copy_gbs, 3),
        "sdpa_time_us": round(sdpa_us, 2), "sdpa_backend": sdpa_backend,
        "speedup_vs_sdpa": round(sdpa_us / us, 3), "rel_err_vs_sdpa": float(f"{err:.2e}"),
        "eager_call_us": round(eager_call_us(lambda: paged_attention(*b.args())), 1),
        "sdpa_eager_call_us": round(eager_call_us(sdpa_all), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="1,8,64,256")
    parser.add_argument("--contexts", default="128,1024,4096,16384")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--no-mixed", action="store_true", help="skip the mixed prefill+decode batch")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(json.dumps({"error": "needs a CUDA GPU: the benchmark times the Triton kernels"}))
        return 1

    torch.manual_seed(0)
    warm_gpu()
    copy_gbs = copy_bandwidth_gbs()
    rows = []
    for batch in (int(x) for x in args.batches.split(",")):
        for context in (int(x) for x in args.contexts.split(",")):
            rows.append(_row(f"decode b={batch} ctx={context}", batch, [(batch, context, 1)],
                             args.block_size, copy_gbs))
            torch.cuda.empty_cache()
    if not args.no_mixed:
        # A chunked-prefill step: 4 prompt chunks of 512 tokens mid-way through 2048-token prompts,
        # batched with 60 decodes at context 2048.
        rows.append(_row("mixed 4x512-token chunks + 60 decodes, ctx=2048", 64,
                         [(4, 2048, 512), (60, 2048, 1)], args.block_size, copy_gbs))
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "dtype": "bfloat16", "num_heads": NUM_HEADS, "num_kv_heads": NUM_KV_HEADS, "head_dim": HEAD_DIM,
        "block_size": args.block_size,
        "copy_bandwidth_gbs": round(copy_gbs, 1),
        "timing": ("time_us: median GPU time of one call, L2 cleared before it (CUDA graph of flush+call "
                   "minus graph of flush); eager_call_us: wall time per back-to-back Python call, warm L2"),
        "rows": rows,
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
