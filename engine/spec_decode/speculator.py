"""Speculator: the runner's half of speculative decoding, around the one target pass of a step.

    SchedulerOutput ─► propose(): verify rows get up to num_lookahead_tokens drafts from the proposer
          │                       (records copied, never changed in place), q kept per sequence; the
          │                       rule (rule.py) may say nobody drafts (a big batch) or not this row
          ▼
    target forward pass: a verify row is [t, d_1 … d_k] at c … c + k (a verify CUDA graph on a GPU,
          │               else a prefill-shaped query in the same flat batch as everyone else's rows)
          ▼
    verify_on_device(): k + 1 logits rows per verify row ─► greedy match or rejection sampling, all
                        rows at once, as tensors; the runner reads them back with the plain draws in
                        the step's one read and hands the values to finish() ─► VerifiedDraft

The runner owns no sequence: it reports what it kept, and Scheduler.update_from_output advances the
sequence by the kept drafts only and gives back the slots of the rest.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from ..core.records import ScheduledRequest, SchedulerOutput, VerifiedDraft
from ..model.sampler import filter_logits_batch
from .proposer import DraftRequest, Proposer
from .rejection_sampler import greedy_accept, rejection_sample, step_generator
from .rule import SpeculationRule


@dataclasses.dataclass(slots=True)
class PendingVerdicts:
    """Verdicts still on the device: `parts` (1-D float64 tensors) are read back by the runner together
    with its own samples; finish(their values, in order) builds the VerifiedDrafts in verify order."""
    parts: list[torch.Tensor]
    finish: Callable[[list[float]], list[VerifiedDraft]]


def _to_device(host: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host array on the device without a wait (from pinned memory, queued behind the forward)."""
    t = torch.from_numpy(host) if isinstance(host, np.ndarray) else host
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


