"""The step trace: one StepRecord per engine step, kept in a bounded ring buffer.

This is what the batching-timeline widgets draw: which request ran in which step, as a prefill
chunk or a decode, how many tokens the step batched, who was preempted, and what happened to the
KV blocks. Records are plain data; the newest `capacity` steps are kept, older ones dropped.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(slots=True)
class ScheduledEntry:
    request_id: str
    seq_id: int
    kind: str                   # "prefill" | "decode" (| "verify" for speculative decoding)
    num_tokens: int             # tokens computed for it in this step
    num_computed_before: int    # tokens it already had in the KV cache when the step began
    num_cached_tokens: int = 0  # of those, taken from the prefix cache at admission this step


@dataclass(slots=True)
class StepRecord:
    step: int
    start_s: float                       # time.perf_counter() when the step began
    schedule_s: float                    # wall time of each phase, seconds
    forward_s: float
    sample_s: float
    entries: list[ScheduledEntry] = field(default_factory=list)
    num_batched_tokens: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    preempted: list[tuple[str, str]] = field(default_factory=list)   # (request_id, "recompute" | "swap")
    swapped_in: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    blocks_allocated: int = 0            # fresh blocks handed out this step
    blocks_freed: int = 0                # blocks whose last owner let go this step
    blocks_shared: int = 0               # extra owners gained: prefix-cache hits and forks
    blocks_copied: int = 0               # copy-on-write copies
    blocks_evicted: int = 0              # cached blocks reused for something else
    num_free_blocks: int = 0
    num_blocks: int = 0
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    num_running: int = 0
    num_waiting: int = 0
    num_swapped: int = 0

    @property
    def wall_s(self) -> float:
        return self.schedule_s + self.forward_s + self.sample_s

    @property
    def kv_usage(self) -> float:
        return 1.0 - self.num_free_blocks / self.num_blocks if self.num_blocks else 0.0


class StepTrace:
    def __init__(self, capacity: int = 4096):
        self.records: deque[StepRecord] = deque(maxlen=capacity)
        self.num_steps = 0           # steps ever recorded, including those dropped from the buffer

    def append(self, record: StepRecord) -> None:
        self.records.append(record)
        self.num_steps += 1

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(list(self.records))

    def since(self, step: int) -> list[StepRecord]:
        """Records with record.step >= step (what a widget polling for new steps asks for)."""
        return [r for r in list(self.records) if r.step >= step]

    def for_request(self, request_id: str) -> list[tuple[int, ScheduledEntry]]:
        return [(r.step, e) for r in list(self.records) for e in r.entries if e.request_id == request_id]

    def clear(self) -> None:
        self.records.clear()
