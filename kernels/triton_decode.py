"""Triton decode attention over the paged cache: one query per sequence, K/V read once, GQA-wide dots.

Why a kernel of its own. The general kernel (triton_attention) stacks query blocks and masks columns
by kv head and by causality; a decode needs neither, and every register that bookkeeping holds is
one fewer load in flight in a kernel that is memory-bound.

Work split: program (seq, kv-head group, split). A program serves KV_PER_PROGRAM kv heads and the
GROUP query heads of each. Its rows are those query heads (padded to ROWS >= 16 for the matrix
units); its columns are the KV_PER_PROGRAM * HEAD_DIM values a cache row holds for those kv heads,
which sit side by side in the cache, so a tile of TILE_N positions is one contiguous run per cache
block. The query is loaded *block-diagonally* into that width (row r keeps its values only in the
columns of its own kv head, zeros elsewhere), so one dot gives every row exactly its own head's
scores, no masking, and P @ V gives each row its own head's output in those same columns; the store
keeps only them.

Split-KV: the key tiles of a sequence are cut into num_splits ranges (a runtime argument, so the
sweep does not recompile per split count); each program writes partial (m, l, acc) and
triton_attention's merge kernel combines them. A batch that only looks like decode (one sequence
with 2 queries, another with 0) stays correct: a program loops over its sequence's queries.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .online_softmax import online_softmax_step


@triton.jit
def _decode_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, qsl_ptr,
    out_ptr, part_acc_ptr, part_ml_ptr,
    scale_log2, num_heads, num_splits, max_blocks,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_cb, stride_co, stride_ch, stride_bt,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, KV_PER_PROGRAM: tl.constexpr, HEAD_DIM: tl.constexpr,
    ROWS: tl.constexpr, WIDTH: tl.constexpr, TILE_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
    HEADS_FASTEST: tl.constexpr, SINGLE_TILE: tl.constexpr,
):
    if HEADS_FASTEST:  # a sequence's kv-head programs start together and read the same cache blocks
        seq = tl.program_id(1)
        kv_head0 = tl.program_id(0) * KV_PER_PROGRAM
    else:
        seq = tl.program_id(0)
        kv_head0 = tl.program_id(1) * KV_PER_PROGRAM
    split = tl.program_id(2)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt

    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, WIDTH)  # WIDTH = next power of two >= KV_PER_PROGRAM * HEAD_DIM
    col_head = cols // HEAD_DIM  # kv head of a column, relative to kv_head0
    dims = cols % HEAD_DIM
    col_ok = col_head < KV_PER_PROGRAM
    col_off = (kv_head0 + col_head) * stride_ch + dims  # within a cache row: fixed for the whole loop
    head = kv_head0 * GROUP + rows
    row_ok = rows < GROUP * KV_PER_PROGRAM
    own = row_ok[:, None] & ((rows // GROUP)[:, None] == col_head[None, :])  # block-diagonal mask
    positions = tl.arange(0, TILE_N)
    if SINGLE_TILE:
        # The whole block-table row fits one tile (short contexts, no split): fetch it now, beside
        # the sequence's lengths, instead of after them. That takes one memory round trip off the
        # chain lengths -> table -> K/V, which is most of a short decode's time.
        first_blocks = tl.load(table + positions // BLOCK_SIZE, mask=positions // BLOCK_SIZE < max_blocks,
                               other=0).to(tl.int64)

    for qi in range(0, q_len):
        token = q_start + qi
        q = tl.load(q_ptr + token * stride_qt + head[:, None] * stride_qh + dims[None, :], mask=own, other=0.0)
        kv_end = seq_len - q_len + qi + 1  # causal: this query sees positions [0, kv_end)
        num_tiles = tl.cdiv(kv_end, TILE_N)
        per_split = tl.cdiv(num_tiles, num_splits)
        tile_lo = split * per_split
        tile_hi = tl.minimum(tile_lo + per_split, num_tiles)

        m = tl.full([ROWS], -1.0e30, tl.float32)  # finite, so an empty split gives weight 0, not NaN
        l = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, WIDTH], tl.float32)
        for tile in range(tile_lo, tile_hi):
            pos = tile * TILE_N + positions
            pos_ok = pos < kv_end
            if SINGLE_TILE:  # tile is 0; entries past the sequence are masked by pos_ok below
                block = first_blocks
            else:
                block = tl.load(table + pos // BLOCK_SIZE, mask=pos_ok, other=0).to(tl.int64)
            row_off = block * stride_cb + (pos % BLOCK_SIZE) * stride_co
            kv_mask = pos_ok[:, None] & col_ok[None, :]
            k = tl.load(k_cache_ptr + row_off[:, None] + col_off[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_cache_ptr + row_off[:, None] + col_off[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [ROWS, TILE_N]
            s = tl.where(pos_ok[None, :], s, float("-inf"))
            m, l, acc = online_softmax_step(m, l, acc, s, v, DOT_PRECISION)

        if num_splits == 1:
            out = acc / l[:, None]
            tl.store(out_ptr + token * stride_ot + head[:, None] * stride_oh + dims[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=own)
        else:
            part = (token.to(tl.int64) * num_heads + head) * num_splits + split
            tl.store(part_acc_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc, mask=own)
            tl.store(part_ml_ptr + part * 2, m, mask=row_ok)
            tl.store(part_ml_ptr + part * 2 + 1, l, mask=row_ok)


def launch_decode(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, out, part_acc, part_ml,
                  scale_log2: float, plan, dot_precision: str) -> None:
    """Launch _decode_kernel for a decode plan; partials go to part_acc/part_ml when plan.num_splits > 1."""
    num_seqs = seq_lens.shape[0]
    _, block_size, num_kv_heads, head_dim = k_cache.shape
    num_heads = q.shape[1]
    group = num_heads // num_kv_heads
    kvp = plan.kv_per_program
    rows = max(16, triton.next_power_of_2(group * kvp))
    width = triton.next_power_of_2(kvp * head_dim)
    # K and V tiles of at most 16 KiB each: the pipeline keeps num_stages - 1 of each in shared memory,
    # and a wider row (all kv heads, or float32) would otherwise run out of it (232 KiB on an H200).
    tile_n = max(16, min(plan.tile_n, (16 << 10) // (width * q.element_size())))
    grid = (num_kv_heads // kvp, num_seqs) if plan.heads_fastest else (num_seqs, num_kv_heads // kvp)
    _decode_kernel[(*grid, plan.num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
        out, part_acc, part_ml,
        scale_log2, num_heads, plan.num_splits, block_tables.shape[1],
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        BLOCK_SIZE=block_size, GROUP=group, KV_PER_PROGRAM=kvp, HEAD_DIM=head_dim,
        ROWS=rows, WIDTH=width, TILE_N=tile_n,
        DOT_PRECISION=dot_precision, HEADS_FASTEST=plan.heads_fastest,
        SINGLE_TILE=plan.num_splits == 1 and block_tables.shape[1] * block_size <= tile_n,
        num_warps=plan.num_warps, num_stages=plan.num_stages,
    )
