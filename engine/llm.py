"""`LLM`: the front door. Load a model once, then generate, chat or stream, with vLLM's offline API.

    llm = LLM()                                    # the embedded SmolLM2-135M-Instruct
    outputs = llm.generate(["The capital of France is"], SamplingParams(temperature=0.0, max_tokens=16))
    outputs[0].outputs[0].text                     # one RequestOutput per prompt, n completions each
    llm.chat([{"role": "user", "content": "Why is the sky blue?"}], SamplingParams(max_tokens=64))
    for event in llm.stream("Why is the sky blue?", SamplingParams(max_tokens=64), chat=True): ...

What a prompt may be (text, {"prompt": ...}, {"prompt_token_ids": [...]}) and what is refused is
engine/inputs.py's job; what comes back is engine/outputs.py's.

Inside, one LLMEngine (paged KV cache, continuous batching, prefix caching, chunked prefill)
steps on a background thread (EngineLoop). Every generate/stream call, from any thread, submits
to it, so concurrent callers share steps; `llm.engine` is that engine, for its trace and
allocator state. Loading is loader/model_loader.py's job, private engines are sandbox.py's, draft
models spec_decode/factory.py's; the unpaged generate loop (engine/unpaged.py) stays as the test oracle.
"""
from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterator

import torch

from .config import EngineConfig, ModelConfig
from .engine_loop import EngineLoop
from .inputs import (ParsedPrompt, check_context, parse_conversations, parse_prompt, parse_prompts, render_chat,
                     sampling_params_for)
from .llm_engine import LLMEngine
from .loader.model_loader import load_model, whole_model
from .loader.tokenizer import TextTokenizer, TokenizerRegistry
from .outputs import RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .sandbox import Sandbox, sandbox_config, sandbox_kv_bytes
from .spec_decode.factory import DraftModels


