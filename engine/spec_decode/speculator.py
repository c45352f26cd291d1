"""Speculator: the runner's half of speculative decoding, around the one target pass of a step.

    SchedulerOutput ─► propose(): verify rows get up to num_lookahead_tokens drafts from the proposer
          │                       (records copied, never changed in place), q kept per sequence
          ▼
    target forward pass: a verify row is [t, d_1 … d_k] at c … c + k, a prefill-shaped query in the
          │               same flat batch as everyone else's prefill chunks and decodes
          ▼
    verify(): k + 1 logits rows per verify row ─► greedy match or rejection sampling ─► VerifiedDraft

The runner owns no sequence: it reports what it kept, and Scheduler.update_from_output advances the
sequence by the kept drafts only and gives back the slots of the rest.
"""
from __future__ import annotations

import dataclasses

import torch

from ..core.records import ScheduledRequest, SchedulerOutput, VerifiedDraft
from ..model.sampler import sampling_probs
from .proposer import DraftRequest, Proposer
from .rejection_sampler import rejection_sample, step_generator, verify_greedy


class Speculator:
    def __init__(self, proposer: Proposer | None = None):
        self.proposer = proposer
        self._step: dict[int, tuple[torch.Tensor | None, torch.Generator | None]] = {}   # seq_id -> (q, generator)

    def move_blocks(self, out: SchedulerOutput) -> None:
        """A proposer with a KV cache of its own follows the target's swaps and copies."""
        move = getattr(self.proposer, "move_blocks", None)
        if move is not None:
            move(out)

    def forget(self, seq_ids: list[int]) -> None:
        if self.proposer is not None and seq_ids:
            self.proposer.forget(seq_ids)

    def propose(self, out: SchedulerOutput) -> SchedulerOutput:
        """The same step with every verify row's drafts filled in (a new record; `out` is left alone)."""
        self._step = {}
        wanting = [r for r in out.scheduled if r.kind == "verify" and not r.draft_token_ids]
        for r in (r for r in out.scheduled if r.kind == "verify"):
            self._step[r.seq_id] = (None, self._generator(r))
        if self.proposer is None:
            return out
        requests = [DraftRequest(r.seq_id, r.start_pos, r.block_ids, r.context_token_ids, r.num_lookahead_tokens,
                                 r.sampling_params, self._step[r.seq_id][1])
                    for r in wanting if r.num_lookahead_tokens > 0]
        drafts = self.proposer.propose(requests, out)
        if not requests:
            return out
        by_seq = {req.seq_id: d for req, d in zip(requests, drafts)}
        scheduled = []
        for r in out.scheduled:
            d = by_seq.get(r.seq_id)
            if d is not None and d.token_ids:
                assert len(d.token_ids) <= r.num_lookahead_tokens, "a proposer drafted past the reserved slots"
                self._step[r.seq_id] = (d.probs, self._step[r.seq_id][1])
                r = dataclasses.replace(r, draft_token_ids=list(d.token_ids))
            scheduled.append(r)
        return dataclasses.replace(out, scheduled=scheduled)

    @staticmethod
    def _generator(r: ScheduledRequest) -> torch.Generator | None:
        params = r.sampling_params
        if params is None or params.greedy:
            return None
        return step_generator(r.seed, r.sample_index, r.num_output_tokens)

    def verify(self, rows: list[tuple[ScheduledRequest, torch.Tensor]]) -> list[VerifiedDraft]:
        """Each verify row with its logits [k + 1, V] (the target at the newest token and at each draft):
        greedy rows by matching, sampled rows by rejection sampling, all of them in one batch."""
        verdicts: dict[int, VerifiedDraft] = {}
        sampled = []
        for r, logits in rows:
            if r.sampling_params.greedy:
                tokens, accepted = verify_greedy(logits, r.draft_token_ids)
                verdicts[r.seq_id] = VerifiedDraft(r.seq_id, list(r.draft_token_ids), accepted, tokens[-1])
            else:
                sampled.append((r, logits))
        if sampled:
            for v in self._rejection_sample(sampled):
                verdicts[v.seq_id] = v
        return [verdicts[r.seq_id] for r, _ in rows]

    def _rejection_sample(self, rows: list[tuple[ScheduledRequest, torch.Tensor]]) -> list[VerifiedDraft]:
        """Pad the rows to K drafts: p [R, K + 1, V], q [R, K, V] (one-hot for a point mass), u [R, K + 1]."""
        R, K = len(rows), max(len(r.draft_token_ids) for r, _ in rows)
        device, V = rows[0][1].device, rows[0][1].shape[-1]
        flat = sampling_probs(torch.cat([logits for _, logits in rows]),
                              [r.sampling_params for r, logits in rows for _ in range(logits.shape[0])])
        p = torch.zeros(R, K + 1, V, dtype=flat.dtype, device=device)
        drafts = torch.zeros(R, K, dtype=torch.long, device=device)
        u = torch.zeros(R, K + 1, dtype=torch.float64)
        qs = [self._step.get(r.seq_id, (None, None))[0] for r, _ in rows]
        q = None if all(x is None for x in qs) else torch.zeros(R, K, V, dtype=torch.float32, device=device)
        start = 0
        for i, (r, logits) in enumerate(rows):
            k = len(r.draft_token_ids)
            p[i, :k + 1] = flat[start:start + k + 1]
            start += k + 1
            drafts[i, :k] = torch.tensor(r.draft_token_ids, dtype=torch.long)
            if q is not None:
                if qs[i] is not None:
                    q[i, :k] = qs[i]
                else:                                    # a point mass among model drafts: one-hot q
                    q[i, torch.arange(k, device=device), drafts[i, :k]] = 1.0
            draws = torch.rand(k + 1, generator=self._step.get(r.seq_id, (None, None))[1], dtype=torch.float64)
            u[i, :k], u[i, K] = draws[:k], draws[k]
        num_drafts = torch.tensor([len(r.draft_token_ids) for r, _ in rows], device=device)
        accepted, final = rejection_sample(p, drafts, num_drafts, q, u)
        p_d = p[:, :K].gather(2, drafts[..., None]).squeeze(-1).tolist()
        q_d = q.gather(2, drafts[..., None]).squeeze(-1).tolist() if q is not None else None
        final_p = p[torch.arange(R, device=device), accepted, final].tolist()
        out = []
        for i, ((r, _), a, x) in enumerate(zip(rows, accepted.tolist(), final.tolist())):
            k = len(r.draft_token_ids)
            out.append(VerifiedDraft(r.seq_id, list(r.draft_token_ids), a, x,
                                     None if qs[i] is None else q_d[i][:k], p_d[i][:k], final_p[i]))
        return out
