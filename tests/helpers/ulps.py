"""The match criterion for kernels that redo eager arithmetic in one launch (tests/kernels and tests/gpu).

float32: equal to rounding (a float32 sum in another order, an FMA, the GPU's exp or rsqrt differ in the
last bits). bf16/fp16: at most one unit in the last place apart, on at most 1% of the elements (one at
least, for tensors of fewer than 100): such a difference can move a value across a rounding boundary of
the narrow type, never further.
Where the eager arithmetic rounds twice (RMSNorm rounds the normalised row to bf16, then multiplies by
the weight and rounds again), a one-ulp flip in the middle is scaled by the weight before the second
rounding: such ops allow `max_ulps=2`.
"""

from __future__ import annotations

import torch

MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10}


def assert_matches(out: torch.Tensor, want: torch.Tensor, max_ulps: int = 1, atol: float = 0.0) -> None:
    """`atol`: for results that cancel (a*b - c*d), whose float32 error is set by the inputs' size, not
    the result's: a near-zero result may round to bf16 values several of its own ulps apart."""
    assert out.dtype == want.dtype and out.shape == want.shape
    assert not out.isnan().any(), "NaN in output (an unwritten or masked-out element?)"
    if want.dtype == torch.float32:
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
        return
    a, b = out.float(), want.float()
    one_ulp = torch.maximum(a.abs(), b.abs()) * 2.0 ** -MANTISSA_BITS[want.dtype] + torch.finfo(want.dtype).tiny
    assert ((a - b).abs() <= max_ulps * one_ulp + atol).all(), \
        f"off by more than {max_ulps} ulp: max |diff| {(a - b).abs().max()}"
    differ = int((a != b).sum())        # a handful of elements may round the other way: one at least
    assert differ <= max(1, 0.01 * a.numel()), f"{differ} of {a.numel()} elements differ"
