"""How big the KV cache is, and how long a request may be.

    explicit      num_kv_blocks=N                      (tests, the widgets' small sandboxes)
    budget        kv_cache_bytes=B; on CPU, 256 MiB when nothing is said
    measured      on CUDA:  gpu_memory_utilization x total GPU memory
                            - memory in use now (weights, CUDA context, other processes)
                            - the activations of the largest step, measured by one profile pass

A budget never buys more blocks than the batch could ever fill (max_num_seqs sequences of
max_model_len tokens). max_model_len defaults to the model's context, or to what the cache holds
if that is less; asking for more than either is an error at start-up, not a surprise mid-request.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass

import torch

from ..config import EngineConfig
from ..core.records import ScheduledRequest, SchedulerOutput
from ..model.llama import Llama
from ..sampling_params import SamplingParams
from .kv_cache import KVCache, bytes_per_block

CPU_KV_BYTES = 256 * 2**20


@dataclass(slots=True, frozen=True)
class KVCachePlan:
    num_blocks: int
    max_model_len: int
    source: str                 # "explicit" | "budget" | "measured"
    budget_bytes: int | None    # what the budget or the measurement allowed (before the batch cap)


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def measured_kv_bytes(total: int, in_use: int, peak_activation: int, utilization: float) -> int:
    """The share of GPU memory left for K/V: utilization x total, minus what is used and what a step needs."""
    return int(total * utilization) - in_use - peak_activation


@torch.inference_mode()
def profile_peak_activation_bytes(model: Llama, config: EngineConfig) -> int:
    """Run the largest step the engine will schedule (a full token budget, max_num_seqs sampled rows)
    through a throwaway KV cache, and return the peak memory it needed beyond that cache."""
    from .model_runner import ModelRunner        # the runner, not a copy of it: the same allocations

    device, dtype, bs = model.embed.weight.device, model.embed.weight.dtype, config.block_size
    num_tokens = config.max_num_batched_tokens
    num_seqs = max(1, min(config.max_num_seqs, num_tokens))
    per_seq = [num_tokens // num_seqs + (i < num_tokens % num_seqs) for i in range(num_seqs)]
    torch.cuda.synchronize(device)
    gc.collect()                    # engines that are gone but caught in reference cycles give their memory back
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    kv = KVCache(model.config, sum(blocks_for(n, bs) for n in per_seq), bs, dtype, device)
    kv_bytes = torch.cuda.memory_allocated(device) - base
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=0)   # the sorting path (seeded: the global RNG is left alone)
    scheduled, first_block = [], 0
    for i, n in enumerate(per_seq):
        blocks = list(range(first_block, first_block + blocks_for(n, bs)))
        first_block += len(blocks)
        scheduled.append(ScheduledRequest(i, f"profile-{i}", "prefill", [0] * n, 0, blocks, sample=True,
                                          sampling_params=params, seed=params.seed))
    ModelRunner(model, kv, config.max_num_batched_tokens, config.max_num_seqs).execute(SchedulerOutput(scheduled=scheduled))
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base - kv_bytes
    del kv
    torch.cuda.empty_cache()
    return peak


def plan_kv_cache(model: Llama, config: EngineConfig, extra_bytes_per_block: int = 0) -> KVCachePlan:
    """`extra_bytes_per_block`: another cache laid out on the same blocks (a draft model's, chapter 18)."""
    cfg, bs = model.config, config.block_size
    device, dtype = model.embed.weight.device, model.embed.weight.dtype
    wanted_len = config.max_model_len or cfg.max_position_embeddings
    if wanted_len > cfg.max_position_embeddings:
        raise ValueError(f"max_model_len {wanted_len} exceeds the model's context of {cfg.max_position_embeddings} tokens")
    per_block = bytes_per_block(cfg, bs, dtype) + extra_bytes_per_block
    if config.num_kv_blocks is not None:
        num_blocks, source, budget = config.num_kv_blocks, "explicit", None
    else:
        if config.kv_cache_bytes is not None or device.type != "cuda":
            budget, source = config.kv_cache_bytes if config.kv_cache_bytes is not None else CPU_KV_BYTES, "budget"
        else:
            peak = profile_peak_activation_bytes(model, config)
            free, total = torch.cuda.mem_get_info(device)
            budget = measured_kv_bytes(total, total - free, peak, config.gpu_memory_utilization)
            source = "measured"
        full_batch = config.max_num_seqs * blocks_for(wanted_len, bs)    # never more than the batch could fill
        num_blocks = min(max(0, budget) // per_block, full_batch)
    if num_blocks < 1:
        raise ValueError(f"no memory left for the KV cache ({source} budget {budget} bytes); "
                         "raise gpu_memory_utilization or kv_cache_bytes, or give num_kv_blocks")
    holds = num_blocks * bs
    if config.max_model_len is not None and config.max_model_len > holds:
        raise ValueError(f"max_model_len {config.max_model_len} needs more KV blocks than the cache has "
                         f"({num_blocks} blocks of {bs} tokens = {holds} tokens); lower it or give the cache more memory")
    return KVCachePlan(num_blocks, min(wanted_len, holds), source, budget)
