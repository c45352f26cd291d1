"""Reading a GGUF file: the config from its metadata, the tensors dequantized to float32, and the
byte-level BPE tokenizer rebuilt from the vocabulary and merges it stores."""
from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel

from ..config import ModelConfig
from .cache import WeightsError
from .progress import progress_bar
from .tokenizer import TextTokenizer


def gguf_reader(path: Path):
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


def tokenizer_from_gguf(reader, name: str) -> TextTokenizer:
    """Rebuild a byte-level BPE tokenizer from the vocabulary and merges in GGUF metadata."""
    if gguf_field(reader, "tokenizer.ggml.model") != "gpt2":
        raise WeightsError("Only byte-level BPE ('gpt2') tokenizers in GGUF files are supported.")
    tokens = list(gguf_field(reader, "tokenizer.ggml.tokens"))
    types = list(gguf_field(reader, "tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in gguf_field(reader, "tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = [ByteLevel(add_prefix_space=False, use_regex=True)]
    if gguf_field(reader, "tokenizer.ggml.pre") in ("smollm", "starcoder", "refact", "deepseek-coder"):
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))  # these vocabularies split numbers digit by digit
    tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tok.decoder = decoders.ByteLevel()
    # Control tokens (type 3) such as <|im_start|> must match as one piece, never be split by BPE.
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])
    return TextTokenizer(tok, name, gguf_field(reader, "tokenizer.chat_template"),
                         gguf_field(reader, "tokenizer.ggml.bos_token_id"), gguf_field(reader, "tokenizer.ggml.eos_token_id"))
