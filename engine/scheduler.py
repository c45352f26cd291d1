"""Scheduler: which sequences run this step, and how many tokens each.

There is one token budget per step (max_num_batched_tokens) and no separate prefill/decode phases:

    budget 32 ─┬─ running first:  A decode 1 · B decode 1 · C prefill chunk 14 (of 40 left)
               └─ then waiting:   D prefill 16 (chunked: the rest of D waits for the next step)

1. Running sequences, oldest first, each asking for its uncomputed tokens (1 for a decode, a chunk
   for a prefill). If the KV cache has no block left for one, the *newest* running sequence is
   preempted — recompute mode drops its blocks (prefill redone later), swap mode copies them to
   the CPU swap space — until the allocation fits.
2. Swapped sequences come back, if nothing was preempted this step.
3. Waiting sequences are admitted in arrival order while budget, max_num_seqs and blocks allow;
   each first claims whatever prefix of its prompt is already in the prefix cache.

Static batching (for comparison only) admits new sequences only when the batch is empty.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import EngineConfig
from .sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int            # tokens whose K/V this step computes
    num_cached_tokens: int = 0     # prompt tokens taken from the prefix cache at admission this step
    kind: str = "prefill"          # "prefill" (many tokens, or a recompute) | "decode" (the last sampled token)


@dataclass(slots=True)
class SchedulerOutput:
    """The interface between the Scheduler and the ModelRunner: everything one step does."""
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)   # (gpu, cpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)    # (cpu, gpu)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)       # copy-on-write (src, dst)
    preempted: list[tuple[Sequence, str]] = field(default_factory=list)       # (sequence, "recompute" | "swap")
    swapped_in: list[Sequence] = field(default_factory=list)
    prefix_query_tokens: int = 0    # prompt tokens looked up in the prefix cache this step
    prefix_hit_tokens: int = 0      # ... and found there

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and not self.blocks_to_swap_out


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, static_batching: bool = False):
        self.config = config
        self.block_manager = block_manager
        self.static_batching = static_batching
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}      # seq_id -> sequence, in admission order
        self.swapped: deque[Sequence] = deque()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        bm = self.block_manager

        # 1. Running sequences, oldest first.
        for seq in list(self.running.values()):
            if budget == 0 or seq.seq_id not in self.running:   # out of budget, or already preempted below
                break
            num_new = min(seq.num_uncomputed_tokens, budget)
            if not self.config.enable_chunked_prefill and num_new < seq.num_uncomputed_tokens:
                continue
            while (copies := bm.allocate_slots(seq.seq_id, seq.num_computed_tokens, num_new)) is None:
                victim = self.running[next(reversed(self.running))]    # the newest running sequence
                self._preempt(victim, out)
                if victim is seq:
                    break
            if copies is None:
                break
            out.blocks_to_copy += copies
            out.scheduled.append(ScheduledSeq(seq, num_new, 0, self._kind(seq, num_new)))
            budget -= num_new
        if out.preempted:
            return out            # memory is short: admit nobody new this step

        if self.static_batching and self.running:
            return out            # static batching: the batch runs to its end before anyone joins

        # 2. Swapped sequences come back before anyone new is admitted.
        while self.swapped and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.swapped[0]
            num_new = min(seq.num_uncomputed_tokens, budget)
            if not bm.can_swap_in(seq.seq_id, seq.num_computed_tokens + num_new):
                break
            self.swapped.popleft()
            out.blocks_to_swap_in += bm.swap_in(seq.seq_id)
            out.blocks_to_copy += bm.allocate_slots(seq.seq_id, seq.num_computed_tokens, num_new)
            out.swapped_in.append(seq)
            self._run(seq)
            out.scheduled.append(ScheduledSeq(seq, num_new, 0, self._kind(seq, num_new)))
            budget -= num_new

        # 3. Waiting sequences, in arrival order (a preempted one is back at the front).
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if len(self.running) + 1 + seq.num_samples_to_fork > self.config.max_num_seqs:
                break
            prefix = bm.find_cached_prefix(seq.token_ids)
            num_new = seq.num_tokens - prefix.num_tokens
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    break
                num_new = budget
            copies = bm.allocate_slots(seq.seq_id, prefix.num_tokens, num_new, prefix)
            if copies is None:
                break
            self.waiting.popleft()
            seq.num_computed_tokens = prefix.num_tokens
            out.prefix_query_tokens += seq.num_tokens
            out.prefix_hit_tokens += prefix.num_tokens
            self._run(seq)
            out.scheduled.append(ScheduledSeq(seq, num_new, prefix.num_tokens, self._kind(seq, num_new)))
            budget -= num_new
        return out

    def _run(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.RUNNING
        self.running[seq.seq_id] = seq

    @staticmethod
    def _kind(seq: Sequence, num_new: int) -> str:
        return "decode" if num_new == 1 and seq.num_computed_tokens >= seq.num_prompt_tokens else "prefill"

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        del self.running[seq.seq_id]
        seq.num_preemptions += 1
        if self.config.preemption_mode == "swap":
            pairs = self.block_manager.swap_out(seq.seq_id)
            if pairs is not None:
                seq.status = SequenceStatus.SWAPPED
                self.swapped.append(seq)
                out.blocks_to_swap_out += pairs
                out.preempted.append((seq, "swap"))
                return
        # Recompute (or the swap space is full): forget the K/V; the tokens are kept, so the
        # sequence later "prefills" its prompt plus everything it had generated, and carries on.
        self.block_manager.free(seq.seq_id)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        out.preempted.append((seq, "recompute"))

    def add_running(self, seq: Sequence) -> None:
        """A forked sample joins the batch right after its parent (its blocks are shared already)."""
        self._run(seq)

    def finish(self, seq: Sequence) -> None:
        """Remove a finished or aborted sequence from whichever queue holds it and free its blocks."""
        if self.running.pop(seq.seq_id, None) is None:
            for queue in (self.waiting, self.swapped):
                if seq in queue:
                    queue.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.free(seq.seq_id)
