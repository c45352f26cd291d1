"""ApiState: what every handler of one server shares — the engine, the API key, the limits, and the
counts of what is running — and the admission rule that answers 429 when the queue is full.

    admit()   this server's requests in flight < max_concurrent, and the shared engine's waiting queue
              (every caller's requests: in `panel serve`, the readers' too) < max_waiting; else 429 with
              Retry-After
    release() when the request has ended (finished, refused, or its client gone)

Only the event loop's thread calls admit/release, so the counts need no lock. The engine is reached
through `get_llm()`, which may raise APIError(503) while it is still loading (a server that starts
before its model does, as the Panel app's does).
"""
from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from ..config import DEFAULT_MODEL_NAMES
from .errors import APIError
from .protocol import ModelLimits


@dataclass(slots=True)
class ServerLimits:
    max_concurrent: int = 64             # this server's requests running at once (past it: 429)
    max_waiting: int = 64                # requests waiting in the shared engine's queue (past it: 429)
    max_tokens: int | None = None        # the most tokens one completion may ask for (None: the context)
    max_prompts: int = 64                # prompts in one /v1/completions request
    max_prompt_tokens: int | None = None # the longest prompt, in tokens (None: what the context allows)
    max_body_bytes: int = 1 << 20        # a request body (past it: 413)
    retry_after_s: int = 1               # what a 429 tells the client to wait

    def __post_init__(self) -> None:
        for name in ("max_concurrent", "max_waiting", "max_prompts", "max_body_bytes", "retry_after_s"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"ServerLimits: {name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("max_tokens", "max_prompt_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"ServerLimits: {name} must be a positive integer or None, got {value!r}")


@dataclass(slots=True)
class ApiCounts:
    """What the server has done since it started (for logs and tests)."""
    requests: int = 0                    # generation requests admitted
    refused_busy: int = 0                # answered 429
    disconnects: int = 0                 # requests whose client left before the end (aborted in the engine)
    in_flight: int = 0


class ApiState:
    def __init__(self, get_llm: Callable, api_key: str | None = None, limits: ServerLimits | None = None,
                 served_model_name: str | None = None, source: str = "api"):
        self.get_llm = get_llm
        self.source = source                 # begins every request id of this server's ("api-12")
        self.api_key = api_key or None
        self.limits = limits or ServerLimits()
        self.served_model_name = served_model_name
        self.counts = ApiCounts()
        self._model_limits: tuple[object, ModelLimits] | None = None

    def llm(self):
        return self.get_llm()

    def model_name(self, llm) -> str:
        return self.served_model_name or llm.config.name

    def model_limits(self, llm) -> ModelLimits:
        if self._model_limits is None or self._model_limits[0] is not llm:
            aliases = sorted(DEFAULT_MODEL_NAMES) if llm.config.name in DEFAULT_MODEL_NAMES else []
            names = tuple(dict.fromkeys([self.model_name(llm), llm.config.name, *aliases]))   # the first is reported
            self._model_limits = (llm, ModelLimits(llm.tokenizer, llm.config.vocab_size, llm.engine.max_model_len,
                                                   names, self.limits.max_tokens, self.limits.max_prompts,
                                                   self.limits.max_prompt_tokens))
        return self._model_limits[1]

    def authorized(self, header: str | None) -> bool:
        """`Authorization: Bearer <key>`, compared in constant time; anything goes without a key."""
        if self.api_key is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self.api_key.encode())

    def admit(self, llm) -> None:
        busy = None
        if self.counts.in_flight >= self.limits.max_concurrent:
            busy = f"this server is running its limit of {self.limits.max_concurrent} requests"
        elif llm.stats.num_waiting >= self.limits.max_waiting:
            busy = f"the engine's queue is full ({llm.stats.num_waiting} requests waiting)"
        if busy is not None:
            self.counts.refused_busy += 1
            raise APIError(429, f"{busy}; try again in {self.limits.retry_after_s} s", code="rate_limit_exceeded",
                           headers={"Retry-After": str(self.limits.retry_after_s)})
        self.counts.in_flight += 1
        self.counts.requests += 1

    def release(self) -> None:
        self.counts.in_flight -= 1
