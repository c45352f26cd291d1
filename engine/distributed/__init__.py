"""Tensor and pipeline parallelism with torch.distributed (gloo on CPU, NCCL on GPUs). Chapter 19.

    parallel_config.py   ParallelConfig, which sizes split a model (and the refusal naming those that do),
                         stage_layers, head_shard
    tensor_parallel.py   column/row-parallel linear layers by module substitution; why the embedding and
                         LM head stay whole; weight_splits (how each matrix is cut, for the widget)
    shard.py             one rank's shard of the model and of the KV cache
    pipeline.py          micro-batches, and ShardRunner: one rank's part of a step (recv, layers, send);
                         on GPUs its decode layers replay a CUDA graph, all-reduces captured inside
    comm.py, stats.py    every all-reduce, send, recv and record counted per step (calls, bytes, seconds)
    process_group.py     the rendezvous and groups
    worker.py            a worker process's loop
    executor.py          DistributedExecutor: rank 0 starts the workers, sends each step's record,
                         returns the sampling rank's output; a dead worker fails the step, nothing is left

    engine = parallel_engine(whole_model, build, EngineConfig(tensor_parallel_size=3), device, dtype)
    LLM(tensor_parallel_size=3)  /  python -m engine generate --tp 3     # the same, from the front door
"""
from __future__ import annotations

from dataclasses import replace

import torch

from ..config import EngineConfig, ModelConfig
from ..llm_engine import LLMEngine
from ..model.llama import Llama
from .executor import DistributedExecutor
from .parallel_config import ParallelConfig, check_parallel, stage_layers, tensor_parallel_sizes
from .stats import CommCounts, ParallelStep, RankStep, ideal_bubble
from .tensor_parallel import weight_splits

GPU_KV_BYTES = 4 * 2**30    # a parallel engine on GPUs sizes its cache by a budget: measuring free memory
#                             needs a profile pass on every rank together, which is not written yet


def parallel_config(config: EngineConfig) -> ParallelConfig:
    return ParallelConfig(config.tensor_parallel_size, config.pipeline_parallel_size, config.micro_batches)


def parallel_engine(model: Llama, build, config: EngineConfig, device: torch.device, dtype: torch.dtype,
                    tokenizer=None, threads: int | None = None, graphs: str | None = "auto") -> LLMEngine:
    """An LLMEngine whose steps run on tensor_parallel_size x pipeline_parallel_size processes.

    This process is rank 0 (scheduler, output processor, and its own shard); `model` is the whole
    model (on the CPU, or random weights drawn on this rank's GPU), cut down to rank 0's shard in
    place; `build()` gives each worker the same whole model (a picklable function: the workers are
    spawned). graphs: "auto" = decode CUDA graphs on GPUs unless config.enforce_eager, eager on the
    CPU; "stand-in" = the CPU stand-in (tests). Close it with engine.close()."""
    pc = parallel_config(config)
    check_parallel(model.config, pc)
    if device.type == "cuda" and config.num_kv_blocks is None and config.kv_cache_bytes is None:
        config = replace(config, kv_cache_bytes=GPU_KV_BYTES)
    if graphs == "auto":
        graphs = "cuda" if device.type == "cuda" and not config.enforce_eager else None
    executor = DistributedExecutor(model, build, pc, device.type, dtype, threads, config, graphs)
    try:
        return LLMEngine(executor.model, config, tokenizer, runner_factory=executor.allocate)
    except BaseException:
        executor.close()
        raise


def parallel_layout(cfg: ModelConfig, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1) -> dict:
    """How a split places the model: each stage's layers, each matrix's slices, how many all-reduces
    and hand-offs one pass makes. Raises ValueError (naming the sizes that work) for one that does not fit."""
    pc = ParallelConfig(tensor_parallel_size, pipeline_parallel_size)
    check_parallel(cfg, pc)
    return {
        "tensor_parallel_size": pc.tp, "pipeline_parallel_size": pc.pp, "world_size": pc.world_size,
        "stages": [[r.start, r.stop] for r in stage_layers(cfg.num_layers, pc.pp)],
        "weights": weight_splits(cfg, pc.tp),
        "all_reduces_per_token_pass": 2 * cfg.num_layers if pc.tp > 1 else 0,
        "handoffs_per_token_pass": pc.pp - 1,
        "valid_tensor_parallel_sizes": tensor_parallel_sizes(cfg),
    }


__all__ = ["ParallelConfig", "DistributedExecutor", "parallel_engine", "parallel_layout", "parallel_config",
           "check_parallel", "stage_layers", "tensor_parallel_sizes", "CommCounts", "ParallelStep", "RankStep",
           "ideal_bubble", "weight_splits"]
