"""The records handed across the engine's boundaries: plain data only.

One step, and the record at each boundary:

    Scheduler.schedule() ──SchedulerOutput──► ModelRunner.execute() ──ModelRunnerOutput──┐
      (who runs, which tokens,                (inputs built from the      (sampled ids)     │
       which blocks)                           record alone)                               ▼
    OutputProcessor ◄──SequenceOutput, FinishedSequence── Scheduler.update_from_output()
      (text, stop strings,                                 (advance, append, fork, free;
       metrics, events)                                     rejected drafts roll back here)

SchedulerOutput and ModelRunnerOutput hold ints, strings, lists and SamplingParams: no tensors and
no live Sequence objects, so they pickle. A tensor-parallel engine can send the same record to every
worker process, and a CUDA-graph runner can copy it into persistent input buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..sampling_params import SamplingParams


@dataclass(slots=True)
class ScheduledRequest:
    """One sequence's share of a step: which tokens to compute, where they sit, where their K/V goes.

        token_ids   [t5 t6 t7]            computed at positions start_pos .. start_pos + 2
        block_ids   [7, 2]                its whole block table: position p lives in slot
                                          block_ids[p // block_size] * block_size + p % block_size
        draft_token_ids [d0 d1]           (speculative decoding) guesses appended after token_ids,
                                          verified in the same forward pass

    A "verify" row is a sequence in decode that may speculate: token_ids is its newest token, slots
    for num_lookahead_tokens more are reserved, and the runner's proposer fills in up to that many
    drafts (context_token_ids is what it may look at). Drafts already in the record are verified as
    they are.
    """
    seq_id: int
    request_id: str                 # the id its outputs carry: "r", or "r:1" for sample 1 of n
    kind: str                       # "prefill" (many tokens, or a recompute) | "decode" | "verify"
    token_ids: list[int]            # the tokens whose K/V this step computes
    start_pos: int                  # position of token_ids[0] = tokens already in the cache
    block_ids: list[int]            # the sequence's block table after this step's allocation
    num_cached_tokens: int = 0      # prompt tokens taken from the prefix cache at admission this step
    sample: bool = False            # reaches the newest token: sample what comes next
    sampling_params: SamplingParams | None = None   # with sample=True
    sample_index: int = 0           # which of the request's n samples (its seed is seed + sample_index)
    num_output_tokens: int = 0      # tokens generated so far = draws its seeded generator has made
    fork_seq_ids: list[int] = field(default_factory=list)   # n > 1: siblings that split off now, each
    #                                 drawing its own first token from this same row (sample_index 1, 2, ...)
    draft_token_ids: list[int] = field(default_factory=list)  # speculative decoding: guesses to verify
    padding: bool = False           # static batching: a finished request computing junk to keep its seat
    num_lookahead_tokens: int = 0   # verify rows: slots reserved after token_ids, the most drafts allowed
    context_token_ids: list[int] = field(default_factory=list)  # verify rows: the sequence so far (prompt +
    #                                 output, newest last): n-gram lookup reads it, a draft model catches up from it
    seed: int | None = None         # its draws' generator seed (sample i adds i): the request's own, or one the
    #                                 engine named for it from EngineConfig.seed (None: the global RNG)
    banned_token_ids: list[int] = field(default_factory=list)  # min_tokens not reached: EOS and stop_token_ids
    #                                 may not be drawn
    prompt_token_ids: list[int] = field(default_factory=list)  # repetition_penalty: the prompt's tokens
    output_token_ids: list[int] = field(default_factory=list)  # penalties: the tokens generated so far
    prompt_logprobs: int | None = None  # prompt_logprobs: the top k to report for the prompt tokens this chunk
    prompt_logprob_targets: list[int] = field(default_factory=list)   # ... predicts: row j (position start_pos
    #                                 + j) scores token start_pos + j + 1, for every such token inside the prompt

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(slots=True)
class SchedulerOutput:
    """The interface between the Scheduler and the ModelRunner: everything one step does."""
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)   # (gpu, cpu)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)    # (cpu, gpu)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)       # copy-on-write (src, dst)
    finished_seq_ids: list[int] = field(default_factory=list)   # ended since the last step: forget their state
    preempted: list[tuple[str, str]] = field(default_factory=list)   # (request_id, "recompute" | "swap")
    swapped_in: list[str] = field(default_factory=list)
    prefix_query_tokens: int = 0    # prompt tokens looked up in the prefix cache this step
    prefix_hit_tokens: int = 0      # ... and found there
    return_probs: bool = False      # ask the runner for the probability of each sampled token

    @property
    def num_batched_tokens(self) -> int:
        """Tokens the target computes: before the proposer runs, a verify row counts its reserved slots."""
        return sum(r.num_tokens + max(len(r.draft_token_ids), r.num_lookahead_tokens) for r in self.scheduled)


@dataclass(slots=True)
class VerifiedDraft:
    """One verify row's outcome: what was drafted, how much of it the target kept, and why.

        draft_token_ids   [d0 d1 d2 d3]      num_accepted = 2: d0 d1 kept, d2 rejected, d3 never judged
        emitted            d0 d1 x            x = the correction drawn at d2's position (or, when all k
                                              are kept, the bonus token after d3)
        draft_probs       [q0(d0) q1(d1) ...] what the proposer gave each draft; None for a point mass (n-gram)
        target_probs      [p0(d0) p1(d1) ...] the target's sampling probability of each draft; None when greedy
        final_prob         p(x) under the target at x's position (None when greedy)
    """
    seq_id: int
    draft_token_ids: list[int]
    num_accepted: int
    final_token_id: int
    draft_probs: list[float] | None = None
    target_probs: list[float] | None = None
    final_prob: float | None = None

    @property
    def num_drafts(self) -> int:
        return len(self.draft_token_ids)

    @property
    def bonus(self) -> bool:
        """Every draft kept: the last token is a free extra, not a correction."""
        return self.num_accepted == len(self.draft_token_ids)


@dataclass(slots=True)
class TokenLogprobs:
    """Log-probabilities at one position, from the raw logits: the token that came next (sampled, or the
    prompt's own) and the k most likely."""
    token_id: int
    logprob: float
    rank: int                       # 1 = the most likely
    top_token_ids: list[int]        # the k most likely, most likely first
    top_logprobs: list[float]


@dataclass(slots=True)
class ModelRunnerOutput:
    """What one forward pass produced: the new tokens of every sequence that sampled.

    Row i belongs to seq_ids[i]. A decode gains one token; a verify step gains its accepted drafts
    plus one; a forked sibling appears as its own row. A middle prefill chunk has no row.
    """
    seq_ids: list[int] = field(default_factory=list)
    sampled_token_ids: list[list[int]] = field(default_factory=list)
    sampled_probs: list[list[float]] | None = None   # with return_probs: p(token) under the sampler
    prepare_s: float = 0.0          # host time: block swaps and copies, building and copying the inputs
    forward_s: float = 0.0          # host time of the forward pass (launches, on a GPU)
    sample_s: float = 0.0           # sampling, until the ids are on the host (on a GPU: waits for the forward)
    gpu_forward_s: float | None = None   # GPU time of the forward pass and of sampling, from CUDA events
    gpu_sample_s: float | None = None    # (None on the CPU, or when nothing was read back)
    cuda_graph_batch: int = 0       # the captured batch size replayed (0: ran eagerly)
    parallel: object | None = None  # tensor/pipeline parallel: the step's ParallelStep (engine/distributed/stats.py)
    propose_s: float = 0.0          # speculative decoding: the proposer's work before the forward pass
    verified: list[VerifiedDraft] = field(default_factory=list)   # one per verify row that had drafts
    sampled_logprobs: list[list[TokenLogprobs] | None] | None = None   # row i's tokens' logprobs (None: not asked)
    prompt_logprobs: dict[int, tuple[int, list[TokenLogprobs]]] = field(default_factory=dict)   # seq_id ->
    #                                 (the prompt position of the first token scored, one entry per token scored)


@dataclass(slots=True)
class SequenceOutput:
    """Scheduler -> output processor: the tokens one sequence gained this step (padding never shows)."""
    seq_id: int
    new_token_ids: list[int]
    finish_reason: str | None = None     # "stop" (EOS or a stop token, the last id) or "length", decided here
    parent_seq_id: int | None = None     # a forked sample's first output names the sequence it split from
    verified: VerifiedDraft | None = None   # a verify row's outcome (speculative decoding statistics)
    stop_reason: int | None = None       # the stop_token_ids entry that ended it (None: EOS, length, or going on)
    logprobs: list[TokenLogprobs] | None = None   # one per new token, when its params ask for logprobs


@dataclass(slots=True)
class FinishedSequence:
    """Scheduler -> output processor: a sequence whose blocks were freed; its output can be handed over."""
    seq_id: int
    finish_reason: str
