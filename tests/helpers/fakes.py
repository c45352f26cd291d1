"""Fakes of the engine for widget tests that need no model: an LLM that streams fixed deltas with a step
trace like the engine's, and an engine handle in any state."""
from __future__ import annotations

import re
from dataclasses import dataclass

from engine import ScheduledEntry, StepRecord
from engine.loader.tokenizer import Encoding
from widgets.common.handle import EngineSnapshot, EngineStatus


@dataclass
class _Ev:
    request_id: str
    token_id: int
    text_delta: str
    finished: bool
    finish_reason: str | None = None


class FakeTokenizer:
    """Words and runs of spaces as tokens; "<s>" is the one special token. Enough for prompt_pieces."""
    special_ids = frozenset({0})

    def __init__(self):
        self.pieces: dict[int, str] = {0: "<s>"}

    def encode(self, text: str) -> Encoding:
        ids, spans = [], []
        for m in re.finditer(r"<s>|\S+|\s+", text):
            tid = 0 if m[0] == "<s>" else len(self.pieces)
            self.pieces.setdefault(tid, m[0])
            ids.append(tid)
            spans.append(m.span())
        return Encoding(ids, spans)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


class FakeLLM:
    """Streams fixed deltas and keeps a step trace like the engine's: a prefill step over the prompt
    (part of it from the prefix cache), then one decode step per further token."""
    device_name = "cpu (2 threads)"
    config = type("C", (), {"name": "FakeLM"})()

    def __init__(self, deltas, prompt_tokens=18, cached=15):
        self.deltas, self.prompt_tokens, self.cached = deltas, prompt_tokens, cached
        self.records: list[StepRecord] = [StepRecord(0, 0.0, 0.0, 0.01, 0.0)]   # someone else's step
        self.closed = False
        self.seen_max_tokens = None
        self.tokenizer = FakeTokenizer()

    def format_prompt(self, prompt: str, chat: bool) -> str:
        return f"<s>user {prompt} <s>assistant " if chat else prompt

    def num_steps(self):
        return len(self.records)

    def trace_since(self, step=0):
        return [r for r in self.records if r.step >= step]

    def _step(self, kind, n, before, cached=0):
        entry = ScheduledEntry("req-7", 7, kind, n, before, cached)
        self.records.append(StepRecord(len(self.records), 0.0, 0.001, 0.02, 0.001, entries=[entry]))

    def stream(self, prompt, params, chat=False):
        self.seen_max_tokens = params.max_tokens
        try:
            for i, d in enumerate(self.deltas[:params.max_tokens]):
                if i == 0:
                    self._step("prefill", self.prompt_tokens - self.cached, self.cached, self.cached)
                else:
                    self._step("decode", 1, self.prompt_tokens + i - 1)
                last = i == min(len(self.deltas), params.max_tokens) - 1
                yield _Ev("req-7", 100 + i, d, last, "length" if last else None)
        finally:
            self.closed = True


@dataclass
class FakeHandle:
    status: EngineStatus = EngineStatus.READY
    _llm: object = None
    started: bool = False
    random_weights: bool = False
    detail: str = "loaded in 0.1 s on cpu (2 threads)"

    def start(self):
        self.started = True

    def snapshot(self):
        return EngineSnapshot(self.status, self.detail, self.random_weights)

    @property
    def llm(self):
        return self._llm
