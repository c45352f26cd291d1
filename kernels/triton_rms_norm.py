"""Triton RMSNorm with the residual add fused in (same contract as reference_small_ops.rms_norm).

Eagerly, `h = x + residual; norm(h)` is 9 launches (add, cast, square, mean, +eps, rsqrt, multiply,
cast back, times weight), each reading and writing the whole [tokens, hidden] tensor. Here it is one
program per token row: the row is loaded once, summed with its residual, the sum stored (it is the
new residual stream), and its RMSNorm written.

    x[t, :], residual[t, :]  ──► s = round(x + residual) ──► new_residual[t, :]
                                  │ float32: s * rsqrt(mean(s^2) + eps), rounded to the dtype
                                  └─► * weight ──► normed[t, :]

The rounding points are the eager code's (see reference_small_ops), so only float32 summation order
and rsqrt's last bit can differ: rarely one unit in the last place of a bf16 result.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr,
    stride_x, stride_res, stride_out, stride_res_out,  # row strides; the hidden dim has unit stride
    hidden, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0)
        # Rounded to the stream's dtype before normalising, as the eager `x + residual` is.
        x = (x.to(tl.float32) + r.to(tl.float32)).to(res_out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_res_out + cols, x, mask=mask)
    x32 = x.to(tl.float32)
    mean_sq = tl.sum(x32 * x32, axis=0) / hidden  # masked columns loaded as 0 add nothing
    normed = (x32 * tl.math.rsqrt(mean_sq + eps)).to(x.dtype)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    out = normed.to(tl.float32) * w.to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """A [rows, hidden] view with unit stride along hidden (a copy only when there is no such view)."""
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    hidden = x.shape[-1]
    stream_dtype = x.dtype if residual is None else torch.promote_types(x.dtype, residual.dtype)
    out = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, stream_dtype), device=x.device)
    new_residual = x if residual is None else torch.empty(x.shape, dtype=stream_dtype, device=x.device)
    if x.numel() == 0:
        return out, new_residual
    x2, out2, weight = _rows(x), out.view(-1, hidden), weight.contiguous()
    res2 = x2 if residual is None else _rows(residual)
    res_out2 = x2 if residual is None else new_residual.view(-1, hidden)
    block = triton.next_power_of_2(hidden)
    _rms_norm_kernel[(x2.shape[0],)](
        x2, res2, weight, out2, res_out2,
        x2.stride(0), res2.stride(0), out2.stride(0), res_out2.stride(0),
        hidden, eps,
        HAS_RESIDUAL=residual is not None, BLOCK=block,
        num_warps=min(max(block // 256, 1), 8),
    )
    return out, new_residual
