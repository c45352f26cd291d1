"""From an EngineConfig to a model ready to run: which numbers, on which device, in which dtype.

    EngineConfig(model, device, dtype, random_weights, seed)
        │  load_weights(model)  ─►  Llama(config) + its state dict, the tokenizer, the source path
        │  random values instead, the byte tokenizer and no source, for a name in RANDOM_SHAPES
        │  (`llama-3-8b-random`, ...) or with random_weights (the shapes of `model`, SmolLM2's without one)
        ▼
    LoadedModel(model on the device in eval mode, tokenizer, device, dtype, source)

Real weights are read in float32 on the CPU first (that is what the loaders produce and what a
parallel engine's workers cut their shards from), then moved and cast once. Random weights are drawn
where the model will run, in its dtype (an 8B model never passes through 32 GB of CPU float32), except
for a parallel engine's whole model, which stays on the CPU in float32 like real weights.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from ..config import RANDOM_SHAPES, EngineConfig, ModelConfig
from ..model.llama import Llama
from .progress import log
from .tokenizer import TextTokenizer, byte_tokenizer
from .weights import load_config, load_weights


class LoadedModel(NamedTuple):
    model: Llama
    tokenizer: TextTokenizer
    device: torch.device
    dtype: torch.dtype
    source: Path | None          # the GGUF file or Hugging Face folder the numbers came from (None: random)


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for, but PyTorch sees no CUDA GPU here; use device='cpu'.")
    return torch.device(device)


def resolve_dtype(dtype, device: torch.device) -> torch.dtype:
    if dtype is None:   # float32 on CPU (exact, and bf16 matmuls are slow there); bf16 on GPUs
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
                 "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}[dtype]
    return dtype


def load_llama(model: str | None) -> tuple[Llama, TextTokenizer, Path | None]:
    """A Llama with real weights from a GGUF file or Hugging Face folder (None = the embedded default),
    in float32 on the CPU, with its tokenizer and the path the numbers came from."""
    loaded = load_weights(model)
    llama = Llama(loaded.config)
    missing, unexpected = llama.load_state_dict(loaded.state_dict, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise RuntimeError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return llama, loaded.tokenizer, loaded.source


def load_model(cfg: EngineConfig, on_device: bool = True) -> LoadedModel:
    """The model `cfg` names, ready for inference. on_device=False leaves the whole model in float32
    on the CPU (a parallel engine cuts each rank's shard from that, then moves it)."""
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    shape = random_shape(cfg)
    if shape is not None:
        where = dict(device=device, dtype=dtype) if on_device else {}
        model, tokenizer, source = Llama.random(shape, seed=cfg.seed, **where), byte_tokenizer(), None
    else:
        model, tokenizer, source = load_llama(cfg.model)
    if on_device:
        model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)   # inference only
        log(f"model {model.config.name} ready on {device} in {str(dtype).removeprefix('torch.')}")
    return LoadedModel(model, tokenizer, device, dtype, source)


def random_shape(cfg: EngineConfig) -> ModelConfig | None:
    """The shapes to fill with random values, or None for real weights: a RANDOM_SHAPES name, or
    random_weights with the model's own shapes (SmolLM2's when no model is named). An unknown name or
    a path that does not exist raises WeightsError, listing the names."""
    if cfg.model in RANDOM_SHAPES:
        return RANDOM_SHAPES[cfg.model]
    if not cfg.random_weights:
        return None
    return ModelConfig() if cfg.model is None else load_config(cfg.model)


def whole_model(cfg: EngineConfig) -> Llama:
    """What each worker of a parallel engine builds before cutting out its shard (a picklable function)."""
    return load_model(cfg, on_device=False).model
