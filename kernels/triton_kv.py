"""Triton kernel that writes this step's K/V into the paged cache (same contract as reference.write_kv).

One program per token: it reads the token's slot, and if the slot is not -1 (padding), copies the
token's [num_kv_heads, head_dim] rows of K and V into k_cache/v_cache[slot // block_size, slot % block_size].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _write_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_co, stride_ch,  # cache strides: block, offset in block, kv head (head_dim is contiguous)
    block_size,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
    HEADS_P2: tl.constexpr, DIM_P2: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:  # padding: the token owns no slot
        return
    block = slot // block_size
    offset = slot % block_size
    heads = tl.arange(0, HEADS_P2)[:, None]
    dims = tl.arange(0, DIM_P2)[None, :]
    mask = (heads < NUM_KV_HEADS) & (dims < HEAD_DIM)
    k = tl.load(k_ptr + token * stride_kt + heads * stride_kh + dims, mask=mask)
    v = tl.load(v_ptr + token * stride_vt + heads * stride_vh + dims, mask=mask)
    dst = block * stride_cb + offset * stride_co + heads * stride_ch + dims
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    num_tokens, num_kv_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    # The kernel assumes unit stride along head_dim (true for every layout the engine makes).
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    assert k_cache.stride() == v_cache.stride() and k_cache.stride(-1) == 1
    _write_kv_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        k_cache.shape[1],
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
        HEADS_P2=triton.next_power_of_2(num_kv_heads), DIM_P2=triton.next_power_of_2(head_dim),
    )
