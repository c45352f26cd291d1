"""`LLM`: the front door. Load a model once, then generate or stream text.

    llm = LLM()                                    # the embedded SmolLM2-135M-Instruct
    llm.generate(["The capital of France is"], SamplingParams(temperature=0.0, max_tokens=16))
    for event in llm.stream("Why is the sky blue?", SamplingParams(max_tokens=64), chat=True): ...

Inside, one LLMEngine (paged KV cache, continuous batching, prefix caching, chunked prefill)
steps on a background thread (EngineLoop). Every generate/stream call, from any thread, submits
to it, so concurrent callers share steps; `llm.engine` is that engine, for its trace and
allocator state. The unpaged generate loop (engine/unpaged.py) stays as the test oracle.
"""
from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch

from .config import EngineConfig, ModelConfig
from .model.llama import Llama
from .engine_loop import EngineLoop
from .llm_engine import LLMEngine
from .outputs import RequestOutput, StreamEvent
from .sandbox import Sandbox
from .loader.progress import log
from .sampling_params import SamplingParams
from .loader.tokenizer import TextTokenizer, TokenizerRegistry, byte_tokenizer
from .loader.weights import load_weights


MAX_SANDBOX_KV_BYTES = 64 * 2**20   # a sandbox's KV pool: 91 SmolLM2 blocks of 16 tokens in float32
_MODEL_FIELDS = ("model", "device", "dtype", "random_weights", "seed", "num_kv_blocks", "kv_cache_bytes")


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
    """A Llama with real weights from a GGUF file or Hugging Face folder (None = the embedded default)."""
    loaded = load_weights(model)
    llama = Llama(loaded.config)
    missing, unexpected = llama.load_state_dict(loaded.state_dict, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise RuntimeError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
    return llama, loaded.tokenizer, loaded.source


def load_model(cfg: EngineConfig) -> tuple[Llama, TextTokenizer, Path | None]:
    """The whole model in float32 on the CPU, its tokenizer, and where the numbers came from."""
    if cfg.random_weights:
        return Llama.random(ModelConfig(), seed=cfg.seed), byte_tokenizer(), None
    return load_llama(cfg.model)


def whole_model(cfg: EngineConfig) -> Llama:
    """What each worker of a parallel engine builds before cutting out its shard."""
    return load_model(cfg)[0]


def build_model(cfg: EngineConfig) -> tuple[Llama, TextTokenizer, torch.device, torch.dtype, Path | None]:
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    model, tokenizer, source = load_model(cfg)
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)  # inference only
    log(f"model {model.config.name} ready on {device} in {str(dtype).removeprefix('torch.')}")
    return model, tokenizer, device, dtype, source


