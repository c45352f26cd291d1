"""Configuration records: the model's shapes, and the engine's knobs.

ModelConfig describes *what* runs (read from GGUF metadata or a Hugging Face config.json);
EngineConfig describes *how* it is served (memory for the KV cache, batch limits, features).
"""
from __future__ import annotations

from dataclasses import dataclass

from .spec_decode.config import SpeculativeConfig


@dataclass(slots=True, frozen=True)
class ModelConfig:
    num_layers: int = 30
    hidden_size: int = 576
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    intermediate_size: int = 1536
    vocab_size: int = 49152
    rope_theta: float = 100000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = True
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    name: str = "SmolLM2-135M-Instruct"

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """K and V, for every layer and KV head: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * bytes_per_value


@dataclass(slots=True)
class EngineConfig:
    model: str | None = None            # None = the embedded default (SmolLM2-135M-Instruct)
    device: str = "auto"                # "auto" | "cpu" | "cuda"
    dtype: str | None = None            # None = float32 on CPU, bfloat16 on CUDA
    random_weights: bool = False        # same shapes, random values: for GPU benchmarks
    seed: int = 0
    block_size: int = 16
    num_kv_blocks: int | None = None    # either a block count ...
    kv_cache_bytes: int | None = None   # ... or a memory budget (None for both: measured on CUDA, 256 MiB on CPU)
    gpu_memory_utilization: float = 0.9 # CUDA: the share of GPU memory weights + activations + KV may use
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None    # longest prompt + output; None = the model's context (or what the cache holds)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    preemption_mode: str = "recompute"  # "recompute" | "swap"
    swap_space_blocks: int = 256
    trace_capacity: int = 4096          # step records kept in the ring buffer
    enforce_eager: bool = False         # CUDA: never replay decode steps from captured CUDA graphs (vLLM's name)
    tensor_parallel_size: int = 1       # ranks splitting every matrix (engine/distributed)
    pipeline_parallel_size: int = 1     # stages splitting the layers
    micro_batches: int | None = None    # per step with pipeline stages; None = one per stage
    speculative_config: dict | SpeculativeConfig | None = None   # speculative decoding (vLLM's names), e.g.
    #                                     {"method": "ngram", "num_speculative_tokens": 4}; see spec_decode/config.py

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ValueError(f"preemption_mode must be 'recompute' or 'swap', got {self.preemption_mode!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")
        if self.max_num_seqs <= 0 or self.max_num_batched_tokens <= 0:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("tensor_parallel_size and pipeline_parallel_size must be at least 1")
        if self.micro_batches is not None and self.micro_batches < 1:
            raise ValueError(f"micro_batches must be at least 1, got {self.micro_batches}")
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise ValueError(f"max_model_len must be positive, got {self.max_model_len}")
        if self.speculative_config is not None:
            self.speculative_config = SpeculativeConfig.from_dict(self.speculative_config)
