"""One rank's shard: its stage's layers, tensor-parallel slices of their matrices, its part of the KV cache.

    whole model (CPU)  ──keep layers of my stage──►  ──column/row slices (tensor_parallel.py)──►  to my device
    KV cache           only my stage's layers, only my KV heads:
                       [2, num_blocks, block_size, my kv heads, head_dim] per layer I hold

Every rank has the same number of blocks (the scheduler on rank 0 hands out block ids for all of them),
so a block id means the same tokens on every rank; each rank stores only its heads and layers of them.
"""
from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from ..config import ModelConfig
from ..model.llama import Llama
from ..worker.kv_cache import KVCache
from .parallel_config import ParallelConfig, head_shard, stage_layers
from .tensor_parallel import shard_tensor_parallel


class NotOnThisRank(nn.Module):
    """Stands where another stage's layer was: the numbering stays global, the weights are gone."""

    def __init__(self, layer: int):
        super().__init__()
        self.layer = layer

    def forward(self, *args):
        raise RuntimeError(f"layer {self.layer} lives on another pipeline stage")


def build_shard(model: Llama, pc: ParallelConfig, rank: int, comm, device: torch.device,
                dtype: torch.dtype) -> tuple[Llama, range]:
    """Cut the whole model down to `rank`'s shard (in place), move it to its device; returns its layers.
    Every rank keeps the (tied) embedding: the first stage embeds, the sampling rank's LM head reads it."""
    stage, tp_rank = pc.coords(rank)
    layers = stage_layers(model.config.num_layers, pc.pp)[stage]
    for i in range(model.config.num_layers):
        if i not in layers:
            model.layers[i] = NotOnThisRank(i)
    shard_tensor_parallel(model, pc.tp, tp_rank, comm, layers)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False), layers


class ShardKVCache(KVCache):
    """The KV cache of one rank: its layers (global ids in `layers`), its KV heads."""

    def __init__(self, cfg: ModelConfig, pc: ParallelConfig, rank: int, num_blocks: int, block_size: int,
                 dtype: torch.dtype, device: torch.device, num_swap_blocks: int = 0):
        stage, tp_rank = pc.coords(rank)
        self.layers = stage_layers(cfg.num_layers, pc.pp)[stage]
        local = replace(cfg, num_layers=len(self.layers), num_kv_heads=head_shard(cfg, pc.tp, tp_rank).num_kv_heads)
        super().__init__(local, num_blocks, block_size, dtype, device, num_swap_blocks)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return super().layer(i - self.layers.start)
