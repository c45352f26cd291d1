"""Scheduler: which sequences run this step and how many tokens each; afterwards, the one place
where their state moves on.

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

schedule() hands the ModelRunner a SchedulerOutput (records.py). After the forward pass,
update_from_output() is the only code that changes a sequence: it advances num_computed_tokens,
appends the sampled tokens, caches the blocks that became full, forks the n - 1 siblings of a
finished prompt, and ends the sequences that hit EOS, max_tokens or max_model_len (freeing their
blocks).

Speculative decoding (chapter 18) asks two things of the scheduler. Before the step: a sequence in
decode becomes a "verify" row with lookahead slots for up to k drafts (fewer near max_tokens,
max_model_len or the end of the budget; none, and a plain decode, if memory is short), and the
budget pays for 1 + k tokens. After it, the rollback: only the accepted drafts advance
num_computed_tokens, only blocks full of verified tokens enter the prefix cache, and blocks that
held nothing but rejected drafts go back to the pool.

Static batching, the baseline the serving chapters compare against, is a subclass (static_batching.py).
"""
from __future__ import annotations

import itertools
from collections import deque

from ..config import EngineConfig
from .block_manager import BlockManager, PrefixHit
from .records import FinishedSequence, ModelRunnerOutput, ScheduledRequest, SchedulerOutput, SequenceOutput
from .sequence import Sequence, SequenceStatus


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, max_model_len: int,
                 eos_token_ids: frozenset[int] = frozenset()):
        self.config, self.block_manager = config, block_manager
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids
        spec = config.speculative_config
        self.num_speculative_tokens = spec.num_speculative_tokens if spec else 0   # k: drafts per verify row
        self.spec_context = spec.context_needed if spec else 0   # latest tokens the proposer reads (None = all)
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}      # seq_id -> sequence, in admission order
        self.swapped: deque[Sequence] = deque()
        self.seqs: dict[int, Sequence] = {}         # every unfinished sequence, wherever it is
        self._seq_ids = itertools.count()
        self._finished: list[FinishedSequence] = []     # for the output processor (take_finished)
        self._finished_ids: list[int] = []              # for the runner, in the next SchedulerOutput

    def new_seq_id(self) -> int:
        return next(self._seq_ids)

    def add(self, seq: Sequence) -> None:
        self.seqs[seq.seq_id] = seq
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    # -- schedule ------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = self._new_output()
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if out.preempted:
            return out            # memory is short: admit nobody new this step
        budget = self._schedule_swapped(out, budget)
        self._schedule_waiting(out, budget)
        return out

    def _new_output(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_seq_ids=self._finished_ids)
        self._finished_ids = []
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Running sequences, oldest first; the newest is preempted while blocks run short."""
        bm = self.block_manager
        for seq in list(self.running.values()):
            if budget == 0 or seq.seq_id not in self.running:   # out of budget, or already preempted below
                break
            num_new = min(seq.num_uncomputed_tokens, budget)
            if not self.config.enable_chunked_prefill and num_new < seq.num_uncomputed_tokens:
                continue
            lookahead = self._num_lookahead(seq, budget)
            while (copies := bm.allocate_slots(seq.seq_id, seq.num_computed_tokens, num_new,
                                               num_lookahead_tokens=lookahead or 0)) is None:
                if lookahead:
                    lookahead = None              # memory is short: decode plainly before preempting anyone
                    continue
                victim = self.running[next(reversed(self.running))]    # the newest running sequence
                self._preempt(victim, out)
                if victim is seq:
                    break
            if copies is None:
                break
            out.blocks_to_copy += copies
            out.scheduled.append(self._request(seq, num_new, lookahead=lookahead))
            budget -= num_new + (lookahead or 0)
        return budget

    def _num_lookahead(self, seq: Sequence, budget: int) -> int | None:
        """Drafts a sequence may verify this step (None: not a verify row).

        Only a sequence in decode speculates (its one uncomputed token is the newest sample). A step
        emits at most k + 1 tokens, so k stops one short of max_tokens and of max_model_len, and the
        1 + k tokens must fit the budget. 0 is still a verify row: a draft model catches up on it."""
        k = self.num_speculative_tokens
        if seq.params.num_speculative_tokens is not None:
            k = min(k, seq.params.num_speculative_tokens)
        if k <= 0 or seq.is_padding or seq.needs_prefill or seq.params.adjusts_logits or seq.params.logprobs is not None:
            return None            # (penalties, biases and logprobs are computed on plain decode rows only)
        left = min(seq.max_tokens - seq.num_output_tokens, self.max_model_len - seq.num_tokens)
        return max(0, min(k, left - 1, budget - 1))

    def _schedule_swapped(self, out: SchedulerOutput, budget: int) -> int:
        """Swapped sequences come back before anyone new is admitted."""
        bm = self.block_manager
        while self.swapped and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.swapped[0]
            num_new = min(seq.num_uncomputed_tokens, budget)
            if not bm.can_swap_in(seq.seq_id, seq.num_computed_tokens + num_new):
                break
            self.swapped.popleft()
            out.blocks_to_swap_in += bm.swap_in(seq.seq_id)
            out.blocks_to_copy += bm.allocate_slots(seq.seq_id, seq.num_computed_tokens, num_new)
            out.swapped_in.append(seq.name)
            self._run(seq)
            out.scheduled.append(self._request(seq, num_new))
            budget -= num_new
        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Waiting sequences, in arrival order (a preempted one is back at the front)."""
        while self.waiting and budget > 0:
            seq = self.waiting[0]
            if len(self.running) + 1 + seq.num_samples_to_fork > self.config.max_num_seqs:
                break
            prefix = self.block_manager.find_cached_prefix(seq.token_ids)
            if seq.params.prompt_logprobs is not None:     # every prompt token's logits are wanted: compute all
                prefix = PrefixHit([], [], self.block_manager.block_size)
            num_new = seq.num_tokens - prefix.num_tokens
            if num_new > budget:
                if not self.config.enable_chunked_prefill:
                    break
                num_new = budget
            if not self._admit(seq, prefix, num_new, out):
                break
            out.scheduled.append(self._request(seq, num_new, prefix.num_tokens))
            budget -= num_new

    def _admit(self, seq: Sequence, prefix, num_new: int, out: SchedulerOutput) -> bool:
        """Claim the cached prefix and blocks for num_new more tokens; False if they do not fit."""
        copies = self.block_manager.allocate_slots(seq.seq_id, prefix.num_tokens, num_new, prefix)
        if copies is None:
            return False
        self.waiting.popleft()
        seq.num_computed_tokens = prefix.num_tokens
        out.prefix_query_tokens += seq.num_tokens
        out.prefix_hit_tokens += prefix.num_tokens
        self._run(seq)
        return True

    def _request(self, seq: Sequence, num_new: int, num_cached: int = 0, lookahead: int | None = None) -> ScheduledRequest:
        """The record of one sequence's share of the step: plain copies, nothing the runner could mutate."""
        start = seq.num_computed_tokens
        sample = start + num_new == seq.num_tokens        # reaches the newest token: sample the next
        forks = [self.new_seq_id() for _ in range(seq.num_samples_to_fork)] if sample else []
        kind = "decode" if num_new == 1 and start >= seq.num_prompt_tokens else "prefill"
        context = []
        if lookahead is not None:
            kind = "verify"
            context = list(seq.token_ids if self.spec_context is None else seq.token_ids[-self.spec_context:])
        req = ScheduledRequest(
            seq.seq_id, seq.name, kind, seq.token_ids[start:start + num_new], start,
            list(self.block_manager.block_ids(seq.seq_id)), num_cached, sample,
            seq.params if sample else None, seq.sample_index, seq.num_output_tokens, forks,
            padding=seq.is_padding, num_lookahead_tokens=lookahead or 0, context_token_ids=context, seed=seq.seed)
        p = seq.params
        if sample:                                   # what the sampler reads beyond this step's logits
            if seq.num_output_tokens < p.min_tokens:
                req.banned_token_ids = sorted(set(p.stop_token_ids) | (set() if p.ignore_eos else self.eos_token_ids))
            if p.repetition_penalty != 1.0:
                req.prompt_token_ids = list(seq.prompt_token_ids)
            if p.adjusts_logits:
                req.output_token_ids = list(seq.output_token_ids)
        if p.prompt_logprobs is not None and start < seq.num_prompt_tokens - 1:
            # row j of the chunk (position start + j) predicts the prompt's token start + j + 1
            last = min(start + num_new, seq.num_prompt_tokens - 1)
            req.prompt_logprobs, req.prompt_logprob_targets = p.prompt_logprobs, seq.prompt_token_ids[start + 1:last + 1]
        return req

    def _run(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.RUNNING
        self.running[seq.seq_id] = seq

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        del self.running[seq.seq_id]
        seq.num_preemptions += 1
        if self.config.preemption_mode == "swap":
            pairs = self.block_manager.swap_out(seq.seq_id)
            if pairs is not None:
                seq.status = SequenceStatus.SWAPPED
                self.swapped.append(seq)
                out.blocks_to_swap_out += pairs
                out.preempted.append((seq.name, "swap"))
                return
        # Recompute (or the swap space is full): forget the K/V; the tokens are kept, so the
        # sequence later "prefills" its prompt plus everything it had generated, and carries on.
        self.block_manager.free(seq.seq_id)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        out.preempted.append((seq.name, "recompute"))

    # -- update --------------------------------------------------------------------------------
    def update_from_output(self, sched: SchedulerOutput, result: ModelRunnerOutput) -> list[SequenceOutput]:
        """Move every scheduled sequence on by what the step computed and sampled."""
        new_tokens = dict(zip(result.seq_ids, result.sampled_token_ids))
        logprobs = dict(zip(result.seq_ids, result.sampled_logprobs or []))
        verified = {v.seq_id: v for v in result.verified}
        outputs = []
        for req in sched.scheduled:
            seq = self.seqs.get(req.seq_id)
            if seq is None:
                continue                          # aborted while the step ran: its blocks are already free
            seq.num_computed_tokens = req.start_pos + req.num_tokens
            self.block_manager.cache_full_blocks(seq.seq_id, seq.token_ids, seq.num_computed_tokens)
            if not req.sample:
                continue                          # a middle prefill chunk only filled the cache
            samples = [seq] + [self._fork(seq, child_id, i) for i, child_id in enumerate(req.fork_seq_ids, 1)]
            for s in samples:
                tokens = new_tokens[s.seq_id]
                if s is seq and req.kind == "verify":
                    # accepted drafts + one sampled token: the drafts' K/V was computed in this pass
                    # and stays; rejected ones never advance num_computed_tokens (their slots are reused)
                    seq.num_computed_tokens += len(tokens) - 1
                out = self._append(s, tokens, parent=seq if s is not seq else None, logprobs=logprobs.get(s.seq_id))
                if s is seq and req.kind == "verify" and not seq.is_finished:
                    self._roll_back(seq)
                if out is not None:
                    out.verified = verified.get(s.seq_id)
                    outputs.append(out)
        return outputs

    def _roll_back(self, seq: Sequence) -> None:
        """After a verify step: cache the blocks that verified tokens filled, free those only rejected
        drafts were written into (a block is kept while any of the sequence's tokens needs it)."""
        self.block_manager.cache_full_blocks(seq.seq_id, seq.token_ids, seq.num_computed_tokens)
        self.block_manager.trim(seq.seq_id, seq.num_tokens)

    def _fork(self, parent: Sequence, child_id: int, index: int) -> Sequence:
        """A sibling sample splits off the finished prompt, sharing every block (copy-on-write later)."""
        child = Sequence(child_id, parent.request_id, parent.prompt_token_ids, parent.params, sample_index=index,
                         token_ids=list(parent.token_ids), num_computed_tokens=parent.num_computed_tokens,
                         max_tokens=parent.max_tokens, seed=parent.seed)
        self.block_manager.fork(parent.seq_id, child_id)
        self.seqs[child_id] = child
        self._run(child)
        parent.num_samples_to_fork = 0
        return child

    def _append(self, seq: Sequence, tokens: list[int], parent: Sequence | None = None,
                logprobs: list | None = None) -> SequenceOutput | None:
        """Append sampled tokens; end the sequence at EOS, a stop token, max_tokens or max_model_len (EOS and
        stop tokens only once min_tokens are out, as vLLM reads it)."""
        p = seq.params
        visible, kept_logprobs, reason, stop_reason = [], [], None, None
        for i, token in enumerate(tokens):
            seq.token_ids.append(token)
            if seq.is_padding:
                continue                          # static batching: junk that only keeps the seat
            visible.append(token)
            if logprobs is not None:
                kept_logprobs.append(logprobs[i])
            past_min = len(seq.output_token_ids) >= p.min_tokens
            if token in self.eos_token_ids and not p.ignore_eos and past_min:
                reason = "stop"
            elif token in p.stop_token_ids and past_min:
                reason, stop_reason = "stop", token
            elif len(seq.output_token_ids) >= seq.max_tokens or seq.num_tokens >= self.max_model_len:
                reason = "length"
            if reason is not None:
                break                             # tokens after the end are dropped
        if reason is not None:
            self.finish(seq.seq_id, reason)
        if not visible:
            return None
        return SequenceOutput(seq.seq_id, visible, reason, parent.seq_id if parent is not None else None,
                              stop_reason=stop_reason, logprobs=kept_logprobs if logprobs is not None else None)

    # -- ending sequences ----------------------------------------------------------------------
    def finish(self, seq_id: int, reason: str = "abort") -> None:
        """End a sequence wherever it is (waiting, running, swapped) and free its blocks at once: at EOS
        or max_tokens ("stop", "length"), a stop string the output processor found, or an abort. A
        sequence that is already gone (it ended by length on the same token) is left alone."""
        seq = self.seqs.get(seq_id)
        if seq is not None:
            seq.finish_reason = reason
            self._release(seq)

    def _release(self, seq: Sequence) -> None:
        if self.running.pop(seq.seq_id, None) is None:
            for queue in (self.waiting, self.swapped):
                if seq in queue:
                    queue.remove(seq)
        seq.status = SequenceStatus.FINISHED
        self.block_manager.free(seq.seq_id)
        del self.seqs[seq.seq_id]
        self._finished.append(FinishedSequence(seq.seq_id, seq.finish_reason or "abort"))
        self._finished_ids.append(seq.seq_id)

    def take_finished(self) -> list[FinishedSequence]:
        """Sequences freed since the last call (the output processor hands out their outputs)."""
        finished, self._finished = self._finished, []
        return finished
