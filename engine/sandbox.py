"""Sandbox: a private LLMEngine over shared weights that can be freed at once, from any thread.

`llm.sandbox(...)` hands one to code that steps the engine's machinery itself (the widgets' KV-cache
stepper, page allocator, batching timeline). Its KV cache is the one thing it owns that costs memory:

    sandbox.kv_bytes        the device pool plus the host swap space, allocated when it was made
    sandbox.free()          abort its requests, drop the KV tensors now (not when the object is
                            collected), refuse further steps; waits for a step in flight to end
    sandbox.freed           True afterwards; `llm.sandboxes()` lists only the ones not freed

Whoever owns a sandbox frees it when done: a widget's session ending frees every sandbox the
session made (widgets/common/sandboxes.py), so a closed tab leaves no KV memory behind.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from .llm_engine import LLMEngine


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
