"""Hugging Face transformers as the peer in the GPU benchmarks: the same weights, run by HF's own loops.

    hf_model(ours)                     LlamaForCausalLM with our model's config and weights (copied)
    generate_batch(hf, prompts, n)     HF's continuous batching (`model.generate_batch`), default or
                                       with CUDA graphs (ContinuousBatchingConfig(use_cuda_graph=True))
    generate_static(hf, prompts, n)    `model.generate` over static batches (left-padded), one after another
    timed_generate(hf, batch, n)       TTFT and inter-token latency of one `generate` call, eager or with
                                       the static KV cache (which HF compiles with torch.compile on CUDA)

Every call returns plain numbers or raises; the benchmarks record an error string for a peer that
fails (an API that moved between transformers versions should not lose our own figures).
EOS is never a stop: every request produces exactly its output length, as ours does with ignore_eos.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from ..config import ModelConfig
from ..loader.hf_folder import _HF_NAMES
from ..model.llama import Llama


def hf_config(cfg: ModelConfig):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_position_embeddings, rope_theta=cfg.rope_theta,
        rms_norm_eps=cfg.rms_norm_eps, tie_word_embeddings=cfg.tie_word_embeddings,
        bos_token_id=cfg.bos_token_id, eos_token_id=None, pad_token_id=0)   # no EOS: never stop early


def hf_model(ours: Llama):
    """LlamaForCausalLM holding a copy of our weights, on our device and in our dtype."""
    from transformers import LlamaForCausalLM
    weight = ours.embed.weight
    ours_names = {v: k for k, v in _HF_NAMES.items()}
    state = {}
    for name, p in ours.state_dict().items():
        if name == "embed.weight":
            state["model.embed_tokens.weight"] = p
        elif name == "norm.weight":
            state["model.norm.weight"] = p
        elif name == "lm_head.weight":
            state[name] = p
        else:
            _, layer, rest = name.split(".", 2)
            state[f"model.layers.{layer}.{ours_names[rest.removesuffix('.weight')]}.weight"] = p
    model = LlamaForCausalLM(hf_config(ours.config)).to(device=weight.device, dtype=weight.dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise RuntimeError(f"weights do not map onto LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def _generation_config(new_tokens: int, **extra):
    from transformers import GenerationConfig
    return GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0, **extra)


def _cb_config(**wanted):
    """ContinuousBatchingConfig with the fields this transformers version has (None if it has no such class)."""
    try:
        from transformers.generation import ContinuousBatchingConfig
    except ImportError:
        return None
    known = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)} if dataclasses.is_dataclass(
        ContinuousBatchingConfig) else set(wanted)
    return ContinuousBatchingConfig(**{k: v for k, v in wanted.items() if k in known})


@torch.no_grad()   # not inference_mode: HF's batching thread updates tensors made here, outside that mode
def generate_batch(model, prompts: list[list[int]], new_tokens: int, cuda_graphs: bool | None = None,
                   small: bool = False) -> dict:
    """HF continuous batching over every prompt at once: {"duration_s", "output_tokens"}."""
    knobs = {} if cuda_graphs is None else {"use_cuda_graph": cuda_graphs}
    if small:  # on a CPU, HF sizes its cache from free host memory: keep the smoke run small
        knobs.update(num_blocks=64, max_batch_tokens=256)
    cb = _cb_config(**knobs)
    gen = _generation_config(new_tokens)
    kwargs = {"continuous_batching_config": cb} if cb is not None else {}
    if cb is None and cuda_graphs is not None:
        gen.use_cuda_graph = cuda_graphs  # older versions read it from the GenerationConfig
    _sync(model)
    start = time.perf_counter()
    out = model.generate_batch(prompts, generation_config=gen, progress_bar=False, **kwargs)
    _sync(model)
    duration = time.perf_counter() - start
    produced = sum(len(r.generated_tokens) for r in out.values())
    if produced < len(prompts) * new_tokens:   # HF logs failed requests and returns them empty
        raise RuntimeError(f"generate_batch produced {produced} of {len(prompts) * new_tokens} tokens "
                           f"(requests failed inside transformers; see its log)")
    return {"duration_s": duration, "output_tokens": produced, "requests": len(out)}


@torch.inference_mode()
def generate_static(model, prompts: list[list[int]], new_tokens: int, batch_size: int) -> dict:
    """Static batches of batch_size prompts (left-padded to the batch's longest), one `generate` each."""
    device = model.device
    _sync(model)
    start, produced = time.perf_counter(), 0
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in batch], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=_generation_config(new_tokens))
        produced += (out.shape[1] - width) * len(batch)
    _sync(model)
    return {"duration_s": time.perf_counter() - start, "output_tokens": produced, "requests": len(prompts)}


def _clock():
    """A streamer that only notes when generate hands it tokens: first the prompt, then one batch per step."""
    from transformers.generation.streamers import BaseStreamer

    class Clock(BaseStreamer):
        def __init__(self):
            self.times: list[float] = []

        def put(self, value) -> None:
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    return Clock()


@torch.inference_mode()
def timed_generate(model, batch: list[list[int]], new_tokens: int, static_cache: bool = False) -> dict:
    """{"ttft_ms", "itl_ms"} of one `generate` over equal-length prompts (no padding).

    TTFT: from the call to the first generated token; ITL: the mean gap between later tokens."""
    ids = torch.tensor(batch, device=model.device)
    extra = {"cache_implementation": "static"} if static_cache else {}
    clock = _clock()
    _sync(model)
    start = time.perf_counter()
    model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), streamer=clock,
                   generation_config=_generation_config(new_tokens, **extra))
    _sync(model)
    steps = clock.times[1:]                      # times[0] is the prompt, handed over before the prefill
    if len(steps) < 2:
        raise RuntimeError(f"generate produced {len(steps)} steps, expected {new_tokens}")
    return {"ttft_ms": (steps[0] - start) * 1e3, "itl_ms": (steps[-1] - steps[0]) / (len(steps) - 1) * 1e3}


def _sync(model) -> None:
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)
