"""PyTorch references for the small per-token ops of a Llama block: RMSNorm (+ residual add), RoPE, SwiGLU.

Each is, operation for operation, what engine/model/llama.py computes, so swapping the model's code
for these changes no number on the CPU (tests/kernels/test_small_ops.py checks it bit for bit). They are
also the oracles for the fused Triton kernels beside them (triton_rms_norm.py, triton_rope.py,
triton_swiglu.py), which do the same arithmetic in one launch instead of 2 to 10 eager ones each.

Where rounding happens matters for "greedy outputs do not change", so it is spelled out:
- the residual sum is rounded to the activations' dtype (as `x + residual` in bf16 is),
- RMSNorm's mean of squares and scaling run in float32, the normalised vector is rounded to the input
  dtype, *then* multiplied by the weight (Hugging Face's LlamaRMSNorm does the same),
- RoPE rotates in float32 and rounds once at the end,
- SwiGLU rounds silu(gate) to the dtype before multiplying by up (F.silu returns the dtype).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, new_residual) for x: [tokens, hidden], weight: [hidden].

    With a residual: new_residual = residual + x (the block's skip connection), normed = RMSNorm of it.
    Without one there is nothing to add: new_residual is x itself (no copy) and normed = RMSNorm(x).
    That lets a model thread the residual stream through every norm with one call shape:

        normed, residual = rms_norm(embeddings, w, eps)            # first norm: the stream starts here
        normed, residual = rms_norm(attn_out, w, eps, residual)    # every later norm adds, then normalises
    """
    if residual is not None:
        x = x + residual
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype), x


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary position embedding of queries and keys, half-rotation ("neox") layout. Returns new tensors.

        q: [tokens, num_heads, head_dim]   k: [tokens, num_kv_heads, head_dim]   (last dim unit stride)
        cos, sin: [tokens, head_dim / 2]   float32, the angle of pair i at each token's position

    Pair i of a head is (x[i], x[i + head_dim/2]); it turns by its token's angle i:
        out[i]          = x[i] * cos - x[i + half] * sin
        out[i + half]   = x[i + half] * cos + x[i] * sin
    """
    return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The MLP's activation: silu(gate) * up, both [tokens, intermediate], out [tokens, intermediate].

    Two inputs rather than one [tokens, 2 * intermediate] tensor: the model today has separate gate and
    up projections, and if they are fused into one matmul its output's two halves are passed as views
    (gate_up[:, :n], gate_up[:, n:]); the kernel reads them through their row stride, no copy.
    """
    return F.silu(gate) * up
