"""EngineLoop: one LLMEngine stepping on a background thread, shared by any number of callers.

    caller threads                       loop thread
    ─────────────                        ───────────
    stream(prompt) ──add_request──►  ┌─ while requests: engine.step() ─┐
         ▲                           │   events ─► the request's queue │
         └──── queue.get() ◄─────────┘   (finished: + RequestOutput)   ┘

Every reader of the app submits through the same loop, so their requests share steps: the app
itself is served by continuous batching. A caller that stops iterating aborts its request, so an
abandoned browser tab frees its KV blocks at once.
"""
from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from .llm_engine import LLMEngine
from .outputs import RequestOutput, StreamEvent
from .sampling_params import SamplingParams


@dataclass(slots=True)
class LoopItem:
    """What the loop thread hands a caller: an event (with the output once finished) or an error."""
    event: StreamEvent | None
    output: RequestOutput | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class Submission:
    request_id: str
    output_ids: list[str]                  # one per sample: request_id, or request_id:i when n > 1
    items: queue.SimpleQueue               # LoopItems of every sample, in generation order


class EngineLoop:
    def __init__(self, engine: LLMEngine, name: str = "engine-loop"):
        self.engine = engine
        self._lock = threading.Condition()         # guards the engine: add/abort on callers' threads vs step
        self._routes: dict[str, queue.SimpleQueue] = {}   # output id -> its request's queue
        self._ids = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- callers' side -------------------------------------------------------------------------
    def submit(self, prompt: str | list[int], params: SamplingParams, prompt_text: str | None = None) -> Submission:
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine loop is closed")
            request_id = f"req-{next(self._ids)}"
            names = self.engine.add_request(request_id, prompt, params, prompt_text=prompt_text)
            sub = Submission(request_id, names, queue.SimpleQueue())
            for name in names:
                self._routes[name] = sub.items
            self._lock.notify()
        return sub

    def _items(self, sub: Submission) -> Iterator[LoopItem]:
        """A request's items until every sample has finished; aborts it if the caller stops early."""
        pending = set(sub.output_ids)
        try:
            while pending:
                item = sub.items.get()
                if item.error is not None:
                    raise RuntimeError("an engine step failed") from item.error
                yield item
                if item.event.finished:
                    pending.discard(item.event.request_id)
        finally:
            with self._lock:
                if pending:                                  # stopped early: free its blocks now
                    self.engine.abort(sub.request_id)
                for name in sub.output_ids:
                    self._routes.pop(name, None)
                    self.engine.take_output(name)            # an aborted output nobody will read

    def stream(self, prompt: str | list[int], params: SamplingParams,
               prompt_text: str | None = None) -> Iterator[StreamEvent]:
        """One event per generated token (the samples of an n > 1 request interleave)."""
        for item in self._items(self.submit(prompt, params, prompt_text)):
            yield item.event

    async def astream(self, prompt: str | list[int], params: SamplingParams,
                      prompt_text: str | None = None) -> AsyncIterator[StreamEvent]:
        """stream() for asyncio code: waiting for the next token happens off the event loop."""
        sub = self.submit(prompt, params, prompt_text)
        items = self._items(sub)
        aloop = asyncio.get_running_loop()
        try:
            while (item := await aloop.run_in_executor(None, next, items, None)) is not None:
                yield item.event
        finally:
            if items.gi_running:           # cancelled while a worker waits for the next token: wake it
                with self._lock:
                    self.engine.abort(sub.request_id)
                sub.items.put(LoopItem(None, error=asyncio.CancelledError()))
            else:
                items.close()              # stopped early: _items aborts the request

    def generate(self, prompts: list[tuple[str | list[int], str | None]], params: SamplingParams) -> list[RequestOutput]:
        """Submit every prompt at once, so they are batched together; n outputs per prompt, in order."""
        subs = []
        try:
            subs = [self.submit(p, params, text) for p, text in prompts]
            outputs = []
            for sub in subs:
                done = {item.event.request_id: item.output for item in self._items(sub) if item.event.finished}
                outputs += [done[name] for name in sub.output_ids]
            return outputs
        finally:
            for sub in subs:                                  # after an error: abort what is still running
                with self._lock:
                    if any(name in self._routes for name in sub.output_ids):
                        self.engine.abort(sub.request_id)
                        for name in sub.output_ids:
                            self._routes.pop(name, None)

    def read(self, fn):
        """Call fn() between two steps (for reading engine state from another thread)."""
        with self._lock:
            return fn()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join(timeout=10)

    # -- the loop thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self.engine.has_unfinished():
                    self._lock.wait()
                if self._closed:
                    return
                try:
                    events = self.engine.step()
                    items = [LoopItem(ev, self.engine.take_output(ev.request_id) if ev.finished else None)
                             for ev in events]
                except Exception as exc:                     # fail the open requests, keep serving new ones
                    for q in {id(q): q for q in self._routes.values()}.values():   # each request once
                        q.put(LoopItem(None, error=exc))
                    for request_id in self.engine.unfinished_request_ids():
                        self.engine.abort(request_id)
                    continue
                for item in items:
                    q = self._routes.get(item.event.request_id)
                    if q is not None:
                        q.put(item)
