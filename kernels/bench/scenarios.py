"""Random paged batches: the inputs shared by the kernel tests and the benchmark.

A batch is a list of (seq_len, q_len) pairs: each sequence already holds seq_len - q_len tokens and
adds q_len this step (q_len = 1 is a decode, q_len = seq_len a fresh prefill, anything between a
prefill chunk that starts mid-sequence). Physical blocks are handed out in a random order, so block
tables are scattered and out of order, and the whole cache is random so that reading a wrong block
gives a wrong answer rather than a lucky zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class PagedBatch:
    q: torch.Tensor             # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor       # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor      # [num_seqs] int32, new tokens included
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    slot_mapping: torch.Tensor  # [num_tokens] int64: the cache slot of each query's own K/V
    scale: float

    def args(self) -> tuple:
        """Positional arguments of paged_attention."""
        return (self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens,
                self.query_start_loc, self.scale)


def make_paged_batch(
    seqs: list[tuple[int, int]],
    *,
    num_heads: int = 9,
    num_kv_heads: int = 3,
    head_dim: int = 64,
    block_size: int = 16,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    spare_blocks: int = 3,
    table_fill: int = -1,
    extra_table_cols: int = 1,
    generator: torch.Generator | None = None,
) -> PagedBatch:
    g = generator
    blocks_per_seq = [-(-seq_len // block_size) for seq_len, _ in seqs]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    order = torch.randperm(num_blocks, generator=g)  # scattered, out-of-order physical blocks
    width = max(blocks_per_seq) + extra_table_cols
    block_tables = torch.full((len(seqs), width), table_fill, dtype=torch.int32)
    taken = 0
    for s, n in enumerate(blocks_per_seq):
        block_tables[s, :n] = order[taken:taken + n].to(torch.int32)
        taken += n

    slots = []
    for s, (seq_len, q_len) in enumerate(seqs):
        assert 0 <= q_len <= seq_len and seq_len >= 1, (seq_len, q_len)
        pos = torch.arange(seq_len - q_len, seq_len)
        slots.append(block_tables[s, pos // block_size].long() * block_size + pos % block_size)
    q_lens = torch.tensor([q_len for _, q_len in seqs])
    num_tokens = int(q_lens.sum())

    def randn(*shape):
        # Drawn where the generator lives (the CPU for tests), else straight on the target device:
        # a benchmark cache holds gigabytes.
        where = g.device if g is not None else device
        return torch.randn(*shape, generator=g, device=where, dtype=torch.float32).to(dtype=dtype, device=device)

    return PagedBatch(
        q=randn(num_tokens, num_heads, head_dim),
        k_cache=randn(num_blocks, block_size, num_kv_heads, head_dim),
        v_cache=randn(num_blocks, block_size, num_kv_heads, head_dim),
        block_tables=block_tables.to(device),
        seq_lens=torch.tensor([seq_len for seq_len, _ in seqs], dtype=torch.int32, device=device),
        query_start_loc=torch.cat([torch.zeros(1, dtype=torch.long), q_lens.cumsum(0)]).to(torch.int32).to(device),
        slot_mapping=torch.cat(slots).to(device),
        scale=head_dim ** -0.5,
    )
