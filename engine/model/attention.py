"""PagedAttention: the AttentionBackend the engine hands to the model for one step.

The model calls it once per layer with this step's q, k, v (every scheduled sequence's new tokens,
concatenated). It does two things, both through the kernels in `kernels/`:

    write_kv:         k, v[t]  ──slot_mapping[t]──►  k_cache, v_cache   (each new token into its slot)
    paged_attention:  q[t] attends over its own sequence's K/V, read through its block table

so a sequence's K/V never has to be contiguous, and prefill chunks and decodes share one call.
The runner builds one PagedAttention for its KV cache and binds each step's metadata to it. The
cache is anything with `layer(i)` (the worker's KVCache, a rank's shard of it): the model's side
of attention does not own the memory, it only reads and writes the slots it is told.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import torch

from kernels import paged_attention, write_kv


class PagedKV(Protocol):
    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_cache, v_cache) of layer i, each [num_blocks, block_size, num_kv_heads, head_dim]."""


@dataclass(slots=True)
class AttentionMetadata:
    """Where this step's tokens go and what they read. S sequences, T tokens in all.

    slot_mapping     [T]            cache slot of each new token (block_id * block_size + offset)
    block_tables     [S, max_blocks] each sequence's physical blocks, padded with 0 (never read)
    seq_lens         [S]            tokens with K/V after this step, the new ones included
    query_start_loc  [S + 1]        sequence s owns q rows query_start_loc[s] : query_start_loc[s + 1]
    """
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor


class PagedAttention:
    def __init__(self, kv_cache: PagedKV, head_dim: int):
        self.kv_cache = kv_cache
        self.scale = 1.0 / math.sqrt(head_dim)
        self.meta: AttentionMetadata | None = None

    def bind(self, meta: AttentionMetadata) -> "PagedAttention":
        """This step's metadata; every layer's call until the next bind reads it."""
        self.meta = meta
        return self

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_cache, v_cache = self.kv_cache.layer(layer)
        m = self.meta
        write_kv(k, v, k_cache, v_cache, m.slot_mapping)
        return paged_attention(q, k_cache, v_cache, m.block_tables, m.seq_lens, m.query_start_loc, self.scale)