class LLM:
    def __init__(self, model: str | None = None, device: str = "auto", dtype=None,
                 random_weights: bool = False, **engine_kwargs):
        self.engine_config = EngineConfig(model=model, device=device, dtype=dtype,
                                          random_weights=random_weights, **engine_kwargs)
        cfg = self.engine_config
        self.parallel = cfg.tensor_parallel_size * cfg.pipeline_parallel_size > 1
        self._drafts: dict[str, Llama] = {}
        if self.parallel and cfg.speculative_config is not None:
            raise ValueError("speculative_config with tensor_parallel_size/pipeline_parallel_size > 1 is not "
                             "supported yet: speculate on one process, or split without speculating")
        if self.parallel:   # this process is rank 0; the other ranks are processes it starts (ch. 19)
            from functools import partial

            from .distributed import parallel_engine
            model, self.tokenizer, self.source = load_model(cfg)
            self.device = resolve_device(cfg.device)
            self.dtype = resolve_dtype(cfg.dtype, self.device)
            self.engine = parallel_engine(model, partial(whole_model, cfg), cfg, self.device, self.dtype,
                                          tokenizer=self.tokenizer)
            self.model = self.engine.model        # rank 0's shard
        else:
            self.model, self.tokenizer, self.device, self.dtype, self.source = build_model(cfg)
            self.engine = LLMEngine(self.model, cfg, tokenizer=self.tokenizer, draft_model=self._draft_for(cfg))
        self.config: ModelConfig = self.model.config
        self.tokenizers = TokenizerRegistry(self.tokenizer)
        self.loop = EngineLoop(self.engine)
        self._lock = threading.Lock()     # inspect(): one reference pass at a time
        self._sandboxes: weakref.WeakSet[Sandbox] = weakref.WeakSet()

    # -- prompts -------------------------------------------------------------------------------
    def format_prompt(self, prompt: str, chat: bool) -> str:
        """With chat=True, wrap the prompt in the model's chat template (a system turn, the user turn,
        and the opening of the assistant turn) — what instruct models were trained to continue."""
        if chat and self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}])
        return prompt

    def _prompt_ids(self, prompt: str | list[int], params: SamplingParams, chat: bool) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode_ids(self.format_prompt(prompt, chat))
        else:                  # token ids, used as given (vLLM's TokensPrompt): exact prompt lengths
            ids = [int(i) for i in prompt]
            if chat:
                raise ValueError("chat=True needs a text prompt: the template is applied to text")
            if any(not 0 <= i < self.config.vocab_size for i in ids):
                raise ValueError(f"token ids must be in [0, {self.config.vocab_size})")
        if not ids:
            raise ValueError("the prompt is empty")
        limit = self.engine.max_model_len
        if len(ids) + params.max_tokens > limit:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                             f"the engine's context of {limit} tokens")
        return ids

    # -- generation ----------------------------------------------------------------------------
    def stream(self, prompt: str | list[int], params: SamplingParams | None = None,
               chat: bool = False) -> Iterator[StreamEvent]:
        """One StreamEvent per generated token; the last one has finished=True. Stopping early
        (closing or dropping the iterator) aborts the request and frees its KV blocks.
        `prompt` is text, or a list of token ids used as they are (no chat template)."""
        params = params or SamplingParams()
        ids = self._prompt_ids(prompt, params, chat)
        yield from self.loop.stream(ids, params, prompt_text=prompt if isinstance(prompt, str) else None)

    def generate(self, prompts: str | list[str], params: SamplingParams | None = None,
                 chat: bool = False) -> list[RequestOutput]:
        """All prompts are submitted together and batched; outputs come back in prompt order
        (n outputs per prompt when params.n > 1)."""
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        params = params or SamplingParams()
        return self.loop.generate([(self._prompt_ids(p, params, chat), p) for p in prompts], params)

    def abort(self, request_id: str) -> None:
        """End a running request at the next gap between steps and free its KV blocks; returns at once
        (callable from an event loop). Its stream simply ends."""
        self.loop.abort_soon(request_id)

    def trace_since(self, step: int = 0):
        """Step records with record.step >= step (the batching timeline), read between steps."""
        return self.loop.read(lambda: self.engine.trace.since(step))

    def num_steps(self) -> int:
        """Steps the engine has run so far: `trace_since(llm.num_steps())` later reads only newer ones."""
        return self.loop.read(lambda: self.engine.trace.num_steps)

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

    def embedding_table(self) -> torch.Tensor:
        """The token embedding table, [vocab, hidden]: row i is token i's vector (the model's own
        weights, not a copy: read it, never write it)."""
        return self.model.embed.weight.detach()

    def allocator_state(self):
        """The KV block allocator right now (owners, ref counts, hashes, free order), read between steps."""
        return self.loop.read(self.engine.allocator_state)

    # -- private engines -------------------------------------------------------------------------
    def sandbox(self, num_kv_blocks: int = 16, max_num_seqs: int = 4, static_batching: bool = False,
                **engine_kwargs) -> Sandbox:
        """A private LLMEngine over this LLM's loaded weights, for code that drives the engine's own
        machinery one step at a time (the widgets' KV-cache stepper, page allocator, batching timeline):

            eng = llm.sandbox(num_kv_blocks=16, max_num_seqs=2, enable_prefix_caching=False)
            eng.add_request("a", llm.tokenizer.encode_ids("Hello"), SamplingParams(max_tokens=4))
            while eng.has_unfinished():
                events = eng.step()                      # one schedule + forward pass + sample
                eng.allocator_state().tables             # {"a": [its block ids]}; eng.trace: the steps

        It shares the model's weight tensors (nothing is copied) and nothing else: its own KV cache of
        `num_kv_blocks` blocks (at most MAX_SANDBOX_KV_BYTES of them), block manager, scheduler and step
        trace, so nothing it does shows in the shared engine and nothing other readers do shows in it.
        It has no loop thread: the caller steps it, from one thread at a time, and calls `free()` when
        done (its KV memory, `kv_bytes`, goes at once; engine/sandbox.py). `static_batching=True` gives
        it the static-batching scheduler; `engine_kwargs` are any other EngineConfig fields (block_size, max_num_batched_tokens,
        enable_prefix_caching, enable_chunked_prefill, preemption_mode, swap_space_blocks, max_model_len,
        speculative_config, ...); the rest is copied from this LLM's configuration. A draft model named by
        speculative_config is loaded once and kept (the target's own file is the target itself, not a
        second copy); its KV cache is the sandbox's own, beside the target's."""
        config = self._sandbox_config(num_kv_blocks, max_num_seqs, engine_kwargs)
        sandbox = Sandbox(self.model, config, tokenizer=self.tokenizer, static_batching=static_batching,
                          draft_model=self._draft_for(config))
        self._sandboxes.add(sandbox)
        return sandbox

    def sandbox_kv_bytes(self, num_kv_blocks: int = 16, max_num_seqs: int = 4, static_batching: bool = False,
                         **engine_kwargs) -> int:
        """The bytes of KV cache `sandbox(...)` with the same arguments would allocate (its pool, plus
        its host swap space when preemption_mode="swap"), without allocating: for owners with a budget."""
        config = self._sandbox_config(num_kv_blocks, max_num_seqs, engine_kwargs)
        swap = config.swap_space_blocks if config.preemption_mode == "swap" else 0
        return (num_kv_blocks + swap) * config.block_size * self._kv_bytes_per_token()

    def sandboxes(self) -> list[Sandbox]:
        """The sandboxes made by `sandbox()` that still hold their KV cache (not freed, not collected)."""
        return [s for s in list(self._sandboxes) if not s.freed]

    def _kv_bytes_per_token(self) -> int:
        return self.config.kv_bytes_per_token(torch.finfo(self.dtype).bits // 8)

    def _sandbox_config(self, num_kv_blocks: int, max_num_seqs: int, engine_kwargs: dict) -> EngineConfig:
        fixed = sorted(set(engine_kwargs) & set(_MODEL_FIELDS))
        if fixed:
            raise ValueError(f"{', '.join(fixed)} come from the loaded model; a sandbox cannot change them")
        block_size = engine_kwargs.get("block_size", self.engine_config.block_size)
        pool_bytes = num_kv_blocks * block_size * self._kv_bytes_per_token()
        if num_kv_blocks < 1 or pool_bytes > MAX_SANDBOX_KV_BYTES:
            raise ValueError(f"a sandbox's KV pool holds at least one block and at most "
                             f"{MAX_SANDBOX_KV_BYTES // 2**20} MiB; {num_kv_blocks} blocks would take "
                             f"{pool_bytes / 2**20:.0f} MiB")
        kwargs = {"swap_space_blocks": min(self.engine_config.swap_space_blocks, num_kv_blocks), **engine_kwargs}
        # Eager: a sandbox steps a few sequences for a widget, and capturing CUDA graphs while the shared
        # engine's loop thread launches kernels would race with it.
        kwargs.setdefault("enforce_eager", True)
        kwargs.setdefault("speculative_config", None)      # speculation is opted into per sandbox
        return dataclasses.replace(self.engine_config, num_kv_blocks=num_kv_blocks, kv_cache_bytes=None,
                                   max_num_seqs=max_num_seqs, **kwargs)

    def _draft_for(self, config: EngineConfig) -> Llama | None:
        """The draft model a draft_model speculative config names, loaded once, on this LLM's device."""
        spec = config.speculative_config
        if spec is None or spec.method != "draft_model":
            return None
        key = str(Path(spec.model).expanduser().resolve())
        if self.source is not None and key == str(Path(self.source).resolve()):
            return self.model                       # the target drafting for itself: a perfect, costly draft
        if key not in self._drafts:
            draft, tokenizer, _ = load_llama(spec.model)
            probe = "def f(x):\n    return x + 1  # Hello, world!"
            if tokenizer.encode_ids(probe) != self.tokenizer.encode_ids(probe):
                raise ValueError(f"speculative_config: 'model' {spec.model} does not use the target's tokenizer")
            self._drafts[key] = draft.to(device=self.device, dtype=self.dtype).eval().requires_grad_(False)
        return self._drafts[key]

    def close(self) -> None:
        """Stop the engine thread (requests still running are abandoned) and any worker processes."""
        self.loop.close()
        self.engine.close()

    def rope(self, x: torch.Tensor, positions) -> torch.Tensor:
        """The model's own rotary position embedding: x [T, heads, head_dim] turned to `positions` [T]
        exactly as attention turns queries and keys (pair i is dimensions i and i + head_dim/2, speed
        rope_theta^(-2i/head_dim)). A negative position turns back. For the RoPE widget."""
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
