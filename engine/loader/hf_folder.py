"""Hugging Face folders: config.json + *.safetensors + tokenizer.json, renamed to our parameter names."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer

from ..config import ModelConfig
from .cache import WeightsError
from .tokenizer import TextTokenizer


_HF_NAMES = {
    "input_layernorm": "attention_norm", "self_attn.q_proj": "attention.wq", "self_attn.k_proj": "attention.wk",
    "self_attn.v_proj": "attention.wv", "self_attn.o_proj": "attention.wo",
    "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "mlp.w1", "mlp.up_proj": "mlp.w3",
    "mlp.down_proj": "mlp.w2",
}


def config_from_hf(folder: Path) -> ModelConfig:
    try:
        c = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise WeightsError(f"{folder} has no readable config.json ({e}).") from None
    if "llama" not in str(c.get("model_type", "")).lower():
        raise WeightsError(f"Only Llama-architecture models are supported; {folder} has model_type {c.get('model_type')!r}.")
    heads = c["num_attention_heads"]
    eos = c.get("eos_token_id")
    return ModelConfig(
        num_layers=c["num_hidden_layers"], hidden_size=c["hidden_size"], num_heads=heads,
        num_kv_heads=c.get("num_key_value_heads", heads), head_dim=c.get("head_dim") or c["hidden_size"] // heads,
        intermediate_size=c["intermediate_size"], vocab_size=c["vocab_size"],
        rope_theta=float(c.get("rope_theta", 10000.0)), rms_norm_eps=float(c.get("rms_norm_eps", 1e-5)),
        max_position_embeddings=c.get("max_position_embeddings", 4096),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        bos_token_id=c.get("bos_token_id"), eos_token_id=eos[0] if isinstance(eos, list) else eos,
        name=folder.name,
    )


def state_dict_from_hf(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightsError(f"{folder} has no *.safetensors files.")
    out = {}
    for f in files:
        for name, w in load_file(str(f)).items():
            name = name.removeprefix("model.")
            if name == "embed_tokens.weight":
                out["embed.weight"] = w
            elif name in ("norm.weight", "lm_head.weight"):
                out[name] = w
            elif name.startswith("layers."):
                _, layer, rest = name.split(".", 2)
                out[f"layers.{layer}.{_HF_NAMES[rest.removesuffix('.weight')]}.weight"] = w
    return out


def tokenizer_from_hf(folder: Path) -> TextTokenizer:
    path = folder / "tokenizer.json"
    if not path.exists():
        raise WeightsError(f"{folder} has no tokenizer.json.")
    tok = Tokenizer.from_file(str(path))
    cfg_path = folder / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    eos = cfg.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return TextTokenizer(tok, folder.name, cfg.get("chat_template"), None,
                         tok.token_to_id(eos) if eos else None)
