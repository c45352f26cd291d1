"""What the engine hands back: per-token stream events and finished request outputs with metrics."""
from __future__ import annotations

from dataclasses import dataclass, field

from .spec_decode.stats import SpecDecodeStats


@dataclass(slots=True)
class RequestMetrics:
    arrival_s: float                                   # time.perf_counter() when the request arrived
    first_token_s: float | None = None
    token_times_s: list[float] = field(default_factory=list)   # one per generated token
    finished_s: float | None = None
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
class StreamEvent:
    request_id: str
    token_id: int
    text_delta: str          # new text this token completed (may be "" while a character is half done)
    text: str                # all generated text so far
    finished: bool
    finish_reason: str | None = None   # "stop" (EOS or stop string), "length" (max_tokens), "abort"


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str
    text: str
    token_ids: list[int]
    finish_reason: str | None
    metrics: RequestMetrics
    prompt_token_ids: list[int] = field(default_factory=list)
