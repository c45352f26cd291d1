"""The step trace: one StepRecord per engine step, kept in a bounded ring buffer.

This is what the batching-timeline widgets draw: which request ran in which step, as a prefill
chunk or a decode, how many tokens the step batched, who was preempted, and what happened to the
KV blocks. Records are plain data; the newest `capacity` steps are kept, older ones dropped. The
benchmarks read the same records (and the outputs), never the scheduler's queues.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .records import VerifiedDraft


@dataclass(slots=True)
class ScheduledEntry:
    request_id: str
    seq_id: int
    kind: str                   # "prefill" | "decode" (| "verify" for speculative decoding)
    num_tokens: int             # tokens computed for it in this step
    num_computed_before: int    # tokens it already had in the KV cache when the step began
    num_cached_tokens: int = 0  # of those, taken from the prefix cache at admission this step
    padding: bool = False       # static batching: a finished request computing junk to keep its seat
    num_draft_tokens: int = 0   # speculative decoding: drafts verified in this step (beside num_tokens)
    num_accepted_tokens: int = 0   # ... and kept
    verified: VerifiedDraft | None = None   # the drafts, the verdict, p and q (a verify row with drafts)

    @classmethod
    def of(cls, r, verified: VerifiedDraft | None = None) -> "ScheduledEntry":
        """The trace's view of one ScheduledRequest. A verify row that got no drafts (a lookup found
        nothing, or no slot was left) was a plain decode, and says so."""
        drafts = verified.num_drafts if verified is not None else len(r.draft_token_ids)
        kind = "decode" if r.kind == "verify" and not drafts else r.kind
        return cls(r.request_id, r.seq_id, kind, r.num_tokens, r.start_pos, r.num_cached_tokens, r.padding,
                   drafts, verified.num_accepted if verified is not None else 0, verified)


@dataclass(slots=True)
class StepRecord:
    """One step. Where its time went, as host wall-clock phases that add up to the step (wall_s):

        schedule ─ prepare inputs ─ forward ─ sample ─ update/outputs
                   (swaps, copies,  (on a GPU:  (on a GPU: launches, then
                    one H2D copy)    launches)   waits for the device)

    On a GPU the forward only queues kernels, so its host time is launch time, and the wait shows up
    in sample; gpu_forward_s / gpu_sample_s (CUDA events) say how long the device itself worked.
    """
    step: int
    start_s: float                       # time.perf_counter() when the step began
    schedule_s: float                    # wall time of each phase, seconds
    forward_s: float
    sample_s: float
    output_s: float = 0.0                # update_from_output and the output processor
    entries: list[ScheduledEntry] = field(default_factory=list)   # the token counts below add these up
    propose_s: float = 0.0               # speculative decoding: the proposer's drafting, before the forward pass
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
    prepare_s: float = 0.0               # block swaps/copies and building the inputs (host)
    gpu_forward_s: float | None = None   # device time of the forward pass (CUDA events; None on CPU)
    gpu_sample_s: float | None = None    # device time of sampling
    cuda_graph_batch: int = 0            # the captured batch size replayed (0: eager)
    parallel: object | None = None       # tensor/pipeline parallel: each rank's communication and busy
    #                                      intervals this step (engine/distributed/stats.py ParallelStep)

    # -- the batch's tokens, from its entries ----------------------------------------------------
    @property
    def num_batched_tokens(self) -> int:
        return sum(e.num_tokens + e.num_draft_tokens for e in self.entries)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(e.num_tokens for e in self.entries if e.kind == "prefill")

    @property
    def num_decode_tokens(self) -> int:
        return sum(e.num_tokens for e in self.entries if e.kind == "decode")

    @property
    def num_padding_tokens(self) -> int:
        """Static batching: decodes of finished requests (junk that keeps their seats)."""
        return sum(e.num_tokens for e in self.entries if e.padding)

    @property
    def num_verify_tokens(self) -> int:
        """Speculative decoding: the newest tokens and the drafts of verify rows."""
        return sum(e.num_tokens + e.num_draft_tokens for e in self.entries if e.kind == "verify")

    @property
    def num_draft_tokens(self) -> int:
        """Drafts verified this step ..."""
        return sum(e.num_draft_tokens for e in self.entries if e.kind == "verify")

    @property
    def num_accepted_tokens(self) -> int:
        """... and kept."""
        return sum(e.num_accepted_tokens for e in self.entries if e.kind == "verify")

    # -- where the time went ------------------------------------------------------------------------
    @property
    def wall_s(self) -> float:
        return self.schedule_s + self.prepare_s + self.propose_s + self.forward_s + self.sample_s + self.output_s

    def breakdown_ms(self) -> dict[str, float | None]:
        """The step's phases in milliseconds, for the chapters' where-does-the-time-go figures."""
        ms = lambda s: None if s is None else round(s * 1e3, 4)  # noqa: E731
        return {"schedule": ms(self.schedule_s), "propose": ms(self.propose_s), "prepare_inputs": ms(self.prepare_s),
                "forward": ms(self.forward_s), "sample": ms(self.sample_s), "update_outputs": ms(self.output_s),
                "wall": ms(self.wall_s), "gpu_forward": ms(self.gpu_forward_s), "gpu_sample": ms(self.gpu_sample_s)}

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

    @property
    def last(self) -> StepRecord | None:
        return self.records[-1] if self.records else None

    def since(self, step: int) -> list[StepRecord]:
        """Records with record.step >= step (what a widget polling for new steps asks for)."""
        return [r for r in list(self.records) if r.step >= step]

    def clear(self) -> None:
        self.records.clear()
