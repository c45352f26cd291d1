"""LoopStats: the shared engine at its latest step, for dashboards: plain numbers, no engine objects.

EngineLoop publishes one after every step (and after commands that free blocks without a step, such
as an abort): any number of readers look at `llm.stats` without asking the loop thread anything.
The numbers come from one `LLMEngine.snapshot()` (queues, KV blocks, the last StepRecord), plus
running totals carried from the previous LoopStats.
"""
from __future__ import annotations

from dataclasses import dataclass

from .core.step_trace import StepRecord
from .llm_engine import LLMEngine


@dataclass(slots=True, frozen=True)
class LoopStats:
    """The shared engine at its latest step (or command), for dashboards: plain numbers, no engine objects."""
    steps: int = 0                        # steps run so far
    tokens: int = 0                       # tokens computed (prompt + generated) so far
    generated: int = 0                    # tokens generated so far
    preemptions: int = 0
    prefix_query_tokens: int = 0          # prompt tokens looked up in the prefix cache, and found there
    prefix_hit_tokens: int = 0
    num_running: int = 0
    num_waiting: int = 0
    num_swapped: int = 0
    num_blocks: int = 0
    num_free_blocks: int = 0
    budget: int = 0                       # the step's token budget (max_num_batched_tokens)
    tokens_per_s: float = 0.0             # generated tokens per second over the last few seconds
    last: StepRecord | None = None        # the latest step's record (its batch, its token use)
    updated_s: float = 0.0                # time.monotonic() of this snapshot

    @classmethod
    def of(cls, engine: LLMEngine, old: "LoopStats | None" = None, generated: int = 0,
           now: float = 0.0) -> "LoopStats":
        """The engine's snapshot, with the running totals of `old` carried on (the latest step added once)."""
        old, counts = old or cls(), engine.snapshot()
        last = counts.last
        new = last is not None and last is not old.last
        return cls(
            steps=counts.steps, tokens=old.tokens + (last.num_batched_tokens if new else 0),
            generated=old.generated + generated, preemptions=old.preemptions + (len(last.preempted) if new else 0),
            prefix_query_tokens=old.prefix_query_tokens + (last.prefix_query_tokens if new else 0),
            prefix_hit_tokens=old.prefix_hit_tokens + (last.prefix_hit_tokens if new else 0),
            num_running=counts.num_running, num_waiting=counts.num_waiting, num_swapped=counts.num_swapped,
            num_blocks=counts.num_blocks, num_free_blocks=counts.num_free_blocks, budget=counts.budget,
            tokens_per_s=old.tokens_per_s, last=last, updated_s=now)


class TokenRate:
    """Generated tokens per second over the last few seconds; 0 once the engine has been idle a while."""

    def __init__(self, window_s: float = 5.0, idle_s: float = 2.0):
        self.window_s, self.idle_s = window_s, idle_s
        self._recent: list[tuple[float, int]] = []     # (time, tokens generated so far) of the last steps

    def update(self, stats: LoopStats, stepped: bool) -> float:
        now = stats.updated_s
        if stepped:
            self._recent = [(t, g) for t, g in self._recent if now - t < self.window_s] + [(now, stats.generated)]
        t0, g0 = self._recent[0] if self._recent else (now, stats.generated)
        fresh = self._recent and self._recent[-1][0] > now - self.idle_s
        return (stats.generated - g0) / (now - t0) if fresh and now - t0 > 0.2 else 0.0
