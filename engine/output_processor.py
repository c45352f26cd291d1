"""OutputProcessor: from the tokens the scheduler reports to what callers read.

    SequenceOutput(seq 7, [1542])      ─► detokenize (a short window) ─► stop strings ─► StreamEvent
    FinishedSequence(seq 7, "stop")    ─► RequestOutput (text, token ids, metrics), for take_output()

A stop string is found here, not in the scheduler (it takes text). The processor holds no
scheduler: process() returns the sequences a stop string ended, LLMEngine.step() asks the scheduler
to finish them, and the sequences the scheduler then frees come back through release() (vLLM's
OutputProcessor returns `reqs_to_abort` the same way). The event that ends a request is handed out
when its sequence is freed: at once under continuous batching, when the whole batch ends under
static batching (the reader waits for the batch, as they would).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .core.records import FinishedSequence, SequenceOutput
from .detokenizer import IncrementalDetokenizer
from .outputs import RequestMetrics, RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .spec_decode.stats import SpecDecodeStats

MAX_KEPT_OUTPUTS = 1024     # finished outputs waiting for take_output(); the oldest are dropped


@dataclass(slots=True)
class SampleState:
    """What the caller of one sample sees: its text so far, its tokens, when each came."""
    name: str                       # the output id: request_id, or request_id:i
    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_s: float
    detok: IncrementalDetokenizer | None
    token_ids: list[int] = field(default_factory=list)
    token_times_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    final_event: StreamEvent | None = None     # held until the sequence is freed
    spec: SpecDecodeStats = field(default_factory=SpecDecodeStats)   # its passes and drafts

    @property
    def text(self) -> str:
        return self.detok.emitted_text if self.detok is not None else ""


@dataclass(slots=True)
class RequestState:
    """One request's samples: the sequences not yet freed, and how many forks are still to come (a
    request with n samples runs as one sequence until its prompt is done, then forks n - 1 siblings)."""
    seq_ids: set[int]
    forks_to_come: int


class OutputProcessor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.samples: dict[int, SampleState] = {}            # seq_id -> state, while unfinished
        self.names: dict[str, int] = {}                       # output id -> seq_id, while unfinished
        self.requests: dict[str, RequestState] = {}          # request id -> its samples, while unfinished
        self.outputs: OrderedDict[str, RequestOutput] = OrderedDict()
        self._final: list[StreamEvent] = []                   # final events of freed sequences, not handed out

    def add(self, seq_id: int, request_id: str, name: str, prompt: str | None, prompt_token_ids: list[int],
            params: SamplingParams, arrival_s: float) -> None:
        self._track(SampleState(name, request_id, prompt or "", prompt_token_ids, params, arrival_s,
                                self._detokenizer(params)), seq_id)
        self.requests[request_id] = RequestState({seq_id}, params.n - 1)

    def _detokenizer(self, params: SamplingParams) -> IncrementalDetokenizer | None:
        return IncrementalDetokenizer(self.tokenizer, params.stop) if self.tokenizer is not None else None

    def _track(self, state: SampleState, seq_id: int) -> None:
        self.samples[seq_id] = state
        self.names[state.name] = seq_id

    # -- one step ------------------------------------------------------------------------------
    def process(self, outputs: list[SequenceOutput]) -> tuple[list[StreamEvent], list[int]]:
        """Events for this step's tokens, and the sequences a stop string ended (for the scheduler to
        stop). A sample's last event waits until its sequence is freed (release, then final_events)."""
        now = time.perf_counter()
        events, stopped = [], []
        for out in outputs:
            state = self.samples.get(out.seq_id) or self._forked(out)
            state.spec.add(out.verified, len(out.new_token_ids))
            events += self._tokens(state, out, now)
            if state.detok is not None and state.detok.stopped and out.finish_reason is None:
                stopped.append(out.seq_id)
        return events, stopped

    def _forked(self, out: SequenceOutput) -> SampleState:
        """A sibling sample's first output: it shares its parent's prompt and starts its own text."""
        parent = self.samples[out.parent_seq_id]
        request = self.requests[parent.request_id]
        index = parent.params.n - request.forks_to_come     # siblings split off in order: 1, 2, ..., n - 1
        state = SampleState(f"{parent.request_id}:{index}", parent.request_id, parent.prompt,
                            parent.prompt_token_ids, parent.params, parent.arrival_s, self._detokenizer(parent.params))
        self._track(state, out.seq_id)
        request.seq_ids.add(out.seq_id)
        request.forks_to_come -= 1
        return state

    def _tokens(self, state: SampleState, out: SequenceOutput, now: float) -> list[StreamEvent]:
        events = []
        for i, token in enumerate(out.new_token_ids):
            last = i == len(out.new_token_ids) - 1
            reason = out.finish_reason if last else None
            state.token_ids.append(token)
            state.token_times_s.append(now)
            detok = state.detok
            is_eos = reason == "stop"               # the scheduler's "stop" is always an EOS token
            delta = detok.add(token) if detok is not None and not is_eos else ""
            if detok is not None and detok.stopped:
                reason = "stop"                     # a stop string: process() reports the sequence
            if reason is not None:
                state.finish_reason = reason
                delta += detok.flush() if detok is not None else ""
            event = StreamEvent(state.name, token, delta, state.text, reason is not None, reason)
            if reason is not None:
                state.final_event = event           # handed out when the sequence is freed
                break
            events.append(event)
        return events

    # -- finished sequences --------------------------------------------------------------------
    def release(self, finished: list[FinishedSequence], now: float | None = None) -> list[str]:
        """Build the RequestOutput of every freed sequence; their final events wait for final_events()
        (an aborted sample has none). Returns their output ids."""
        now = time.perf_counter() if now is None else now
        names = []
        for f in finished:
            state = self.samples.pop(f.seq_id)
            del self.names[state.name]
            aborted = f.finish_reason == "abort"
            if state.final_event is not None and not aborted:
                self._final.append(state.final_event)
            metrics = RequestMetrics(state.arrival_s, state.token_times_s[0] if state.token_times_s else None,
                                     state.token_times_s, now, state.spec)
            self.outputs[state.name] = RequestOutput(
                state.name, state.prompt, state.text, state.token_ids,
                "abort" if aborted else state.finish_reason or f.finish_reason, metrics, list(state.prompt_token_ids))
            while len(self.outputs) > MAX_KEPT_OUTPUTS:
                self.outputs.popitem(last=False)
            request = self.requests[state.request_id]
            request.seq_ids.discard(f.seq_id)
            if not state.token_ids:
                request.forks_to_come = 0           # ended before its prompt was done: no forks will come
            if not request.seq_ids and request.forks_to_come == 0:
                del self.requests[state.request_id]
            names.append(state.name)
        return names

    def final_events(self) -> list[StreamEvent]:
        """The last events of the samples freed since the previous call, handed out once."""
        events, self._final = self._final, []
        return events

    def seq_ids(self, request_id: str) -> list[int]:
        request = self.requests.get(request_id)
        return sorted(request.seq_ids) if request else []
