"""Triton SwiGLU activation, silu(gate) * up, in one launch (same contract as reference_small_ops.swiglu).

Eagerly it is two launches (silu, then the multiply) and an intermediate [tokens, intermediate] tensor
written and read back. Here each program takes a BLOCK-wide slice of one token's row:

    gate[t, j], up[t, j]  ──►  a = round(gate / (1 + exp(-gate)))  ──►  out[t, j] = round(a * up)

silu is rounded to the dtype before the multiply because F.silu returns the dtype. gate and up may be
the two halves of one fused gate_up projection (views with row stride 2 * intermediate).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024  # columns per program: a decode token's 1,536-wide row is two programs


@triton.jit
def _swiglu_kernel(gate_ptr, up_ptr, out_ptr, stride_gate, stride_up, stride_out, width, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < width
    g = tl.load(gate_ptr + row * stride_gate + cols, mask=mask, other=0.0)
    u = tl.load(up_ptr + row * stride_up + cols, mask=mask, other=0.0)
    g32 = g.to(tl.float32)
    act = (g32 / (1.0 + tl.exp(-g32))).to(g.dtype)  # torch's silu formula, rounded as F.silu rounds
    out = act.to(tl.float32) * u.to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    assert gate.shape == up.shape, (gate.shape, up.shape)
    width = gate.shape[-1]
    out = torch.empty(gate.shape, dtype=torch.promote_types(gate.dtype, up.dtype), device=gate.device)
    if gate.numel() == 0:
        return out
    g2, u2 = gate.reshape(-1, width), up.reshape(-1, width)
    g2 = g2 if g2.stride(-1) == 1 else g2.contiguous()
    u2 = u2 if u2.stride(-1) == 1 else u2.contiguous()
    out2 = out.view(-1, width)
    _swiglu_kernel[(g2.shape[0], triton.cdiv(width, BLOCK))](
        g2, u2, out2, g2.stride(0), u2.stride(0), out2.stride(0), width, BLOCK=BLOCK,
    )
    return out
