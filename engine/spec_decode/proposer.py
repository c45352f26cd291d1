"""The proposer interface: guess up to k next tokens for each sequence that may speculate.

    DraftRequest(seq_id, start_pos, block_ids, context_token_ids, max_drafts, params, generator)
        │   one per verify row: context ends with the newest token, which sits at start_pos and
        │   has no K/V yet (the target computes it in this step's pass, together with the drafts)
        ▼
    Proposer.propose(requests, step)  ->  [Draft(token_ids, probs)]     in request order

    token_ids   up to max_drafts guesses (fewer, or none, is fine: the row is then a plain decode)
    probs       [len(token_ids), V]: the distribution each guess was drawn from, shaped by the
                request's own temperature / top-k / top-p; None for a point mass (a lookup that
                only names tokens). Rejection sampling needs it to stay exact.

Three proposers (ngram.py, early_exit.py, draft_model.py); the runner holds one. `step` is the whole
SchedulerOutput, for a proposer that must see every row (a draft model keeps its own KV cache in step
with the target's). A proposer never changes a sequence: the scheduler owns them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..core.records import SchedulerOutput
from ..sampling_params import SamplingParams


@dataclass(slots=True)
class DraftRequest:
    seq_id: int
    start_pos: int                       # position of the newest token = tokens already in the cache
    block_ids: list[int]                 # the sequence's block table, slots for the drafts included
    context_token_ids: list[int]         # prompt + output so far, newest last
    max_drafts: int
    params: SamplingParams
    generator: torch.Generator | None    # a seeded request's draws for this step (None: the global RNG)


@dataclass(slots=True)
class Draft:
    token_ids: list[int]
    probs: torch.Tensor | None = None    # [len(token_ids), V], or None for a point mass


class Proposer(Protocol):
    method: str

    def propose(self, requests: list[DraftRequest], step: SchedulerOutput) -> list[Draft]:
        ...

    def forget(self, seq_ids: list[int]) -> None:
        """Sequences that ended: drop whatever was kept for them."""
        ...
