"""What callers receive, in vLLM's shapes: one RequestOutput per prompt, holding its n completions.

    RequestOutput  request_id, prompt, prompt_token_ids, prompt_logprobs, finished, metrics
      outputs ─► CompletionOutput(index 0, text, token_ids, cumulative_logprob, logprobs, finish_reason, stop_reason)
                 CompletionOutput(index 1, ...)                     n > 1: the samples share the prompt's KV blocks

`metrics` is ours (vLLM's field of that name carries other numbers): time to first token, inter-token
latencies, speculative-decoding statistics. A StreamEvent is one token of `LLM.stream`, also ours.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .spec_decode.stats import SpecDecodeStats


@dataclass(slots=True)
class Logprob:
    """One token's log-probability at one position, under the model's own distribution (the raw logits,
    before temperature, penalties or filters: vLLM's default reading)."""
    logprob: float                       # natural log of its probability
    rank: int                            # 1 = the most likely token at that position
    decoded_token: str | None = None     # the token's own text


SampleLogprobs = list[dict[int, Logprob]]          # per generated token: the chosen token and the top k
PromptLogprobs = list[dict[int, Logprob] | None]   # per prompt token: None for the first (nothing predicts it)


@dataclass(slots=True)
class RequestMetrics:
    """When a request's tokens came. With n > 1, every completion's tokens count (siblings' tokens of one
    step arrive together, so some inter-token gaps are 0)."""
    arrival_s: float                                   # time.perf_counter() when the request arrived
    first_token_s: float | None = None                 # when its first token (of any completion) was sampled
    token_times_s: list[float] = field(default_factory=list)   # one per generated token, in arrival order
    finished_s: float | None = None                    # when its last completion ended
    spec: SpecDecodeStats | None = None                # passes, drafts proposed / kept, tokens per pass

    @property
    def ttft_s(self) -> float | None:
        """Time to first token: queueing + prefill + one sampling step."""
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def itl_s(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive tokens."""
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def e2e_s(self) -> float | None:
        end = self.finished_s if self.finished_s is not None else (self.token_times_s[-1] if self.token_times_s else None)
        return None if end is None else end - self.arrival_s


@dataclass(slots=True)
class CompletionOutput:
    """One completion of a prompt (vLLM's CompletionOutput)."""
    index: int                           # which of the request's n completions (0 .. n - 1)
    text: str                            # the generated text (a stop string and what follows it cut off)
    token_ids: list[int]                 # the generated tokens (an EOS or stop token id included)
    cumulative_logprob: float | None     # the sum of the chosen tokens' log-probabilities (None unless logprobs)
    logprobs: SampleLogprobs | None      # with SamplingParams.logprobs: one dict per token
    finish_reason: str | None = None     # "stop" (EOS, stop token or string), "length" (max_tokens or context), "abort"
    stop_reason: int | str | None = None # the stop token id or stop string that ended it (None: EOS or other)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """Everything one prompt produced (vLLM's RequestOutput)."""
    request_id: str
    prompt: str | None                   # the prompt's text (for a chat, after the template); None for token ids
    prompt_token_ids: list[int]
    prompt_logprobs: PromptLogprobs | None   # with SamplingParams.prompt_logprobs
    outputs: list[CompletionOutput]      # n completions, in index order
    finished: bool                       # every completion has ended
    metrics: RequestMetrics | None = None


@dataclass(slots=True)
class StreamEvent:
    """One generated token of one completion, as `LLM.stream` hands it out."""
    request_id: str          # the completion's id: the request id, or request_id:i for completion i of n > 1
    token_id: int
    text_delta: str          # new text this token completed (may be "" while a character is half done)
    text: str                # all generated text of this completion so far
    finished: bool
    finish_reason: str | None = None         # as CompletionOutput.finish_reason, on the last event
    stop_reason: int | str | None = None     # as CompletionOutput.stop_reason, on the last event
    index: int = 0                           # which completion (0 .. n - 1)
    logprobs: dict[int, Logprob] | None = None   # with SamplingParams.logprobs: this token's entry
