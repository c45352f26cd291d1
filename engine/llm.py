"""`LLM`: the front door. Load a model once, then generate or stream text.

    llm = LLM()                                    # the embedded SmolLM2-135M-Instruct
    llm.generate(["The capital of France is"], SamplingParams(temperature=0.0, max_tokens=16))
    for event in llm.stream("Why is the sky blue?", SamplingParams(max_tokens=64), chat=True): ...

This first version runs each request through the plain reference loop (engine/reference.py),
one at a time; the paged, continuously batched engine takes over the inside, not the API.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from .config import EngineConfig, ModelConfig
from .detokenizer import IncrementalDetokenizer
from .model import Llama
from .outputs import RequestMetrics, RequestOutput, StreamEvent
from .progress import log
from .reference import reference_stream
from .sampler import make_generator
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
        self._lock = threading.Lock()     # one request at a time through the reference loop
        self._next_id = 0

    # -- prompts -------------------------------------------------------------------------------
    def format_prompt(self, prompt: str, chat: bool) -> str:
        """With chat=True, wrap the prompt in the model's chat template (a system turn, the user turn,
        and the opening of the assistant turn) — what instruct models were trained to continue."""
        if chat and self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        return prompt

    def _stop_ids(self, params: SamplingParams) -> tuple[int, ...]:
        if params.ignore_eos:
            return ()
        ids = {self.config.eos_token_id, self.tokenizer.eos_token_id}
        return tuple(i for i in ids if i is not None)

    # -- generation ----------------------------------------------------------------------------
    def stream(self, prompt: str, params: SamplingParams | None = None, chat: bool = False) -> Iterator[StreamEvent]:
        """One StreamEvent per generated token; the last one has finished=True."""
        params = params or SamplingParams()
        text = self.format_prompt(prompt, chat)
        prompt_ids = self.tokenizer.encode(text).ids
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) + params.max_tokens > self.config.max_position_embeddings:
            raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                             f"the model's context of {self.config.max_position_embeddings} tokens")
        request_id = self._new_id()
        detok = IncrementalDetokenizer(self.tokenizer, params.stop)
        stop_ids = self._stop_ids(params)
        with self._lock:
            gen = make_generator(params.seed, self.device)
            count = 0
            for token in reference_stream(self.model, prompt_ids, params, gen, stop_ids):
                count += 1
                is_stop_token = token in stop_ids
                delta = "" if is_stop_token else detok.add(token)
                reason = "stop" if (is_stop_token or detok.stopped) else ("length" if count == params.max_tokens else None)
                yield StreamEvent(request_id, token, delta, detok.text, reason is not None, reason)
                if reason is not None:
                    return

    def generate(self, prompts: str | list[str], params: SamplingParams | None = None,
                 chat: bool = False) -> list[RequestOutput]:
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = params or SamplingParams()
        outputs = []
        for prompt in prompts:
            metrics = RequestMetrics(arrival_s=time.perf_counter())
            ids, text, reason, request_id = [], "", None, ""
            for ev in self.stream(prompt, params, chat=chat):
                metrics.record_token(time.perf_counter())
                ids.append(ev.token_id)
                text, reason, request_id = ev.text, ev.finish_reason, ev.request_id
            metrics.finished_s = time.perf_counter()
            prompt_ids = self.tokenizer.encode(self.format_prompt(prompt, chat)).ids
            outputs.append(RequestOutput(request_id, prompt, text, ids, reason, metrics, prompt_ids))
        return outputs

    def inspect(self, text: str, max_tokens: int = 256):
        """Per-layer tensors of one forward pass over `text` (see engine/inspect.py)."""
        from .inspect import inspect
        with self._lock:
            return inspect(self.model, self.tokenizer, text, max_tokens)

    def _new_id(self) -> str:
        self._next_id += 1
        return str(self._next_id)