class LLM:
    def __init__(self, model: str | None = None, device: str = "auto", dtype=None,
                 random_weights: bool = False, **engine_kwargs):
        self.engine_config = cfg = EngineConfig(model=model, device=device, dtype=dtype,
                                                random_weights=random_weights, **engine_kwargs)
        self.parallel = cfg.tensor_parallel_size * cfg.pipeline_parallel_size > 1
        if self.parallel and cfg.speculative_config is not None:
            raise ValueError("speculative_config with tensor_parallel_size/pipeline_parallel_size > 1 is not "
                             "supported yet: speculate on one process, or split without speculating")
        loaded = load_model(cfg, on_device=not self.parallel)
        self.tokenizer, self.source = loaded.tokenizer, loaded.source
        self.device, self.dtype = loaded.device, loaded.dtype
        self._drafts = DraftModels(loaded.model, loaded.tokenizer, loaded.source)
        if self.parallel:   # this process is rank 0; the other ranks are processes it starts (ch. 19)
            from functools import partial

            from .distributed import parallel_engine
            self.engine = parallel_engine(loaded.model, partial(whole_model, cfg), cfg, self.device, self.dtype,
                                          tokenizer=self.tokenizer)
        else:
            self.engine = LLMEngine(loaded.model, cfg, tokenizer=self.tokenizer,
                                    draft_model=self._drafts.for_config(cfg))
        self.model = self.engine.model            # rank 0's shard when split
        self.config: ModelConfig = self.model.config
        self.tokenizers = TokenizerRegistry(self.tokenizer)
        self.loop = EngineLoop(self.engine)
        self._lock = threading.Lock()             # inspect(): one reference pass at a time
        self._sandboxes: weakref.WeakSet[Sandbox] = weakref.WeakSet()

    # -- generation: vLLM's offline API -----------------------------------------------------------
    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
                 use_tqdm=False) -> list[RequestOutput]:
        """One RequestOutput per prompt, in order (n completions each); the prompts are submitted together,
        so they are batched. `prompts`: text, {"prompt": text}, {"prompt_token_ids": ids}, or a list of
        them. `sampling_params`: None (vLLM's defaults), one for every prompt, or a list of one per
        prompt. `use_tqdm`: True shows a progress bar on stderr (or pass a tqdm-like class)."""
        parsed = parse_prompts(prompts, self.tokenizer, self.config.vocab_size)
        return self._generate(parsed, sampling_params_for(sampling_params, len(parsed)), use_tqdm)

    def chat(self, messages, sampling_params: SamplingParams | list[SamplingParams] | None = None, *,
             use_tqdm=False, chat_template: str | None = None, add_generation_prompt: bool = True
             ) -> list[RequestOutput]:
        """Reply to one conversation ([{"role": ..., "content": ...}, ...]) or to each of a list of them:
        the model's chat template (or `chat_template`) turns each into the prompt, which RequestOutput.prompt
        shows."""
        texts = [render_chat(c, self.tokenizer, chat_template, add_generation_prompt)
                 for c in parse_conversations(messages)]
        parsed = [parse_prompt(t, self.tokenizer, self.config.vocab_size, "messages (rendered)") for t in texts]
        return self._generate(parsed, sampling_params_for(sampling_params, len(parsed)), use_tqdm, "messages")

    def _generate(self, prompts: list[ParsedPrompt], params: list[SamplingParams], use_tqdm,
                  where: str = "prompts") -> list[RequestOutput]:
        check_context(prompts, params, self.engine.max_model_len, where)   # every prompt, before any runs
        bar = _progress_bar(use_tqdm, len(prompts))
        try:
            return self.loop.generate([(p.token_ids, p.text, sp) for p, sp in zip(prompts, params)],
                                      on_output=bar.update if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()

    def get_tokenizer(self) -> TextTokenizer:
        """The model's tokenizer (encode_ids, decode, apply_chat_template)."""
        return self.tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """A fresh SamplingParams with vLLM's defaults (the model's files carry no generation config here)."""
        return SamplingParams()

    # -- streaming: ours -----------------------------------------------------------------------------
    def format_prompt(self, prompt: str, chat: bool) -> str:
        """With chat=True, wrap the prompt in the model's chat template (a system turn, the user turn,
        and the opening of the assistant turn) — what instruct models were trained to continue. A model
        without a template (random weights) gets the text as it is."""
        if chat and self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        return prompt

    def stream(self, prompt, sampling_params: SamplingParams | None = None, *, chat: bool = False,
               source: str = "req") -> Iterator[StreamEvent]:
        """One StreamEvent per generated token; the last one has finished=True. Stopping early (closing or
        dropping the iterator) aborts the request and frees its KV blocks. `prompt` is one prompt in any
        of generate()'s forms; chat=True wraps text in the chat template as the user's turn. `source`
        begins the request id ("api-12" for the HTTP server's), so views of the batch can tell who sent it."""
        if chat and not isinstance(prompt, str):
            raise TypeError(f"stream(chat=True) takes the user's text, got {type(prompt).__name__}")
        parsed = parse_prompt(self.format_prompt(prompt, chat) if chat else prompt, self.tokenizer,
                              self.config.vocab_size)
        params = sampling_params_for(sampling_params, 1)
        check_context([parsed], params, self.engine.max_model_len, "prompt")
        yield from self.loop.stream(parsed.token_ids, params[0], prompt_text=parsed.text, source=source)

    def abort(self, request_id: str) -> None:
        """End a running request at the next gap between steps and free its KV blocks; returns at once
        (callable from an event loop). Its stream simply ends."""
        self.loop.abort_soon(request_id)

    def close(self) -> None:
        """Stop the engine thread (requests still running are abandoned) and any worker processes."""
        self.loop.close()
        self.engine.close()

    # -- the shared engine, read between steps ----------------------------------------------------
    def trace_since(self, step: int = 0):
        """Step records with record.step >= step (the batching timeline), read between steps."""
        return self.loop.read(lambda: self.engine.trace.since(step))

    def num_steps(self) -> int:
        """Steps the engine has run so far: `trace_since(llm.num_steps())` later reads only newer ones."""
        return self.loop.read(lambda: self.engine.trace.num_steps)

    def allocator_state(self):
        """The KV block allocator right now (owners, ref counts, hashes, free order), read between steps."""
        return self.loop.read(self.engine.allocator_state)

    @property
    def stats(self):
        """The shared engine at its latest step (a LoopStats: totals, queues, KV blocks, the last step's
        batch), published once per step: any number of readers may look without waiting for the loop."""
        return self.loop.stats

    @property
    def alive(self) -> bool:
        """False once the engine's loop thread has stopped (`llm.loop.failure` says why)."""
        return self.loop.alive

    @property
    def device_name(self) -> str:
        """What a measurement ran on, in words: "cpu (2 threads)" or the GPU's name."""
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        n = torch.get_num_threads()
        return f"{self.device.type} ({n} thread{'' if n == 1 else 's'})"

    # -- private engines (engine/sandbox.py) ------------------------------------------------------
    def sandbox(self, num_kv_blocks: int = 16, max_num_seqs: int = 4, static_batching: bool = False,
                **engine_kwargs) -> Sandbox:
        """A private LLMEngine over this LLM's loaded weights, stepped by the caller:

            eng = llm.sandbox(num_kv_blocks=16, max_num_seqs=2, enable_prefix_caching=False)
            eng.add_request("a", llm.tokenizer.encode_ids("Hello"), SamplingParams(max_tokens=4))
            while eng.has_unfinished():
                events = eng.step()                      # one schedule + forward pass + sample
                eng.allocator_state().tables             # {"a": [its block ids]}; eng.trace: the steps
            eng.free()                                   # its KV memory goes at once

        `static_batching=True` gives it the static-batching scheduler; `engine_kwargs` are any other
        EngineConfig fields (block_size, enable_prefix_caching, preemption_mode, speculative_config,
        ...); the rest is copied from this LLM's configuration. A draft model named by
        speculative_config is loaded once and kept; its KV cache is the sandbox's own."""
        config = self._sandbox_config(num_kv_blocks, max_num_seqs, engine_kwargs)
        sandbox = Sandbox(self.model, config, tokenizer=self.tokenizer, static_batching=static_batching,
                          draft_model=self._drafts.for_config(config))
        self._sandboxes.add(sandbox)
        return sandbox

    def sandbox_kv_bytes(self, num_kv_blocks: int = 16, max_num_seqs: int = 4, static_batching: bool = False,
                         **engine_kwargs) -> int:
        """The bytes of KV cache `sandbox(...)` with the same arguments would allocate, without
        allocating: for owners with a budget."""
        return sandbox_kv_bytes(self._sandbox_config(num_kv_blocks, max_num_seqs, engine_kwargs),
                                self._kv_bytes_per_token())

    def sandboxes(self) -> list[Sandbox]:
        """The sandboxes made by `sandbox()` that still hold their KV cache (not freed, not collected)."""
        return [s for s in list(self._sandboxes) if not s.freed]

    def _sandbox_config(self, num_kv_blocks: int, max_num_seqs: int, engine_kwargs: dict) -> EngineConfig:
        return sandbox_config(self.engine_config, self._kv_bytes_per_token(), num_kv_blocks, max_num_seqs,
                              engine_kwargs)

    def _kv_bytes_per_token(self) -> int:
        return self.config.kv_bytes_per_token(torch.finfo(self.dtype).bits // 8)

    # -- the model itself, for the widgets --------------------------------------------------------
    def embedding_table(self) -> torch.Tensor:
        """The token embedding table, [vocab, hidden]: row i is token i's vector (the model's own
        weights, not a copy: read it, never write it)."""
        return self.model.embed.weight.detach()

    def rope(self, x: torch.Tensor, positions) -> torch.Tensor:
        """The model's own rotary position embedding: x [T, heads, head_dim] turned to `positions` [T]
        exactly as attention turns queries and keys (pair i is dimensions i and i + head_dim/2, speed
        rope_theta^(-2i/head_dim)). A negative position turns back."""
        from .model.llama import apply_rope, rope_cos_sin
        pos = torch.as_tensor(positions, device=x.device)
        cos, sin = rope_cos_sin(pos, self.config.head_dim, self.config.rope_theta)
        return apply_rope(x, cos, sin)

    def inspect(self, text: str, max_tokens: int = 256):
        """Per-layer tensors of one forward pass over `text` (see engine/introspect.py)."""
        from .introspect import inspect
        if self.parallel:
            raise ValueError("inspect() runs the whole model in this process; this LLM is split over processes")
        with self._lock:
            return inspect(self.model, self.tokenizer, text, max_tokens)


def _progress_bar(use_tqdm, total: int):
    """vLLM's use_tqdm: False for none, True for a tqdm bar on stderr (tqdm comes with transformers), or a
    tqdm-like class to build one."""
    if use_tqdm is False:
        return None
    if use_tqdm is True:
        from tqdm import tqdm as use_tqdm
    elif not callable(use_tqdm):
        raise TypeError(f"use_tqdm must be a bool or a tqdm-like class, got {type(use_tqdm).__name__}")
    return use_tqdm(total=total, desc="Processed prompts", file=sys.stderr, dynamic_ncols=True)
