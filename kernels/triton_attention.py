"""Triton paged attention: one kernel for prefill, chunked prefill and decode, plus a split-KV merge.

Work split. A program owns one *query block* of one sequence and KV_PER_PROGRAM kv heads (1, or all
of them). A query block is up to BLOCK_Q consecutive queries of the sequence; the GROUP query heads
that share a kv head are stacked with them into BLOCK_M rows (padded), so every K/V byte read from
memory serves all those heads at once (GQA):

    row r  ->  query  block_start + r // heads,  head  first_head + r % heads    (heads = GROUP * KV_PER_PROGRAM)

It walks the sequence's keys in tiles of TILE_N columns, finding each key's physical block through the
block table, and keeps an online softmax (running max m, denominator l, unnormalised output acc, all
float32). With all kv heads in one program a column is a (position, kv head) pair in the cache's own
order, so a tile reads each cache block as one contiguous run, and a row masks out other heads' columns.

Split-KV. A decode at small batch has too few programs to keep the GPU busy on a long context. Then
the key tiles are cut into NUM_SPLITS ranges, one program each; each writes its partial (m, l, acc)
and a second kernel merges them:

    out = sum_i acc_i * 2^(m_i - M) / sum_i l_i * 2^(m_i - M),   M = max_i m_i

Programs find their sequence without a host sync. Decode batches (as many queries as sequences):
program i owns sequence i. Otherwise sequence s's query blocks take program ids
[qsl[s] // BLOCK_Q + s, qsl[s+1] // BLOCK_Q + s + 1), a range always long enough for
ceil(q_len / BLOCK_Q) blocks; a program finds its sequence by binary search and exits if it is spare.
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from .online_softmax import online_softmax_step

from .launch_plan import plan_launch
from .triton_decode import launch_decode

# Scores go through exp2, so the softmax scale is folded together with log2(e).
_LOG2E = 1.4426950408889634


@triton.jit
def _find_seq(qsl_ptr, num_seqs, q_block, BLOCK_Q: tl.constexpr):
    """Largest s with qsl[s] // BLOCK_Q + s <= q_block (binary search over sequences)."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first = tl.load(qsl_ptr + mid) // BLOCK_Q + mid
        if first <= q_block:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _attend_query_block(
    q_ptr, k_cache_ptr, v_cache_ptr, table, out_ptr, part_acc_ptr, part_ml_ptr,
    scale_log2, num_heads, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_co, stride_ch,
    kv_head0, split, local_block, q_start, q_len, seq_len,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, KV_PER_PROGRAM: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Attention of one query block over its split of the keys, for KV_PER_PROGRAM kv heads.

    Rows are (query, head) pairs; columns are (key position, kv head) pairs, kv head fastest, which
    is the cache's own order inside a block, so a tile is one contiguous run per cache block. A row
    only sees the columns of its own kv head (and, causally, positions up to its own).
    """
    HEADS: tl.constexpr = GROUP * KV_PER_PROGRAM  # query heads this program serves
    first_pos = seq_len - q_len  # absolute position of the sequence's first query
    rows = tl.arange(0, BLOCK_M)
    q_idx = local_block * BLOCK_Q + rows // HEADS
    head = kv_head0 * GROUP + rows % HEADS
    row_ok = (rows < BLOCK_Q * HEADS) & (q_idx < q_len)
    q_pos = first_pos + q_idx
    dims = tl.arange(0, HEAD_DIM)
    token = q_start + q_idx
    q = tl.load(q_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
                mask=row_ok[:, None], other=0.0)

    # Causal: the block's last query sees positions [0, kv_end); later tiles are never read.
    kv_end = tl.minimum(first_pos + (local_block + 1) * BLOCK_Q, seq_len)
    num_cols = kv_end * KV_PER_PROGRAM
    num_tiles = tl.cdiv(num_cols, TILE_N)
    tiles_per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    tile_lo = split * tiles_per_split
    tile_hi = tl.minimum(tile_lo + tiles_per_split, num_tiles)

    # A finite start for m keeps exp2(m - m_new) defined while a row has seen no visible key yet.
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    cols = tl.arange(0, TILE_N)
    for tile in range(tile_lo, tile_hi):
        col = tile * TILE_N + cols
        k_pos = col // KV_PER_PROGRAM
        k_head = col % KV_PER_PROGRAM  # relative to kv_head0
        col_ok = col < num_cols
        block = tl.load(table + k_pos // BLOCK_SIZE, mask=col_ok, other=0).to(tl.int64)
        kv_off = block * stride_cb + (k_pos % BLOCK_SIZE) * stride_co + (kv_head0 + k_head) * stride_ch
        k = tl.load(k_cache_ptr + kv_off[:, None] + dims[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_cache_ptr + kv_off[:, None] + dims[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale_log2  # [BLOCK_M, TILE_N]
        visible = col_ok[None, :] & (k_pos[None, :] <= q_pos[:, None])
        if KV_PER_PROGRAM > 1:
            visible = visible & (k_head[None, :] == (rows % HEADS)[:, None] // GROUP)
        s = tl.where(visible, s, float("-inf"))
        m, l, acc = online_softmax_step(m, l, acc, s, v, DOT_PRECISION)

    if NUM_SPLITS == 1:
        out = acc / l[:, None]
        tl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
    else:
        part = (token.to(tl.int64) * num_heads + head) * NUM_SPLITS + split
        tl.store(part_acc_ptr + part[:, None] * HEAD_DIM + dims[None, :], acc, mask=row_ok[:, None])
        tl.store(part_ml_ptr + part * 2, m, mask=row_ok)
        tl.store(part_ml_ptr + part * 2 + 1, l, mask=row_ok)


@triton.jit
def _paged_attention_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, qsl_ptr,
    out_ptr, part_acc_ptr, part_ml_ptr,
    scale_log2, num_seqs, num_heads,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_cb, stride_co, stride_ch, stride_bt,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, KV_PER_PROGRAM: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    kv_head0 = tl.program_id(1) * KV_PER_PROGRAM
    split = tl.program_id(2)
    # Decode batches go to triton_decode; here each query block finds its sequence.
    q_block = tl.program_id(0)
    seq = _find_seq(qsl_ptr, num_seqs, q_block, BLOCK_Q)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    local_block = q_block - (q_start // BLOCK_Q + seq)
    if local_block * BLOCK_Q < q_len:  # else a spare id: the sequence has fewer query blocks
        _attend_query_block(
            q_ptr, k_cache_ptr, v_cache_ptr, table, out_ptr, part_acc_ptr, part_ml_ptr,
            scale_log2, num_heads, stride_qt, stride_qh, stride_ot, stride_oh, stride_cb, stride_co, stride_ch,
            kv_head0, split, local_block, q_start, q_len, seq_len,
            BLOCK_SIZE, GROUP, KV_PER_PROGRAM, HEAD_DIM, BLOCK_M, BLOCK_Q, TILE_N, NUM_SPLITS, DOT_PRECISION)


@triton.jit
def _merge_splits_kernel(
    part_acc_ptr, part_ml_ptr, out_ptr, num_heads, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    part = (token.to(tl.int64) * num_heads + head) * NUM_SPLITS + tl.arange(0, NUM_SPLITS)
    m = tl.load(part_ml_ptr + part * 2)
    l = tl.load(part_ml_ptr + part * 2 + 1)
    acc = tl.load(part_acc_ptr + part[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :])
    weight = tl.exp2(m - tl.max(m, 0))  # empty splits kept m = -1e30, so their weight is 0
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(l * weight, 0)
    tl.store(out_ptr + token * stride_ot + head * stride_oh + tl.arange(0, HEAD_DIM),
             out.to(out_ptr.dtype.element_ty))


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    if not torch.cuda.is_available():
        return 8  # the CPU interpreter: any small number exercises the split path
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    *,
    num_splits: int | None = None,
    kv_per_program: int | None = None,
    tile_n: int | None = None,
    block_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    heads_fastest: bool | None = None,
) -> torch.Tensor:
    """Same contract as reference.paged_attention; the keyword knobs exist for tests and tuning."""
    num_tokens, num_heads, head_dim = q.shape
    num_seqs = seq_lens.shape[0]
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    assert group * num_kv_heads == num_heads, "query heads must be a multiple of KV heads"
    assert head_dim >= 16 and head_dim & (head_dim - 1) == 0, "head_dim must be a power of two >= 16"
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    if q.stride(-1) != 1:
        q = q.contiguous()
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if num_tokens == 0 or num_seqs == 0:
        return out

    # As many queries as sequences: a decode batch (known from shapes alone, no device sync). The
    # kernel stays correct if that guess is wrong (one q_len 0, another 2): it loops over query blocks.
    plan = plan_launch(num_tokens, num_seqs, num_heads, num_kv_heads, block_tables.shape[1] * block_size,
                       _num_sms(q.device.index or 0))
    overrides = dict(num_splits=num_splits, kv_per_program=kv_per_program, tile_n=tile_n, block_m=block_m,
                     num_warps=num_warps, num_stages=num_stages, heads_fastest=heads_fastest)
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides:
        plan = dataclasses.replace(plan, **overrides)
    if kv_per_program is not None and block_m is None:  # keep every head of the program in one block
        plan = dataclasses.replace(plan, block_m=max(plan.block_m, triton.next_power_of_2(group * kv_per_program)))
    num_splits, kv_per_program = plan.num_splits, plan.kv_per_program
    assert num_kv_heads % kv_per_program == 0
    block_q = plan.block_m // (group * kv_per_program)
    assert block_q >= 1, "block_m must hold all heads of one query"

    if num_splits > 1:
        part_acc = torch.empty((num_tokens, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((num_tokens, num_heads, num_splits, 2), dtype=torch.float32, device=q.device)
    else:
        part_acc = part_ml = out  # unused: the kernel writes the output directly

    dot_precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if plan.decode:
        launch_decode(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, out, part_acc, part_ml,
                      scale * _LOG2E, plan, dot_precision)
    else:
        _paged_attention_kernel[(num_tokens // block_q + num_seqs, num_kv_heads // kv_per_program, num_splits)](
            q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
            out, part_acc, part_ml,
            scale * _LOG2E, num_seqs, num_heads,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
            BLOCK_SIZE=block_size, GROUP=group, KV_PER_PROGRAM=kv_per_program, HEAD_DIM=head_dim,
            BLOCK_M=plan.block_m, BLOCK_Q=block_q, TILE_N=plan.tile_n,
            NUM_SPLITS=num_splits, DOT_PRECISION=dot_precision,
            num_warps=plan.num_warps, num_stages=plan.num_stages,
        )
    if num_splits > 1:
        _merge_splits_kernel[(num_tokens, num_heads)](
            part_acc, part_ml, out, num_heads, out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, NUM_SPLITS=num_splits,
        )
    return out
