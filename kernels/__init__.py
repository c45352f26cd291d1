"""The engine's kernels: Triton on CUDA, PyTorch references everywhere else.

Paged KV cache: `write_kv`, `paged_attention`. Small per-token ops of a Llama block, each one launch
instead of several: `rms_norm` (with the residual add), `rope` (queries and keys), `swiglu`.
Each call picks its backend:
- Triton when the tensors are on CUDA and triton imports,
- the PyTorch reference otherwise (the CPU path),
- or whatever the environment variable KERNELS_BACKEND=reference|triton forces (read once, at
  import: the engine calls these twice per layer per step; `force_backend` changes it later).
`write_kv_reference`, `paged_attention_triton`, `rms_norm_triton`, ... name one backend explicitly.
"""

from __future__ import annotations

import os

import torch

from .reference import paged_attention as paged_attention_reference
from .reference import write_kv as write_kv_reference
from .reference_small_ops import rms_norm as rms_norm_reference
from .reference_small_ops import rope as rope_reference
from .reference_small_ops import swiglu as swiglu_reference

try:  # triton is Linux-only; a CPU install without it still gets the reference path
    from .triton_attention import paged_attention as paged_attention_triton
    from .triton_kv import write_kv as write_kv_triton
    from .triton_rms_norm import rms_norm as rms_norm_triton
    from .triton_rope import rope as rope_triton
    from .triton_swiglu import swiglu as swiglu_triton
except ImportError:  # pragma: no cover - depends on the install
    paged_attention_triton = write_kv_triton = rms_norm_triton = rope_triton = swiglu_triton = None

__all__ = [
    "backend_for",
    "force_backend",
    "paged_attention",
    "paged_attention_reference",
    "paged_attention_triton",
    "rms_norm",
    "rms_norm_reference",
    "rms_norm_triton",
    "rope",
    "rope_reference",
    "rope_triton",
    "swiglu",
    "swiglu_reference",
    "swiglu_triton",
    "write_kv",
    "write_kv_reference",
    "write_kv_triton",
]


def force_backend(name: str | None) -> None:
    """Force 'reference' or 'triton' for every call from now on; None (or '') goes back to by-device."""
    global _forced
    name = (name or "").strip().lower() or None
    if name not in (None, "reference", "triton"):
        raise ValueError(f"KERNELS_BACKEND must be 'reference' or 'triton', not {name!r}")
    if name == "triton" and paged_attention_triton is None:
        raise RuntimeError("KERNELS_BACKEND=triton but triton could not be imported")
    _forced = name


_forced: str | None = None
force_backend(os.environ.get("KERNELS_BACKEND"))


def backend_for(device: torch.device) -> str:
    """'triton' or 'reference': the backend a call on tensors of this device will use."""
    if _forced is not None:
        return _forced
    return "triton" if device.type == "cuda" and paged_attention_triton is not None else "reference"


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """Scatter new tokens' K/V into their cache slots (slot -1 = skip). See reference.write_kv."""
    impl = write_kv_triton if backend_for(k.device) == "triton" else write_kv_reference
    impl(k, v, k_cache, v_cache, slot_mapping)


def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale: float) -> torch.Tensor:
    """Varlen causal attention over the paged cache, GQA aware. See reference.paged_attention."""
    if backend_for(q.device) == "triton":
        return paged_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale)
    return paged_attention_reference(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale)


def rms_norm(x, weight, eps: float, residual=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, new_residual): residual + x, then RMSNorm of it. See reference_small_ops.rms_norm."""
    impl = rms_norm_triton if backend_for(x.device) == "triton" else rms_norm_reference
    return impl(x, weight, eps, residual)


def rope(q, k, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys rotated by their tokens' angles, one launch. See reference_small_ops.rope."""
    impl = rope_triton if backend_for(q.device) == "triton" else rope_reference
    return impl(q, k, cos, sin)


def swiglu(gate, up) -> torch.Tensor:
    """silu(gate) * up. See reference_small_ops.swiglu."""
    impl = swiglu_triton if backend_for(gate.device) == "triton" else swiglu_reference
    return impl(gate, up)