class Speculator:
    def __init__(self, proposer: Proposer | None = None, rule: SpeculationRule | None = None):
        self.proposer = proposer
        self.rule = rule or SpeculationRule()
        self._step: dict[int, tuple[torch.Tensor | None, torch.Generator | None]] = {}   # seq_id -> (q, generator)

    def move_blocks(self, out: SchedulerOutput) -> None:
        """A proposer with a KV cache of its own follows the target's swaps and copies."""
        move = getattr(self.proposer, "move_blocks", None)
        if move is not None:
            move(out)

    def forget(self, seq_ids: list[int]) -> None:
        if seq_ids:
            self.rule.forget(seq_ids)
            if self.proposer is not None:
                self.proposer.forget(seq_ids)

    def propose(self, out: SchedulerOutput) -> SchedulerOutput:
        """The same step with every verify row's drafts filled in (a new record; `out` is left alone)."""
        self._step = {}
        verifying = [r for r in out.scheduled if r.kind == "verify"]
        wanting = [r for r in verifying if not r.draft_token_ids]
        for r in verifying:
            self._step[r.seq_id] = (None, self._generator(r))
        if self.proposer is None:
            return out
        batch_ok = not wanting or self.rule.batch_allows(len(out.scheduled))
        # A row the rule holds back still reaches the proposer's catch-up (a draft model computes it).
        requests = [DraftRequest(r.seq_id, r.start_pos, r.block_ids, r.context_token_ids,
                                 self.rule.drafts_for(r.seq_id, r.num_lookahead_tokens), r.sampling_params,
                                 self._step[r.seq_id][1])
                    for r in wanting if r.num_lookahead_tokens > 0 and batch_ok
                    and self.rule.request_allows(r.seq_id, r.num_output_tokens)]
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

    def verify_on_device(self, logits: torch.Tensor, rows: list[tuple[ScheduledRequest, int]]) -> PendingVerdicts:
        """Each verify row with its first logits row (the target at the newest token; the next k rows at
        each draft): greedy rows by matching, sampled rows by rejection sampling, each kind in one batch.
        Nothing here waits for the device."""
        greedy = [(r, f) for r, f in rows if r.sampling_params.greedy]
        sampled = [(r, f) for r, f in rows if not r.sampling_params.greedy]
        parts, finishers = [], []
        for group, judge in ((greedy, self._greedy), (sampled, self._rejection_sample)):
            if group:
                group_parts, finish = judge(logits, group)
                finishers.append((sum(p.numel() for p in group_parts), finish))
                parts += group_parts

        def finish(values: list[float]) -> list[VerifiedDraft]:
            verdicts, at = {}, 0
            for n, f in finishers:
                for v in f(values[at:at + n]):
                    verdicts[v.seq_id] = v
                at += n
            by_seq = {r.seq_id: r for r, _ in rows}
            for v in verdicts.values():
                self.rule.judged(v.seq_id, by_seq[v.seq_id].num_output_tokens, v.num_drafts, v.num_accepted)
            return [verdicts[r.seq_id] for r, _ in rows]
        return PendingVerdicts(parts, finish)

    @staticmethod
    def _padded(rows: list[tuple[ScheduledRequest, int]], pad: int) -> tuple[np.ndarray, int]:
        """[R, K + 2] int64 on the host: first logits row, number of drafts, the drafts padded to K."""
        K = max(len(r.draft_token_ids) for r, _ in rows)
        host = np.full((len(rows), K + 2), pad, np.int64)
        for i, (r, first) in enumerate(rows):
            host[i, 0], host[i, 1] = first, len(r.draft_token_ids)
            host[i, 2:2 + len(r.draft_token_ids)] = r.draft_token_ids
        return host, K

    def _greedy(self, logits: torch.Tensor, rows: list[tuple[ScheduledRequest, int]]):
        host, K = self._padded(rows, -1)                       # -1 never equals a token: padding is never kept
        dev = _to_device(host, logits.device)
        at = (dev[:, :1] + torch.arange(K + 1, device=logits.device)).clamp_(max=logits.shape[0] - 1)
        target = logits[at.flatten()].argmax(dim=-1).view(len(rows), K + 1)
        accepted, final = greedy_accept(target, dev[:, 2:], dev[:, 1])

        def finish(values: list[float]) -> list[VerifiedDraft]:
            R = len(rows)
            return [VerifiedDraft(r.seq_id, list(r.draft_token_ids), int(a), int(x))
                    for (r, _), a, x in zip(rows, values[:R], values[R:])]
        return [accepted.double(), final.double()], finish

    def _rejection_sample(self, logits: torch.Tensor, rows: list[tuple[ScheduledRequest, int]]):
        """p [R, K + 1, V] of the target (each row's own temperature, top-k, top-p), q [R, K, V] (one-hot
        for a point mass, None if every row is one), u [R, K + 1] from each row's generator."""
        device, V = logits.device, logits.shape[-1]
        host, K = self._padded(rows, 0)
        R = len(rows)
        lens = [len(r.draft_token_ids) + 1 for r, _ in rows]
        flat_rows = np.concatenate([np.arange(first, first + n) for (_, first), n in zip(rows, lens)])
        dest = np.concatenate([i * (K + 1) + np.arange(n) for i, n in enumerate(lens)])
        params = [r.sampling_params for (r, _), n in zip(rows, lens) for _ in range(n)]
        knobs = np.array([[p.temperature, p.top_k, p.top_p, p.min_p] for p in params], np.float64)
        u = np.zeros((R, K + 1), np.float64)
        for i, (r, _) in enumerate(rows):
            k = len(r.draft_token_ids)
            draws = torch.rand(k + 1, generator=self._step.get(r.seq_id, (None, None))[1], dtype=torch.float64)
            u[i, :k], u[i, K] = draws[:k].numpy(), float(draws[k])
        dev = _to_device(host, device)
        index = _to_device(np.stack([flat_rows, dest]), device)
        knobs_d = _to_device(knobs, device)
        u_d = _to_device(u, device)
        drafts, num_drafts = dev[:, 2:], dev[:, 1]
        filtered = filter_logits_batch(logits[index[0]].float(), knobs_d[:, 0].float(), knobs_d[:, 1].long(),
                                       knobs_d[:, 2].float(), knobs_d[:, 3].float())
        p = torch.zeros(R * (K + 1), V, dtype=torch.float32, device=device)
        p[index[1]] = torch.softmax(filtered, dim=-1)
        p = p.view(R, K + 1, V)
        qs = [self._step.get(r.seq_id, (None, None))[0] for r, _ in rows]
        q = None
        if any(x is not None for x in qs):
            q = torch.zeros(R, K, V, dtype=torch.float32, device=device)
            for i, x in enumerate(qs):
                if x is not None:
                    q[i, :x.shape[0]] = x
                else:                                # a point mass among model drafts: one-hot q
                    q[i].scatter_(1, drafts[i][:, None], 1.0)
        accepted, final = rejection_sample(p, drafts, num_drafts, q, u_d)
        p_d = p[:, :K].gather(2, drafts[..., None]).squeeze(-1)
        q_d = q.gather(2, drafts[..., None]).squeeze(-1) if q is not None else None
        final_p = p[torch.arange(R, device=device), accepted, final]
        parts = [accepted.double(), final.double(), final_p.double(), p_d.double().flatten()]
        if q_d is not None:
            parts.append(q_d.double().flatten())

        def finish(values: list[float]) -> list[VerifiedDraft]:
            out = []
            for i, (r, _) in enumerate(rows):
                k = len(r.draft_token_ids)
                pd = values[3 * R + i * K:3 * R + i * K + k]
                qd = None if q_d is None or qs[i] is None else values[3 * R + R * K + i * K:3 * R + R * K + i * K + k]
                out.append(VerifiedDraft(r.seq_id, list(r.draft_token_ids), int(values[i]), int(values[R + i]),
                                         qd, pd, values[2 * R + i]))
            return out
        return parts, finish
