"""StaticBatchScheduler: the baseline continuous batching is measured against, run fairly.

A static batch is formed only when the previous one is over, and lives and dies together:

    step   0    1    2    3    4   ...   40   41  ...  612
    A      ██ prefill chunks ██  · waits ·   decode decode ... done ─ pad ─ pad ... ─┐
    B      ·    ██ prefill ██ ·  · waits ·   decode decode ... decode decode ... done ├─ all released
    C      ·    ·    ·    ██ prefill ██      decode ... done ─ pad ─ pad ─ pad ... ─┘   at step 612

1. When nothing is running, up to max_num_seqs requests are admitted at once (swapped ones first,
   then waiting ones in arrival order), each with blocks for its whole prompt reserved now. The
   per-step token budget does not limit admission, so a long prompt does not run alone: it is
   prefilled in chunks over several steps, beside the other seats' prompts.
2. Nobody decodes until every seat's prompt is in the cache (a prompt that finished early has
   sampled its first token and waits).
3. Then every seat decodes one token per step. A seat whose request is done keeps computing junk
   ("padding", marked in the trace) until the longest request of the batch is done; then the whole
   batch is released at once and the next one is admitted.

Memory can still run short while decoding; the newest seat is preempted then, as in Scheduler (a
padding seat is simply released), and rejoins with the next batch.
"""
from __future__ import annotations

from .records import SchedulerOutput, SequenceOutput
from .scheduler import Scheduler
from .sequence import Sequence


class StaticBatchScheduler(Scheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cached_at_admission: dict[int, int] = {}   # for the trace of each seat's first chunk
        self._updating = False                           # the batch ends after the whole update, not mid-way

    def schedule(self) -> SchedulerOutput:
        out = self._new_output()
        if not self.running:
            self._admit_batch(out)
        budget = self.config.max_num_batched_tokens
        prefilling = [s for s in self.running.values() if s.needs_prefill]
        if not prefilling:
            self._schedule_running(out, budget)          # one decode per seat, padding included
            return out
        for seq in prefilling:                           # the batch fills all its seats first
            num_new = min(seq.num_uncomputed_tokens, budget)
            if num_new == 0 or (not self.config.enable_chunked_prefill and num_new < seq.num_uncomputed_tokens):
                break
            # the blocks were reserved at admission, so this only returns copy-on-write copies (none)
            out.blocks_to_copy += self.block_manager.allocate_slots(seq.seq_id, seq.num_computed_tokens, num_new)
            out.scheduled.append(self._request(seq, num_new, self._cached_at_admission.pop(seq.seq_id, 0)))
            budget -= num_new
        return out

    def _admit_batch(self, out: SchedulerOutput) -> None:
        bm, seats = self.block_manager, self.config.max_num_seqs
        while self.swapped and len(self.running) < seats and bm.can_swap_in(self.swapped[0].seq_id, self.swapped[0].num_tokens):
            seq = self.swapped.popleft()
            out.blocks_to_swap_in += bm.swap_in(seq.seq_id)
            out.swapped_in.append(seq.name)
            self._run(seq)
        while self.waiting and len(self.running) + 1 + self.waiting[0].num_samples_to_fork <= seats:
            seq = self.waiting[0]
            prefix = bm.find_cached_prefix(seq.token_ids)
            if not self._admit(seq, prefix, seq.num_tokens - prefix.num_tokens, out):
                break                                    # no blocks for this prompt: the batch is full
            self._cached_at_admission[seq.seq_id] = prefix.num_tokens

    def update_from_output(self, sched, result) -> list[SequenceOutput]:
        self._updating = True
        try:
            outputs = super().update_from_output(sched, result)
        finally:
            self._updating = False
        self._end_batch_if_done()
        return outputs

    def _append(self, seq: Sequence, tokens: list[int], parent: Sequence | None = None,
                logprobs: list | None = None) -> SequenceOutput | None:
        out = super()._append(seq, tokens, parent, logprobs)
        if seq.is_padding and seq.num_tokens >= self.max_model_len:
            self._release(seq)                           # padding cannot go past the context: let it go
        return out

    def finish(self, seq_id: int, reason: str = "abort") -> None:
        """A running sequence that is done (EOS, length, a stop string) keeps its seat: it computes
        padding until the batch ends. An abort, or a sequence not running, is freed at once."""
        seq = self.seqs.get(seq_id)
        if seq is None:
            return
        if reason != "abort" and seq_id in self.running:
            if seq.is_padding:                           # already done
                return
            seq.finish_reason = reason
            seq.num_output_tokens_final = len(seq.output_token_ids)
            if not self._updating:                       # a stop string, found after the update
                self._end_batch_if_done()
            return
        super().finish(seq_id, reason)
        self._cached_at_admission.pop(seq_id, None)
        self._end_batch_if_done()

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        if seq.is_padding:                               # a finished seat lost: it is simply over
            out.preempted.append((seq.name, "recompute"))
            self._release(seq)
            return
        super()._preempt(seq, out)

    def _end_batch_if_done(self) -> None:
        if self.running and all(s.is_padding for s in self.running.values()):
            for seq in list(self.running.values()):      # the batch is over: release every seat
                self._release(seq)
