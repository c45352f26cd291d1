"""The engine side of the KV-cache widget (chapter 12): one request in a private engine, stepped by hand.

    prompt ──prefill──► K/V of P tokens in the cache ──step──► + K/V of 1 token ──step──► + 1 …
                        (first token sampled)                  (one slot of one block)

Each view is read back from the private engine (``LLM.sandbox``), not recomputed beside it: the
block table is the allocator's, the new K and V are the numbers sitting in the cache at that
token's slot, and both timings are forward passes the engine ran and recorded in its trace — the
step with the cache (one new token) and, in a second private engine with prefix caching off, the
same sequence recomputed from scratch (what a loop without a cache must do for every token).

    slot of position p:  block_table[p // block_size], offset p % block_size
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from widgets.common.sandboxes import release, sandbox

MAX_PROMPT_TOKENS = 96
MAX_STEPS = 48
BLOCK_SIZE = 16
POOL_BLOCKS = -(-(MAX_PROMPT_TOKENS + MAX_STEPS + 2) // BLOCK_SIZE)     # room for the longest sequence
REQUEST = "kv"


@dataclass(slots=True)
class StepView:
    step: int                              # 0 = the prefill, then 1, 2, … one decode step each
    kind: str                              # "prefill" | "decode"
    num_prompt: int                        # prompt tokens (the rest were generated)
    new_positions: list[int]               # positions whose K/V this step wrote
    token_ids: list[int]                   # every token whose K/V is in the cache, in order
    pieces: list[str]                      # their text
    next_token: tuple[int, str]            # what this step sampled (fed in, and cached, next step)
    block_table: list[int]                 # the allocator's table for the request, logical order
    slots: list[tuple[int, int]]           # (block, offset) of every cached token
    pool_blocks: int
    block_size: int
    bytes_per_value: int                   # of the cache's dtype on this server
    new_k: list[list[float]]               # [layer][kv_head * head_dim + d]: the newest token's K
    new_v: list[list[float]]
    forward_ms: float                      # this step's forward pass, with the cache
    recompute_ms: float | None = None      # the whole sequence again without one (decode steps)
    recompute_token: int | None = None     # what the recomputation sampled: must equal next_token

    @property
    def num_cached(self) -> int:
        return len(self.token_ids)


class KVStepper:
    """Prefill `prompt`, then decode one token per `step()`. One thread at a time (a lock enforces it)."""

    def __init__(self, llm, prompt: str):
        from engine import SamplingParams
        ids = llm.tokenizer.encode(prompt).ids
        if not ids:
            raise ValueError("the prompt has no tokens")
        self.cut = len(ids) > MAX_PROMPT_TOKENS          # only the first MAX_PROMPT_TOKENS are used
        ids = ids[:MAX_PROMPT_TOKENS]
        self.llm, self.views = llm, []
        self._lock = threading.Lock()
        # one token more than the steps ever ask for: the request must never finish (and free its blocks)
        self._params = SamplingParams(temperature=0.0, max_tokens=MAX_STEPS + 2, ignore_eos=True)
        self.engine = sandbox(llm, num_kv_blocks=POOL_BLOCKS, max_num_seqs=1, block_size=BLOCK_SIZE,
                                  enable_prefix_caching=False)
        self._scratch = sandbox(llm, num_kv_blocks=POOL_BLOCKS, max_num_seqs=1, block_size=BLOCK_SIZE,
                                    enable_prefix_caching=False)
        self.engine.add_request(REQUEST, ids, self._params)
        self._ids = list(ids)              # tokens fed so far, plus the last one sampled (appended below)
        self._num_prompt = len(ids)

    @property
    def done(self) -> bool:
        return len(self.views) > MAX_STEPS

    def step(self, progress=lambda stage: None) -> StepView:
        """The prefill first, then one decode step per call. ``progress("recompute")`` once a decode
        step's forward pass is done and its recomputation (the slower half, seconds on a busy CPU) begins."""
        with self._lock, self.engine.hold():     # its page may close (and free it) mid-step
            if self.done:
                raise ValueError(f"the stepper stops after {MAX_STEPS} decode steps: restart it")
            before = len(self.views[-1].token_ids) if self.views else 0
            events = self.engine.step()
            record = self.engine.trace.since(self.engine.trace.num_steps - 1)[-1]
            token = events[0].token_id
            cached = self._ids[:before + sum(e.num_tokens for e in record.entries)]
            view = self._view(len(self.views), list(range(before, len(cached))), cached, token,
                              record.forward_s * 1e3)
            if view.kind == "decode":
                progress("recompute")
                view.recompute_ms, view.recompute_token = self._recompute(cached, len(self.views))
            self._ids.append(token)
            self.views.append(view)
            return view

    def _view(self, step: int, new_positions: list[int], cached: list[int], token: int, ms: float) -> StepView:
        state = self.engine.allocator_state()
        table, bs = state.tables[REQUEST], state.block_size
        slots = [(table[p // bs], p % bs) for p in range(len(cached))]
        k, v = self.engine.cached_kv(*slots[-1])           # what sits in the newest token's slot, every layer
        tok = self.llm.tokenizer
        return StepView(step, "prefill" if step == 0 else "decode", self._num_prompt, new_positions, list(cached),
                        [tok.decode([i]) for i in cached], (token, tok.decode([token])), list(table), slots,
                        state.num_blocks, bs, self.engine.kv_bytes_per_value, k.tolist(), v.tolist(), ms)

    def _recompute(self, ids: list[int], step: int) -> tuple[float, int]:
        """What a loop without a cache does for this token: every token so far through the model."""
        from engine import SamplingParams
        self._scratch.add_request(f"again-{step}", ids, SamplingParams(temperature=0.0, max_tokens=1))
        token = self._scratch.step()[0].token_id
        record = self._scratch.trace.since(self._scratch.trace.num_steps - 1)[-1]
        return record.forward_s * 1e3, token

    def close(self) -> None:
        """Free both private engines' KV memory now (their page's end would too)."""
        with self._lock:
            release(self.engine, "kv-cache")
            release(self._scratch, "kv-cache recompute")
