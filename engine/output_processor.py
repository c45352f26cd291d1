"""OutputProcessor: from the tokens the scheduler reports to what callers read.

    SequenceOutput(seq 7, [1542])      ─► detokenize (a short window) ─► stop strings ─► StreamEvent
    FinishedSequence(seq 7, "stop")    ─► its CompletionOutput; once every sample of the request has
                                          ended, one RequestOutput (n completions), for take_output()

A stop string is found here, not in the scheduler (it takes text). The processor holds no
scheduler: process() returns the sequences a stop string ended, LLMEngine.step() asks the scheduler
to finish them, and the sequences the scheduler then frees come back through release() (vLLM's
OutputProcessor returns `reqs_to_abort` the same way). The event that ends a sample is handed out
when its sequence is freed: at once under continuous batching, when the whole batch ends under
static batching (the reader waits for the batch, as they would).
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .core.records import FinishedSequence, SequenceOutput, TokenLogprobs
from .detokenizer import IncrementalDetokenizer
from .outputs import CompletionOutput, Logprob, PromptLogprobs, RequestMetrics, RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .spec_decode.stats import SpecDecodeStats

MAX_KEPT_OUTPUTS = 1024     # finished outputs waiting for take_output(); the oldest are dropped


@dataclass(slots=True)
class SampleState:
    """What the caller of one sample (one completion) sees: its text so far, its tokens, their logprobs."""
    name: str                       # the completion's id: request_id, or request_id:i
    index: int                      # which of the request's n completions
    request: RequestState
    detok: IncrementalDetokenizer | None
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[dict[int, Logprob]] | None = None    # with params.logprobs
    cumulative_logprob: float | None = None             # with params.logprobs
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    final_event: StreamEvent | None = None     # held until the sequence is freed

    @property
    def text(self) -> str:
        return self.detok.emitted_text if self.detok is not None else ""


@dataclass(slots=True)
class RequestState:
    """One request: its prompt, the samples not yet freed, how many forks are still to come (a request with
    n samples runs as one sequence until its prompt is done, then forks n - 1 siblings), and the
    completions of the samples already ended."""
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    metrics: RequestMetrics
    seq_ids: set[int]
    forks_to_come: int
    completions: list[CompletionOutput] = field(default_factory=list)
    prompt_logprobs: PromptLogprobs | None = None      # with params.prompt_logprobs: filled as chunks run


class OutputProcessor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.samples: dict[int, SampleState] = {}            # seq_id -> state, while unfinished
        self.names: dict[str, int] = {}                       # output id -> seq_id, while unfinished
        self.requests: dict[str, RequestState] = {}          # request id -> its state, while unfinished
        self.outputs: OrderedDict[str, RequestOutput] = OrderedDict()   # request id -> output, once all ended
        self._final: list[StreamEvent] = []                   # final events of freed sequences, not handed out

    def add(self, seq_id: int, request_id: str, name: str, prompt: str | None, prompt_token_ids: list[int],
            params: SamplingParams, arrival_s: float) -> None:
        request = RequestState(request_id, prompt, prompt_token_ids, params,
                               RequestMetrics(arrival_s, spec=SpecDecodeStats()), {seq_id}, params.n - 1)
        if params.prompt_logprobs is not None:
            request.prompt_logprobs = [None] * len(prompt_token_ids)
        self.requests[request_id] = request
        self._track(self._sample(name, 0, request), seq_id)

    def _sample(self, name: str, index: int, request: RequestState) -> SampleState:
        p = request.params
        detok = IncrementalDetokenizer(self.tokenizer, p.stop) if self.tokenizer is not None else None
        state = SampleState(name, index, request, detok)
        if p.logprobs is not None:
            state.logprobs, state.cumulative_logprob = [], 0.0
        return state

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
            state.request.metrics.spec.add(out.verified, len(out.new_token_ids))
            events += self._tokens(state, out, now)
            if state.detok is not None and state.detok.stopped and out.finish_reason is None:
                stopped.append(out.seq_id)
        return events, stopped

    def add_prompt_logprobs(self, scored: dict[int, tuple[int, list[TokenLogprobs]]]) -> None:
        """A step's prompt_logprobs: seq_id -> (position of the first token scored, one entry per token).
        A chunk computed again after a preemption writes the same values again."""
        for seq_id, (first, entries) in scored.items():
            state = self.samples.get(seq_id)
            if state is None or state.request.prompt_logprobs is None:
                continue                            # aborted while the step ran
            for i, entry in enumerate(entries):
                state.request.prompt_logprobs[first + i] = self._logprob_dict(entry)

    def _forked(self, out: SequenceOutput) -> SampleState:
        """A sibling sample's first output: it shares its parent's prompt and starts its own text."""
        request = self.samples[out.parent_seq_id].request
        index = request.params.n - request.forks_to_come     # siblings split off in order: 1, 2, ..., n - 1
        state = self._sample(f"{request.request_id}:{index}", index, request)
        self._track(state, out.seq_id)
        request.seq_ids.add(out.seq_id)
        request.forks_to_come -= 1
        return state

    def _tokens(self, state: SampleState, out: SequenceOutput, now: float) -> list[StreamEvent]:
        events, metrics, params = [], state.request.metrics, state.request.params
        for i, token in enumerate(out.new_token_ids):
            last = i == len(out.new_token_ids) - 1
            reason = out.finish_reason if last else None
            stop_reason = out.stop_reason if last else None
            state.token_ids.append(token)
            metrics.token_times_s.append(now)
            if metrics.first_token_s is None:
                metrics.first_token_s = now
            logprobs = None
            if out.logprobs is not None and state.logprobs is not None:
                logprobs = self._logprob_dict(out.logprobs[i])
                state.logprobs.append(logprobs)
                state.cumulative_logprob += out.logprobs[i].logprob
            detok = state.detok
            is_eos = reason == "stop" and stop_reason is None     # EOS is never text; a stop token may be
            check_stop = len(state.token_ids) > params.min_tokens
            delta = detok.add(token, check_stop) if detok is not None and not is_eos else ""
            if detok is not None and detok.stopped:
                reason, stop_reason = "stop", detok.stop_string   # a stop string: process() reports the sequence
            if reason is not None:
                state.finish_reason, state.stop_reason = reason, stop_reason
                delta += detok.flush() if detok is not None else ""
            event = StreamEvent(state.name, token, delta, state.text, reason is not None, reason, stop_reason,
                                state.index, logprobs)
            if reason is not None:
                state.final_event = event           # handed out when the sequence is freed
                break
            events.append(event)
        return events

    def _logprob_dict(self, entry: TokenLogprobs) -> dict[int, Logprob]:
        """vLLM's shape: the chosen (or prompt) token first, then the top k, each with its text."""
        decode = (lambda t: self.tokenizer.decode([t])) if self.tokenizer is not None else (lambda t: None)
        out = {entry.token_id: Logprob(entry.logprob, entry.rank, decode(entry.token_id))}
        for rank, (token, logprob) in enumerate(zip(entry.top_token_ids, entry.top_logprobs), start=1):
            if token not in out:
                out[token] = Logprob(logprob, rank, decode(token))
        return out

    # -- finished sequences --------------------------------------------------------------------
    def release(self, finished: list[FinishedSequence], now: float | None = None) -> list[str]:
        """Record the completion of every freed sequence (its final event waits for final_events(); an
        aborted sample has none); a request whose samples have all ended gets its RequestOutput. Returns
        the freed samples' output ids."""
        now = time.perf_counter() if now is None else now
        names = []
        for f in finished:
            state = self.samples.pop(f.seq_id)
            del self.names[state.name]
            aborted = f.finish_reason == "abort"
            if state.final_event is not None and not aborted:
                self._final.append(state.final_event)
            request = state.request
            request.completions.append(CompletionOutput(
                state.index, state.text, state.token_ids, state.cumulative_logprob, state.logprobs,
                "abort" if aborted else state.finish_reason or f.finish_reason,
                None if aborted else state.stop_reason))
            request.seq_ids.discard(f.seq_id)
            if not state.token_ids:
                request.forks_to_come = 0           # ended before its prompt was done: no forks will come
            if not request.seq_ids and request.forks_to_come == 0:
                self._finish(request, now)
            names.append(state.name)
        return names

    def _finish(self, request: RequestState, now: float) -> None:
        del self.requests[request.request_id]
        request.metrics.finished_s = now
        self.outputs[request.request_id] = RequestOutput(
            request.request_id, request.prompt, list(request.prompt_token_ids), request.prompt_logprobs,
            sorted(request.completions, key=lambda c: c.index), True, request.metrics)
        while len(self.outputs) > MAX_KEPT_OUTPUTS:
            self.outputs.popitem(last=False)

    def final_events(self) -> list[StreamEvent]:
        """The last events of the samples freed since the previous call, handed out once."""
        events, self._final = self._final, []
        return events

    def seq_ids(self, request_id: str) -> list[int]:
        request = self.requests.get(request_id)
        return sorted(request.seq_ids) if request else []
