"""Drafting with a model: k small autoregressive steps, batched over every speculating sequence.

    pass 1    each verify row's newest token t (at its position c)           -> q_1, draft d_1
    pass j    d_{j-1} at c + j - 1, for the rows that still want more drafts  -> q_j, draft d_j

Each pass is a decode step of the drafting model through the same paged machinery as the target
(records -> ModelRunner.prepare_inputs -> forward -> logits), writing its K/V into the slots the
scheduler reserved for the drafts. A greedy request's drafts are the draft's argmax; a sampled
request's are drawn from q = the draft's distribution shaped by the request's own temperature,
top-k and top-p, and q is kept for rejection sampling.

Subclasses say which model runs and which rows it must also see (`extra_rows`): a separate draft
model keeps a KV cache of its own and must compute every token the target computes.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..core.records import ScheduledRequest, SchedulerOutput
from ..model.sampler import draw, sampling_probs
from .proposer import Draft, DraftRequest


class ModelDrafter:
    method = "model"

    def __init__(self, prepare_inputs: Callable):
        self.prepare_inputs = prepare_inputs     # the runner's: the same inputs as the target would get

    # -- what a subclass provides ----------------------------------------------------------------
    def forward_logits(self, inputs) -> torch.Tensor:
        """Run the drafting model over one pass's inputs; logits [rows, V] of its sampling rows."""
        raise NotImplementedError

    def draft_pass(self, rows: list[ScheduledRequest]) -> torch.Tensor:
        """One pass over these rows (a subclass may replay a CUDA graph instead): forward_logits."""
        return self.forward_logits(self.prepare_inputs(SchedulerOutput(scheduled=rows)))

    def first_pass_row(self, r: DraftRequest) -> ScheduledRequest:
        """Pass 1's row for one request (by default: its newest token, at start_pos)."""
        return ScheduledRequest(r.seq_id, "", "decode", r.context_token_ids[-1:], r.start_pos, r.block_ids,
                                sample=True, sampling_params=r.params)

    def extra_rows(self, step: SchedulerOutput, drafting: set[int]) -> list[ScheduledRequest]:
        """Rows pass 1 computes without sampling (a separate draft model's catch-up on the sequences
        not in `drafting`); none by default."""
        return []

    def forget(self, seq_ids: list[int]) -> None:
        pass

    # -- the loop --------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, requests: list[DraftRequest], step: SchedulerOutput) -> list[Draft]:
        drafts = [Draft([], None) for _ in requests]
        probs: list[list[torch.Tensor]] = [[] for _ in requests]
        active = [i for i, r in enumerate(requests) if r.max_drafts > 0]
        rows = self.extra_rows(step, {requests[i].seq_id for i in active}) + [self.first_pass_row(requests[i]) for i in active]
        for j in range(max((r.max_drafts for r in requests), default=0) or (1 if rows else 0)):
            if not rows:
                break
            if active:
                logits = self.draft_pass(rows)
                params = [requests[i].params for i in active]
                q = sampling_probs(logits, params)
                tokens = self._choose(q, logits, [requests[i] for i in active])
                for row, (i, token) in enumerate(zip(active, tokens)):
                    drafts[i].token_ids.append(token)
                    if not requests[i].params.greedy:
                        probs[i].append(q[row])
            else:
                self.draft_pass(rows)            # catch-up only: no one drafts this step
            active = [i for i in active if len(drafts[i].token_ids) < requests[i].max_drafts]
            rows = [ScheduledRequest(requests[i].seq_id, "", "decode", drafts[i].token_ids[-1:],
                                     requests[i].start_pos + len(drafts[i].token_ids), requests[i].block_ids,
                                     sample=True, sampling_params=requests[i].params) for i in active]
        for d, p in zip(drafts, probs):
            d.probs = torch.stack(p) if p else None
        return drafts

    @staticmethod
    def _choose(q: torch.Tensor, logits: torch.Tensor, requests: list[DraftRequest]) -> list[int]:
        """Greedy rows take the draft's argmax; sampled rows draw from q with the step's generator."""
        tokens = logits.argmax(dim=-1).tolist()
        sampled = [i for i, r in enumerate(requests) if not r.params.greedy]
        if sampled:
            picked = draw(q[sampled], [requests[i].generator for i in sampled])
            for i, token in zip(sampled, picked):
                tokens[i] = token
        return tokens
