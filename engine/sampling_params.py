"""SamplingParams: how one request turns logits into tokens, and when it stops."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0     # 0 means greedy (argmax)
    top_k: int = 0               # 0 = off
    top_p: float = 1.0           # 1 = off
    min_p: float = 0.0           # 0 = off
    max_tokens: int = 64
    seed: int | None = None      # per-request generator: the same seed gives the same tokens
    stop: list[str] = field(default_factory=list)
    n: int = 1                   # samples of one prompt (they share its KV blocks)
    ignore_eos: bool = False
    num_speculative_tokens: int | None = None   # speculative engines: at most this many drafts a step for
    #                                             this request (None = the engine's k, 0 = never speculate)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 0:
            raise ValueError(f"num_speculative_tokens must be >= 0 (0 = no drafts), got {self.num_speculative_tokens}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
