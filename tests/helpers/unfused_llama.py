"""The Llama forward pass as the chapters write it, with none of the small ops fused: the oracle the
model (engine/model/llama.py, wired to kernels.rms_norm / rope / swiglu) is checked against.

Same weights, same attention backend. Each block adds its residuals where the formula puts them,

    h = x + attention(norm1(x));       out = h + mlp(norm2(h))

and the small ops are plain PyTorch with the model's rounding points (float32 inside RMSNorm and
RoPE, silu rounded to the dtype), which kernels/reference_small_ops.py promises to copy exactly.
On CPU (the reference backend) the model must equal this bit for bit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.model.llama import Llama, rope_cos_sin


def _norm(x: torch.Tensor, norm) -> torch.Tensor:
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + norm.eps)
    return norm.weight * x32.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    cos, sin = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def forward_unfused(model: Llama, input_ids: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
    cfg = model.config
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta)
    x = model.embed(input_ids)
    for i, block in enumerate(model.layers):
        a, T = block.attention, x.shape[0]
        n = _norm(x, block.attention_norm)
        q = _rope(a.wq(n).view(T, a.num_heads, a.head_dim), cos, sin)
        k = _rope(a.wk(n).view(T, a.num_kv_heads, a.head_dim), cos, sin)
        v = a.wv(n).view(T, a.num_kv_heads, a.head_dim)
        h = x + a.wo(attn(i, q, k, v).reshape(T, -1))
        m = _norm(h, block.ffn_norm)
        x = h + block.mlp.w2(F.silu(block.mlp.w1(m)) * block.mlp.w3(m))
    return _norm(x, model.norm)
