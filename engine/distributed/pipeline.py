"""One rank's part of a step, and the micro-batches that let pipeline stages overlap.

Every rank receives the same SchedulerOutput. With p stages the step's tokens are cut into m
micro-batches (m = p unless asked), and each stage runs them in order, handing each one's hidden
state to the next stage as soon as it is done (GPipe's forward schedule, Huang et al. 2019):

    stage 0   [mb0][mb1][mb2]                      time ──►
    stage 1        [mb0][mb1][mb2]
    stage 2             [mb0][mb1][mb2]            idle corners = the bubble: (p-1)/(m+p-1) at best

A micro-batch may end in the middle of a prefill chunk: its later tokens go in the next micro-batch,
and attend to the earlier ones because this stage has already written their K/V. Cuts never change
the numbers, only when they are computed. The last stage (its tensor-parallel rank 0) keeps the
hidden rows that need logits and samples once every micro-batch is through.

A step waits for its samples before the scheduler can plan the next one, so here stages overlap only
inside a step; vLLM keeps p batches in flight ("virtual engines") to overlap across steps too.
"""
from __future__ import annotations

import time
from dataclasses import replace

import torch

from ..core.records import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from ..worker.model_runner import ModelRunner
from .parallel_config import ParallelConfig


def _cut(r: ScheduledRequest, a: int, b: int) -> ScheduledRequest:
    """Tokens a:b of a scheduled request; only the piece that ends at its last token samples."""
    if a == 0 and b == len(r.token_ids):
        return r
    last = b == len(r.token_ids)
    return replace(r, token_ids=r.token_ids[a:b], start_pos=r.start_pos + a, sample=r.sample and last,
                   num_cached_tokens=r.num_cached_tokens if a == 0 else 0,
                   fork_seq_ids=r.fork_seq_ids if last else [],
                   prompt_logprob_targets=r.prompt_logprob_targets[a:b])     # row j scores target j


def split_micro_batches(scheduled: list[ScheduledRequest], n: int) -> list[list[ScheduledRequest]]:
    """The step's tokens in n runs of about equal size (fewer if there are fewer tokens), in order.
    A request verifying draft tokens is never cut (its rows are checked together)."""
    total = sum(len(r.token_ids) + len(r.draft_token_ids) for r in scheduled)
    n = max(1, min(n, total))
    if n == 1:
        return [list(scheduled)]
    target = -(-total // n)
    batches, current, room = [], [], target
    for r in scheduled:
        a, whole = 0, bool(r.draft_token_ids)
        while a < len(r.token_ids):
            last_batch = len(batches) == n - 1          # takes whatever is left
            b = len(r.token_ids) if whole or last_batch else min(len(r.token_ids), a + room)
            current.append(_cut(r, a, b))
            room -= (b - a) + (len(r.draft_token_ids) if b == len(r.token_ids) else 0)
            a = b
            if room <= 0 and not last_batch:
                batches.append(current)
                current, room = [], target
    if current:
        batches.append(current)
    return batches


class ShardRunner(ModelRunner):
    """A ModelRunner over one rank's shard. Tensor-parallel all-reduces happen inside the model (its
    row-parallel layers); pipeline hand-offs happen here, between micro-batches."""

    def __init__(self, model, kv_cache, pc: ParallelConfig, rank: int, comm, layers: range):
        super().__init__(model, kv_cache)
        self.pc, self.comm, self.layers = pc, comm, layers
        stage, tp_rank = pc.coords(rank)
        self.prev = pc.rank(stage - 1, tp_rank) if stage > 0 else None
        self.next = pc.rank(stage + 1, tp_rank) if stage < pc.pp - 1 else None
        self.samples = rank == pc.sampling_rank
        self.hidden_size, self.dtype = model.config.hidden_size, model.embed.weight.dtype
        self.micro_batch_tokens: list[int] = []

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput | None:
        """This rank's share of the step; the sampling rank returns the ModelRunnerOutput, others None."""
        for seq_id in out.finished_seq_ids:          # the same order as ModelRunner.execute
            self.generators.forget(seq_id)
        self.kv_cache.swap_out(out.blocks_to_swap_out)
        self.kv_cache.swap_in(out.blocks_to_swap_in)
        self.kv_cache.copy_blocks(out.blocks_to_copy)
        batches = split_micro_batches(out.scheduled, self.pc.num_micro_batches) if out.scheduled else []
        self.micro_batch_tokens = [sum(r.num_tokens + len(r.draft_token_ids) for r in b) for b in batches]
        t0 = time.perf_counter()
        rows = []
        for i, batch in enumerate(batches):
            inputs = self.prepare_inputs(SchedulerOutput(scheduled=batch), draw=False)
            hidden = None
            if self.prev is not None:
                hidden = self.comm.recv((inputs.input_ids.numel(), self.hidden_size), self.dtype, self.device, self.prev)
            with self.comm.compute(i):
                hidden = self.model(inputs.input_ids, inputs.positions, self.attn.bind(inputs.meta),
                                    hidden=hidden, layers=self.layers)
            if self.next is not None:
                self.comm.isend(hidden, self.next)
            elif self.samples and inputs.logits_indices.numel():
                rows.append(hidden[inputs.logits_indices])
        self.comm.wait_sends()
        t1 = time.perf_counter()
        if not self.samples:
            return None
        if not rows:
            return ModelRunnerOutput(forward_s=t1 - t0)
        logits = self.model.compute_logits(torch.cat(rows))   # rows follow the sampling requests in order
        # The whole step's draws (the same rows, in the same order), each seeded generator advanced once
        whole = self.prepare_inputs(out)
        result = ModelRunnerOutput(forward_s=t1 - t0)
        self.sample(out, whole, logits, result)
        result.sample_s = time.perf_counter() - t1
        return result
