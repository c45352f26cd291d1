"""Sequence: one stream of tokens the engine is generating, and where it stands.

A request asks for `n` samples of one prompt; each sample is a Sequence. The engine never has a
"prefill phase" or a "decode phase": a sequence only knows how many of its tokens already have
their K/V in the cache (`num_computed_tokens`), and each step computes some more of them.

    token_ids:   [ p0 p1 p2 ... p9 | o0 o1 o2 ]     prompt | generated so far
                  └──── computed ────────┘  └┘
                      num_computed_tokens = 12       o2 is still to be fed back (one decode step)

A prefill is a step that computes many tokens of a sequence; a decode computes exactly the last
one (the token sampled on the previous step). Chunked prefill is just "many, but not all".
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"      # not admitted yet, or preempted in recompute mode (its K/V was dropped)
    RUNNING = "running"      # owns KV blocks, scheduled every step while the token budget allows
    SWAPPED = "swapped"      # preempted in swap mode: its K/V sits in the CPU swap space
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    seq_id: int
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    sample_index: int = 0                 # which of the request's n samples this is
    token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_samples_to_fork: int = 0          # n - 1 until the prompt is prefilled, then 0 (see Scheduler)
    status: SequenceStatus = SequenceStatus.WAITING
    num_preemptions: int = 0
    finish_reason: str | None = None      # "stop" | "length" | "abort", once it is done
    num_output_tokens_final: int | None = None   # static batching keeps padding tokens after this
    max_tokens: int = 16                  # its output limit: params.max_tokens, or what the context leaves
    seed: int | None = None               # its generator's seed: params.seed, or one the engine named for it

    def __post_init__(self) -> None:
        if not self.token_ids:
            self.token_ids = list(self.prompt_token_ids)

    @property
    def name(self) -> str:
        """The id its outputs carry: the request id, or request_id:i for sample i of n > 1."""
        return self.request_id if self.params.n == 1 else f"{self.request_id}:{self.sample_index}"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        """Tokens generated so far, padding included (each cost one draw of its generator)."""
        return self.num_tokens - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        end = self.num_tokens if self.num_output_tokens_final is None else self.num_prompt_tokens + self.num_output_tokens_final
        return self.token_ids[self.num_prompt_tokens:end]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def needs_prefill(self) -> bool:
        """More than the last sampled token is missing from the cache (a new prompt, a chunk, a recompute)."""
        return self.num_uncomputed_tokens > 1 or self.num_computed_tokens < self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def is_padding(self) -> bool:
        """Static batching only: done, but kept in the batch (computing junk) until the batch ends."""
        return self.num_output_tokens_final is not None and not self.is_finished
