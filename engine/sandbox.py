"""Sandbox: a private LLMEngine over shared weights that can be freed at once, from any thread.

`llm.sandbox(...)` hands one to code that steps the engine's machinery itself (the widgets' KV-cache
stepper, page allocator, batching timeline). It shares the model's weight tensors (nothing is
copied) and nothing else: its own KV cache, block manager, scheduler and step trace, so nothing it
does shows in the shared engine and nothing other readers do shows in it. It has no loop thread:
the caller steps it, from one thread at a time. Its KV cache is the one thing it owns that costs
memory:

    sandbox_kv_bytes(config, ...)  what a sandbox of that config allocates, asked before making one
    sandbox.kv_bytes        the device pool plus the host swap space, allocated when it was made
    sandbox.free()          abort its requests, drop the KV tensors now (not when the object is
                            collected), refuse further steps; waits for a step in flight to end
    sandbox.freed           True afterwards; `llm.sandboxes()` lists only the ones not freed

Whoever owns a sandbox frees it when done: a widget's session ending frees every sandbox the
session made (widgets/common/sandboxes.py), so a closed tab leaves no KV memory behind.
"""
from __future__ import annotations

import dataclasses
import threading
from contextlib import contextmanager

from .config import EngineConfig
from .llm_engine import LLMEngine

MAX_SANDBOX_KV_BYTES = 64 * 2**20   # a sandbox's KV pool: 91 SmolLM2 blocks of 16 tokens in float32
MODEL_FIELDS = ("model", "device", "dtype", "random_weights", "seed", "num_kv_blocks", "kv_cache_bytes")


def sandbox_config(base: EngineConfig, kv_bytes_per_token: int, num_kv_blocks: int, max_num_seqs: int,
                   engine_kwargs: dict) -> EngineConfig:
    """A sandbox's configuration: `base` (the loaded model's) with its own pool of `num_kv_blocks`
    blocks (at most MAX_SANDBOX_KV_BYTES of them), eager steps, no speculation unless asked for, and
    any other EngineConfig fields from `engine_kwargs`; the fields that describe the loaded model
    cannot change."""
    fixed = sorted(set(engine_kwargs) & set(MODEL_FIELDS))
    if fixed:
        raise ValueError(f"{', '.join(fixed)} come from the loaded model; a sandbox cannot change them")
    block_size = engine_kwargs.get("block_size", base.block_size)
    pool_bytes = num_kv_blocks * block_size * kv_bytes_per_token
    if num_kv_blocks < 1 or pool_bytes > MAX_SANDBOX_KV_BYTES:
        raise ValueError(f"a sandbox's KV pool holds at least one block and at most "
                         f"{MAX_SANDBOX_KV_BYTES // 2**20} MiB; {num_kv_blocks} blocks would take "
                         f"{pool_bytes / 2**20:.0f} MiB")
    kwargs = {"swap_space_blocks": min(base.swap_space_blocks, num_kv_blocks), **engine_kwargs}
    # Eager: a sandbox steps a few sequences for a widget, and capturing CUDA graphs while the shared
    # engine's loop thread launches kernels would race with it.
    kwargs.setdefault("enforce_eager", True)
    kwargs.setdefault("speculative_config", None)      # speculation is opted into per sandbox
    return dataclasses.replace(base, num_kv_blocks=num_kv_blocks, kv_cache_bytes=None,
                               max_num_seqs=max_num_seqs, **kwargs)


def sandbox_kv_bytes(config: EngineConfig, kv_bytes_per_token: int) -> int:
    """The bytes of KV cache a sandbox with `config` allocates: its pool, plus its host swap space
    when preemption_mode="swap"."""
    swap = config.swap_space_blocks if config.preemption_mode == "swap" else 0
    return (config.num_kv_blocks + swap) * config.block_size * kv_bytes_per_token


class SandboxFreed(RuntimeError):
    """The sandbox was freed (its owner left) while something still used it."""


class Sandbox(LLMEngine):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.RLock()          # one step, request change or free at a time
        self.freed = False
        self._leaving = False                   # free() was called: refuse work before waiting for the lock
        cache = self.kv_cache
        self.kv_bytes = sum(t.numel() * t.element_size() for t in [*cache.kv, *cache.swap])

    @contextmanager
    def hold(self):
        """Keep the sandbox from being freed while the caller reads its state between steps (its KV
        cache, block tables); raises SandboxFreed if it already was."""
        with self._lock:
            self._check()
            yield self

    def _check(self) -> None:
        if self._leaving:
            raise SandboxFreed("this private engine was freed (its page closed)")

    def add_request(self, *args, **kwargs) -> list[str]:
        with self._lock:
            self._check()
            return super().add_request(*args, **kwargs)

    def step(self):
        with self._lock:
            self._check()
            return super().step()

    def abort(self, request_id: str) -> None:
        with self._lock:
            if not self.freed:
                super().abort(request_id)

    def free(self) -> None:
        """Abort every request and release the KV cache's memory now. Idempotent; blocks while a step
        runs on another thread, so call it off the event loop."""
        # Raised first, outside the lock: a thread stepping in a tight loop releases the lock and takes it
        # again before a waiting thread wakes (locks are not fair), so free() could wait for its last step.
        self._leaving = True
        with self._lock:
            if self.freed:
                return
            for rid in self.unfinished_request_ids():
                super().abort(rid)
            self.freed = True
            self.kv_cache.kv, self.kv_cache.swap = [], []     # the only references to the tensors
