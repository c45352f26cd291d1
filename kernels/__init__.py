"""Attention kernels for the paged KV cache: Triton on CUDA, PyTorch references everywhere else.

The engine calls `write_kv` and `paged_attention`; each picks its backend per call:
- Triton when the tensors are on CUDA and triton imports,
- the PyTorch reference otherwise (the CPU path),
- or whatever the environment variable KERNELS_BACKEND=reference|triton forces (tests use this).
`write_kv_reference`, `paged_attention_triton`, ... name one backend explicitly.
"""

from __future__ import annotations

import os

import torch

from .reference import paged_attention as paged_attention_reference
from .reference import write_kv as write_kv_reference

try:  # triton is Linux-only; a CPU install without it still gets the reference path
    from .triton_attention import paged_attention as paged_attention_triton
    from .triton_kv import write_kv as write_kv_triton
except ImportError:  # pragma: no cover - depends on the install
    paged_attention_triton = write_kv_triton = None

__all__ = [
    "backend_for",
    "paged_attention",
    "paged_attention_reference",
    "paged_attention_triton",
    "write_kv",
    "write_kv_reference",
    "write_kv_triton",
]


def backend_for(device: torch.device) -> str:
    """'triton' or 'reference': the backend a call on tensors of this device will use."""
    forced = os.environ.get("KERNELS_BACKEND", "").strip().lower()
    if forced in ("reference", "triton"):
        if forced == "triton" and paged_attention_triton is None:
            raise RuntimeError("KERNELS_BACKEND=triton but triton could not be imported")
        return forced
    if forced:
        raise ValueError(f"KERNELS_BACKEND must be 'reference' or 'triton', not {forced!r}")
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
