"""Configuration records: the model's shapes, and the engine's knobs.

ModelConfig describes *what* runs (read from GGUF metadata or a Hugging Face config.json);
EngineConfig describes *how* it is served (memory for the KV cache, batch limits, features);
SpeculativeConfig says which proposer drafts and how many tokens it may guess per step (ch. 18).

Every layer of the engine reads these records, so they import nothing from it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields


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

    def matmul_parameters(self) -> int:
        """Weights one token multiplies through in the layers: q, k, v, o and the three MLP matrices."""
        attention = self.hidden_size * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        return self.num_layers * (attention + 3 * self.hidden_size * self.intermediate_size)

    def num_parameters(self) -> int:
        """Every weight: embedding, the layers' matrices and norms, the final norm, an untied LM head."""
        embedding = self.vocab_size * self.hidden_size
        norms = (2 * self.num_layers + 1) * self.hidden_size
        head = 0 if self.tie_word_embeddings else embedding
        return embedding + self.matmul_parameters() + norms + head


# --model NAME: public shapes built with random values (no file, no download), for speed measurements.
# The numbers are Gaussian noise, the text gibberish; the work per token is the real model's. Llama 3.2's
# "llama3" RoPE scaling past 8,192 positions is not modelled: plain RoPE at every position costs the same.
RANDOM_SHAPES: dict[str, ModelConfig] = {
    "smollm2-random": ModelConfig(),
    "llama-3.2-1b-random": ModelConfig(
        num_layers=16, hidden_size=2048, num_heads=32, num_kv_heads=8, head_dim=64, intermediate_size=8192,
        vocab_size=128256, rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=True,
        bos_token_id=128000, eos_token_id=128001, name="Llama-3.2-1B"),
    "llama-3-8b-random": ModelConfig(
        num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
        vocab_size=128256, rope_theta=500000.0, max_position_embeddings=8192, tie_word_embeddings=False,
        bos_token_id=128000, eos_token_id=128001, name="Llama-3-8B"),
}


# The embedded default's names, as a vLLM user would write them (the Hugging Face id) or as /v1/models
# lists it: each means the embedded default (a Q4_1 GGUF of that model, fetched once), not a path.
DEFAULT_MODEL_NAMES = frozenset({"HuggingFaceTB/SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct",
                                 "SmolLM2-135M-Instruct.Q4_1"})


@dataclass(slots=True)
class EngineConfig:
    model: str | None = None            # None = the embedded default (SmolLM2-135M-Instruct); a GGUF file or
    #                                     Hugging Face folder; or a name in RANDOM_SHAPES (random values)
    device: str = "auto"                # "auto" | "cpu" | "cuda"
    dtype: str | None = None            # None = float32 on CPU, bfloat16 on CUDA
    random_weights: bool = False        # the model's shapes with random values: for GPU benchmarks
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
    #                                     {"method": "ngram", "num_speculative_tokens": 4}; see SpeculativeConfig below

    def __post_init__(self) -> None:
        if self.model in DEFAULT_MODEL_NAMES and not os.path.exists(self.model):
            self.model = None           # vLLM's way of naming it: LLM(model="HuggingFaceTB/SmolLM2-135M-Instruct")
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


SPECULATIVE_METHODS = ("ngram", "early_exit", "draft_model")
MAX_SPECULATIVE_TOKENS = 16     # a verify row is 1 + k query tokens; past ~8 the last drafts almost never survive


@dataclass(slots=True, frozen=True)
class SpeculativeConfig:
    """Speculative decoding's settings, in vLLM's names, so the same dictionary reads the same in both:

        {"method": "ngram",       "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
        {"method": "early_exit",  "num_speculative_tokens": 4, "num_layers": 8}
        {"method": "draft_model", "num_speculative_tokens": 4, "model": "path/to/small-model"}

    A wrong field is refused here, with its name, before any model is loaded."""
    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int = 1          # ngram: shortest suffix worth matching
    prompt_lookup_max: int = 4          # ngram: longest suffix tried first
    num_layers: int | None = None       # early_exit: how many of the target's layers draft
    model: str | None = None            # draft_model: a GGUF file or Hugging Face folder
    # The rule for speculating only where it pays (spec_decode/rule.py; None turns a half off):
    disable_by_batch_size: int | None = 64   # vLLM's name: above this many rows in a step, nobody drafts
    min_acceptance: float | None = 0.25      # kept / judged drafts under which a request pauses drafting

    @classmethod
    def from_dict(cls, d: "dict | SpeculativeConfig") -> "SpeculativeConfig":
        if isinstance(d, SpeculativeConfig):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"speculative_config must be a dict, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"speculative_config: unknown field(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        for name in ("method", "num_speculative_tokens"):
            if name not in d:
                raise ValueError(f"speculative_config: '{name}' is required")
        config = cls(**d)
        config.check()
        return config

    def check(self) -> None:
        def bad(field: str, why: str):
            raise ValueError(f"speculative_config: '{field}' {why}, got {getattr(self, field)!r}")

        if self.method not in SPECULATIVE_METHODS:
            bad("method", f"must be one of {', '.join(SPECULATIVE_METHODS)}")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            bad("num_speculative_tokens", f"must be an integer from 1 to {MAX_SPECULATIVE_TOKENS}")
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(name, "must be a positive integer")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            bad("prompt_lookup_min", f"must not exceed prompt_lookup_max ({self.prompt_lookup_max})")
        if self.method == "early_exit":
            if self.num_layers is None:
                bad("num_layers", "is required for method 'early_exit'")
            if not isinstance(self.num_layers, int) or isinstance(self.num_layers, bool) or self.num_layers < 1:
                bad("num_layers", "must be a positive integer")
        elif self.num_layers is not None:
            bad("num_layers", f"is only for method 'early_exit', not {self.method!r}")
        b = self.disable_by_batch_size
        if b is not None and (not isinstance(b, int) or isinstance(b, bool) or b < 1):
            bad("disable_by_batch_size", "must be a positive integer or None")
        a = self.min_acceptance
        if a is not None and (not isinstance(a, (int, float)) or isinstance(a, bool) or not 0.0 <= a <= 1.0):
            bad("min_acceptance", "must be a number from 0 to 1 or None")
        if self.method == "draft_model":
            if not self.model or not isinstance(self.model, str):
                bad("model", "is required for method 'draft_model' (a GGUF file or Hugging Face folder)")
        elif self.model is not None:
            bad("model", f"is only for method 'draft_model', not {self.method!r}")

    def check_against(self, num_target_layers: int) -> None:
        """What needs the target: an early exit must leave at least one layer out."""
        if self.method == "early_exit" and self.num_layers >= num_target_layers:
            raise ValueError(f"speculative_config: 'num_layers' must be below the target's {num_target_layers} "
                             f"layers (an exit after every layer is the target itself), got {self.num_layers}")

    @property
    def context_needed(self) -> int | None:
        """How many of a sequence's latest tokens the proposer reads (None = all of them)."""
        return {"ngram": None, "early_exit": 1, "draft_model": 2}[self.method]

    def to_dict(self) -> dict:
        d = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            d |= {"prompt_lookup_min": self.prompt_lookup_min, "prompt_lookup_max": self.prompt_lookup_max}
        elif self.method == "early_exit":
            d["num_layers"] = self.num_layers
        else:
            d["model"] = self.model
        return d
