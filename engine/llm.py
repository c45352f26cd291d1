"""`LLM`: the front door. Load a model once, then generate or stream text.

    llm = LLM()                                    # the embedded SmolLM2-135M-Instruct
    llm.generate(["The capital of France is"], SamplingParams(temperature=0.0, max_tokens=16))
    for event in llm.stream("Why is the sky blue?", SamplingParams(max_tokens=64), chat=True): ...

Inside, one LLMEngine (paged KV cache, continuous batching, prefix caching, chunked prefill)
steps on a background thread (EngineLoop). Every generate/stream call, from any thread, submits
to it, so concurrent callers share steps; `llm.engine` is that engine, for its trace and
allocator state. The plain reference loop (engine/reference.py) stays as the test oracle.
"""
from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from .config import EngineConfig, ModelConfig
from .model import Llama
from .engine_loop import EngineLoop
from .llm_engine import LLMEngine
from .outputs import RequestOutput, StreamEvent
from .progress import log
from .sampling_params import SamplingParams
from .tokenizer import TextTokenizer, TokenizerRegistry, byte_tokenizer
from .weights import load_weights


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


def build_model(cfg: EngineConfig) -> tuple[Llama, TextTokenizer, torch.device, torch.dtype, Path | None]:
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    if cfg.random_weights:
        model, tokenizer, source = Llama.random(ModelConfig(), seed=cfg.seed), byte_tokenizer(), None
    else:
        loaded = load_weights(cfg.model)
        model = Llama(loaded.config)
        missing, unexpected = model.load_state_dict(loaded.state_dict, strict=False)
        if unexpected or [m for m in missing if m != "lm_head.weight"]:
            raise RuntimeError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
        tokenizer, source = loaded.tokenizer, loaded.source
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)  # inference only
    log(f"model {model.config.name} ready on {device} in {str(dtype).removeprefix('torch.')}")
    return model, tokenizer, device, dtype, source


class LLM:
    def __init__(self, model: str | None = None, device: str = "auto", dtype=None,
                 random_weights: bool = False, **engine_kwargs):
        self.engine_config = EngineConfig(model=model, device=device, dtype=dtype,
                                          random_weights=random_weights, **engine_kwargs)
        self.model, self.tokenizer, self.device, self.dtype, self.source = build_model(self.engine_config)
        self.config: ModelConfig = self.model.config
        self.tokenizers = TokenizerRegistry(self.tokenizer)
        self.engine = LLMEngine(self.model, self.engine_config, tokenizer=self.tokenizer)
        self.loop = EngineLoop(self.engine)
        self._lock = threading.Lock()     # inspect(): one reference pass at a time

    # -- prompts -------------------------------------------------------------------------------
    def format_prompt(self, prompt: str, chat: bool) -> str:
        """With chat=True, wrap the prompt in the model's chat template (a system turn, the user turn,
        and the opening of the assistant turn) — what instruct models were trained to continue."""
        if chat and self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        return prompt

    def _prompt_ids(self, prompt: str, params: SamplingParams, chat: bool) -> list[int]:
        ids = self.tokenizer.encode(self.format_prompt(prompt, chat)).ids
        if not ids:
            raise ValueError("the prompt is empty")
        limit = self.engine.max_model_len
        if len(ids) + params.max_tokens > limit:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                             f"the engine's context of {limit} tokens")
        return ids

    # -- generation ----------------------------------------------------------------------------
    def stream(self, prompt: str, params: SamplingParams | None = None, chat: bool = False) -> Iterator[StreamEvent]:
        """One StreamEvent per generated token; the last one has finished=True. Stopping early
        (closing or dropping the iterator) aborts the request and frees its KV blocks."""
        params = params or SamplingParams()
        ids = self._prompt_ids(prompt, params, chat)
        yield from self.loop.stream(ids, params, prompt_text=prompt)

    def generate(self, prompts: str | list[str], params: SamplingParams | None = None,
                 chat: bool = False) -> list[RequestOutput]:
        """All prompts are submitted together and batched; outputs come back in prompt order
        (n outputs per prompt when params.n > 1)."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = params or SamplingParams()
        return self.loop.generate([(self._prompt_ids(p, params, chat), p) for p in prompts], params)

    def trace_since(self, step: int = 0):
        """Step records with record.step >= step (the batching timeline), read between steps."""
        return self.loop.read(lambda: self.engine.trace.since(step))

    def allocator_state(self):
        """The KV block allocator right now (owners, ref counts, hashes, free order), read between steps."""
        return self.loop.read(self.engine.allocator_state)

    def close(self) -> None:
        """Stop the engine thread (requests still running are abandoned)."""
        self.loop.close()

    def inspect(self, text: str, max_tokens: int = 256):
        """Per-layer tensors of one forward pass over `text` (see engine/inspect.py)."""
        from .inspect import inspect
        with self._lock:
            return inspect(self.model, self.tokenizer, text, max_tokens)
