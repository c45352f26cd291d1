"""EngineLoop: one LLMEngine stepping on a background thread, shared by any number of callers.

    caller threads                       loop thread
    ─────────────                        ───────────
    stream(prompt) ──add_request──►  ┌─ while requests: engine.step() ─┐
         ▲                           │   events ─► the request's queue │
         └──── queue.get() ◄─────────┘   (finished: + RequestOutput)   ┘

Every reader of the app submits through the same loop, so their requests share steps: the app
itself is served by continuous batching. A caller that stops iterating aborts its request, so an
abandoned browser tab frees its KV blocks at once.

Only the loop thread ever touches the engine. Callers post commands (add, abort, read) to an inbox
that the loop runs between two steps, so a new request waits at most one step to join the batch —
no lock is held across a forward pass, which would let the loop starve callers.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
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
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()   # (fn, future) commands for the loop thread
        self._wake = threading.Condition()                      # only for sleeping while there is no work
        self._routes: dict[str, queue.SimpleQueue] = {}         # output id -> its request's queue (loop thread only)
        self._ids = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- callers' side -------------------------------------------------------------------------
    def _call(self, fn):
        """Run fn() on the loop thread between two steps and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._wake:
            if self._closed:
                raise RuntimeError("the engine loop is closed")
            self._inbox.put((fn, future))
            self._wake.notify()
        return future.result()

    def _call_if_open(self, fn) -> None:
        """For clean-up paths: after close() there is nothing left to clean."""
        try:
            self._call(fn)
        except RuntimeError:
            if not self._closed:
                raise

    def submit(self, prompt: str | list[int], params: SamplingParams, prompt_text: str | None = None) -> Submission:
        request_id = f"req-{next(self._ids)}"
        items: queue.SimpleQueue = queue.SimpleQueue()

        def add() -> Submission:
            names = self.engine.add_request(request_id, prompt, params, prompt_text=prompt_text)
            for name in names:
                self._routes[name] = items
            return Submission(request_id, names, items)
        return self._call(add)

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
            def release() -> None:
                if pending:                                  # stopped early: free its blocks now
                    self.engine.abort(sub.request_id)
                for name in sub.output_ids:
                    self._routes.pop(name, None)
                    self.engine.take_output(name)            # an aborted output nobody will read
            self._call_if_open(release)

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
                self._call_if_open(lambda: self.engine.abort(sub.request_id))
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
            def abort_unfinished() -> None:                   # after an error: abort what is still running
                for sub in subs:
                    if any(name in self._routes for name in sub.output_ids):
                        self.engine.abort(sub.request_id)
                        for name in sub.output_ids:
                            self._routes.pop(name, None)
            if subs:
                self._call_if_open(abort_unfinished)

    def read(self, fn):
        """Call fn() between two steps (for reading engine state from another thread)."""
        return self._call(fn)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)

    # -- the loop thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and self._inbox.empty() and not self.engine.has_unfinished():
                    self._wake.wait()
            if self._closed:
                break
            self._run_commands()
            if self.engine.has_unfinished():
                self._step()
        with self._wake:                                     # no command can arrive after this
            while not self._inbox.empty():
                _, future = self._inbox.get()
                future.set_exception(RuntimeError("the engine loop is closed"))

    def _run_commands(self) -> None:
        while not self._inbox.empty():
            fn, future = self._inbox.get()
            try:
                future.set_result(fn())
            except BaseException as exc:                     # the caller re-raises it
                future.set_exception(exc)

    def _step(self) -> None:
        try:
            events = self.engine.step()
            items = [LoopItem(ev, self.engine.take_output(ev.request_id) if ev.finished else None)
                     for ev in events]
        except Exception as exc:                             # fail the open requests, keep serving new ones
            for q in {id(q): q for q in self._routes.values()}.values():   # each request once
                q.put(LoopItem(None, error=exc))
            for request_id in self.engine.unfinished_request_ids():
                self.engine.abort(request_id)
            return
        for item in items:
            q = self._routes.get(item.event.request_id)
            if q is not None:
                q.put(item)
