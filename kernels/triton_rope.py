"""Triton RoPE for queries and keys in one launch (same contract as reference_small_ops.rope).

Eagerly, rotating one tensor is ~10 launches (two casts, four multiplies, a subtract, an add, a cat,
a cast back), twice per layer. Here one program per token loads its cos/sin row once and rotates all
of its query heads and key heads:

    cos[t, :half], sin[t, :half]            one row per token (its position's angles), float32
    q[t, h, :] = [ x1 | x2 ]  (half each) ──► [ x1*cos - x2*sin | x2*cos + x1*sin ]  rounded once
    k[t, h, :]   same angles, num_kv_heads heads

q and k may be strided views (say, slices of one fused qkv projection): token and head strides are
arguments, only head_dim must have unit stride. The outputs are new contiguous tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(src_ptr, dst_ptr, stride_t, stride_h, token, cos, sin,
                  NUM_HEADS: tl.constexpr, HALF: tl.constexpr, HEADS_P2: tl.constexpr, HALF_P2: tl.constexpr):
    heads = tl.arange(0, HEADS_P2)[:, None]
    dims = tl.arange(0, HALF_P2)[None, :]
    mask = (heads < NUM_HEADS) & (dims < HALF)
    src = src_ptr + token * stride_t + heads * stride_h + dims
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dst = dst_ptr + token * (NUM_HEADS * 2 * HALF) + heads * (2 * HALF) + dims  # contiguous output
    tl.store(dst, (x1 * cos - x2 * sin).to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_cos, stride_sin,
    NUM_Q_HEADS: tl.constexpr, NUM_K_HEADS: tl.constexpr, HALF: tl.constexpr,
    Q_HEADS_P2: tl.constexpr, K_HEADS_P2: tl.constexpr, HALF_P2: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    dims = tl.arange(0, HALF_P2)
    cos = tl.load(cos_ptr + token * stride_cos + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(sin_ptr + token * stride_sin + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
    _rotate_heads(q_ptr, q_out_ptr, stride_qt, stride_qh, token, cos, sin, NUM_Q_HEADS, HALF, Q_HEADS_P2, HALF_P2)
    _rotate_heads(k_ptr, k_out_ptr, stride_kt, stride_kh, token, cos, sin, NUM_K_HEADS, HALF, K_HEADS_P2, HALF_P2)


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    num_tokens, num_q_heads, head_dim = q.shape
    num_k_heads = k.shape[1]
    assert head_dim % 2 == 0 and k.shape == (num_tokens, num_k_heads, head_dim)
    assert cos.shape == sin.shape == (num_tokens, head_dim // 2)
    q_out, k_out = torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if num_tokens == 0:
        return q_out, k_out
    q, k, cos, sin = _unit_last(q), _unit_last(k), _unit_last(cos), _unit_last(sin)
    half = head_dim // 2
    _rope_kernel[(num_tokens,)](
        q, k, q_out, k_out, cos, sin,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), cos.stride(0), sin.stride(0),
        NUM_Q_HEADS=num_q_heads, NUM_K_HEADS=num_k_heads, HALF=half,
        Q_HEADS_P2=triton.next_power_of_2(num_q_heads), K_HEADS_P2=triton.next_power_of_2(num_k_heads),
        HALF_P2=triton.next_power_of_2(half),
    )
    return q_out, k_out
