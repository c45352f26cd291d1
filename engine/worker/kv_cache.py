"""KVCache: the preallocated K/V memory, carved into blocks, plus the CPU swap space.

One tensor per layer holds both K and V:

    kv[layer]: [2, num_blocks, block_size, num_kv_heads, head_dim]
                └ 0 = K, 1 = V    └ block b, slot o holds the token whose slot id is b * block_size + o

The whole budget is allocated once at start-up (memory.py decides how much); afterwards the engine
only moves block ids around (BlockManager) and writes into slots (write_kv). Nothing is allocated
per request.
"""
from __future__ import annotations

import torch

from ..config import ModelConfig

def bytes_per_block(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """K and V of block_size tokens in every layer."""
    return 2 * cfg.num_layers * block_size * cfg.num_kv_heads * cfg.head_dim * torch.finfo(dtype).bits // 8


class KVCache:
    def __init__(self, cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device, num_swap_blocks: int = 0):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.dtype, self.device = dtype, device
        shape = (2, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.kv = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg.num_layers)]
        # The swap space lives in host memory; pinned on CUDA so the copies can run at full speed.
        pin = device.type == "cuda"
        swap_shape = (2, num_swap_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.swap = [torch.zeros(swap_shape, dtype=dtype, pin_memory=pin) for _ in range(cfg.num_layers)] \
            if num_swap_blocks else []
        self.bytes_per_block = bytes_per_block(cfg, block_size, dtype)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_cache, v_cache) of layer i, each [num_blocks, block_size, num_kv_heads, head_dim]."""
        return self.kv[i][0], self.kv[i][1]

    @property
    def total_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write: block dst becomes a copy of block src, in every layer."""
        if not pairs:
            return
        src = torch.tensor([s for s, _ in pairs], device=self.device)
        dst = torch.tensor([d for _, d in pairs], device=self.device)
        for kv in self.kv:
            kv[:, dst] = kv[:, src]

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """(gpu block, cpu block) pairs: device -> host."""
        for gpu, cpu in pairs:
            for kv, swap in zip(self.kv, self.swap):
                swap[:, cpu].copy_(kv[:, gpu])

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """(cpu block, gpu block) pairs: host -> device."""
        for cpu, gpu in pairs:
            for kv, swap in zip(self.kv, self.swap):
                kv[:, gpu].copy_(swap[:, cpu], non_blocking=True)
