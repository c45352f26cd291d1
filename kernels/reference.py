"""PyTorch references for the paged KV cache: the readable version of each Triton kernel.

These run anywhere (the engine uses them on CPU) and are the oracles the Triton kernels are tested
against. They favour clarity over speed: one sequence at a time, softmax in float32.

Cache layout, per layer (one tensor for K, one for V):

    k_cache[num_blocks, block_size, num_kv_heads, head_dim]

    block_tables[s] = [7, 2, 9, ...]      logical block i of sequence s lives in physical block block_tables[s, i]
    token t of sequence s  ->  k_cache[block_tables[s, t // block_size], t % block_size]
    slot = physical_block * block_size + offset   (what write_kv receives; -1 = padding, skip)
"""

from __future__ import annotations

import torch


def write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Scatter this step's K/V rows ([num_tokens, num_kv_heads, head_dim]) into their cache slots, in place."""
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    keep = slot_mapping >= 0  # -1 marks padding tokens that own no slot
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = k[keep].to(k_cache.dtype)
    v_cache[blocks, offsets] = v[keep].to(v_cache.dtype)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` positions of one sequence, read through its block table: [length, kv_heads, dim]."""
    block_size = cache.shape[1]
    positions = torch.arange(length, device=cache.device)
    blocks = block_table.long()[positions // block_size]
    return cache[blocks, positions % block_size]


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of varlen queries over their own sequence's paged K/V (GQA aware).

    Sequence s owns queries q[qsl[s]:qsl[s+1]]: the last q_len positions of its seq_lens[s] tokens, so a
    decode has q_len = 1 and a prefill chunk that starts mid-sequence has q_len < seq_len. Query j sits at
    position seq_lens[s] - q_len + j and sees keys 0..that position.
    """
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads  # query heads sharing one KV head
    work = torch.promote_types(q.dtype, torch.float32)  # float32 softmax, float64 stays float64
    out = torch.empty_like(q)
    qsl = query_start_loc.tolist()
    for s, seq_len in enumerate(seq_lens.tolist()):
        start, end = qsl[s], qsl[s + 1]
        q_len = end - start
        if q_len == 0:
            continue
        k = gather_kv(k_cache, block_tables[s], seq_len).to(work)  # [L, kv_heads, D]
        v = gather_kv(v_cache, block_tables[s], seq_len).to(work)
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, L, D]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        qs = q[start:end].to(work).transpose(0, 1)  # [heads, q_len, D]
        scores = (qs @ k.transpose(1, 2)) * scale  # [heads, q_len, L]
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
        k_pos = torch.arange(seq_len, device=q.device)
        future = k_pos[None, :] > q_pos[:, None]
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[start:end] = (probs @ v).transpose(0, 1).to(q.dtype)
    return out
