"""EngineLoop: one LLMEngine stepping on a background thread, shared by any number of callers.

    caller threads                       loop thread
    ─────────────                        ───────────
    stream(prompt) ──add_request──►  ┌─ while requests: engine.step() ─┐
         ▲                           │   events ─► the request's queue │
         └──── queue.get() ◄─────────┘   (its last: + RequestOutput)   ┘

Every reader of the app submits through the same loop, so their requests share steps: the app
itself is served by continuous batching. A caller that stops iterating aborts its request, so an
abandoned browser tab frees its KV blocks at once.

Only the loop thread ever touches the engine. Callers post commands (add, abort, read) to an inbox
that the loop runs between two steps, so a new request waits at most one step to join the batch —
no lock is held across a forward pass, which would let the loop starve callers.

Faults stay contained: an exception in a step fails the requests that step was running (their callers
get an error) and the loop serves the rest; anything that ends the thread itself (SystemExit, a bug in
the loop) is kept in `failure`, every waiting caller is woken with an error, and later calls raise
at once instead of waiting forever. At interpreter exit every loop finishes its step and stops before
torch's thread pools are torn down (a forward pass still running then aborts the process).

After every step the loop publishes `stats`, one small plain record (LoopStats) that any number of
readers may look at without asking the loop anything: the live dashboard reads only that.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import dataclasses
import itertools
import queue
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .llm_engine import LLMEngine
from .loop_stats import LoopStats, TokenRate
from .outputs import RequestOutput, StreamEvent
from .sampling_params import SamplingParams

_LOOPS: "weakref.WeakSet[EngineLoop]" = weakref.WeakSet()


@atexit.register
def _close_all_loops() -> None:
    """On the way out (a server's SIGTERM, sys.exit): stop each loop between two steps."""
    for loop in list(_LOOPS):
        loop.close()


@dataclass(slots=True)
class LoopItem:
    """What the loop thread hands a caller: an event, or an error. The event that ends a request's last
    completion carries the request's RequestOutput."""
    event: StreamEvent | None
    output: RequestOutput | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class Submission:
    request_id: str
    output_ids: list[str]                  # one per sample: request_id, or request_id:i when n > 1
    items: queue.SimpleQueue               # LoopItems of every sample, in generation order


class _Aborted(Exception):
    """Posted to a stream that abort_soon() ended."""


class EngineClosed(RuntimeError):
    """The loop was closed (the server is stopping) while a caller still waited on it: not a fault."""


class EngineLoop:
    def __init__(self, engine: LLMEngine, name: str = "engine-loop"):
        self.engine = engine
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()   # (fn, future) commands for the loop thread
        self._wake = threading.Condition()                      # only for sleeping while there is no work
        self._routes: dict[str, tuple[str, queue.SimpleQueue]] = {}   # completion id -> (request id, its queue)
        #                                                         (loop thread only)
        self._ids = itertools.count()
        self._closed = False
        self.failure: str | None = None                         # why the loop thread ended, if it did
        self.stats = LoopStats()
        self._rate = TokenRate()
        self._publish()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        _LOOPS.add(self)

    @property
    def alive(self) -> bool:
        """False once the loop thread has ended (closed, or killed by a fault: see `failure`)."""
        return self._thread.is_alive() and self.failure is None

    # -- callers' side -------------------------------------------------------------------------
    def _call(self, fn):
        """Run fn() on the loop thread between two steps and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            return fn()
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._wake:
            if self.failure is not None:
                raise RuntimeError(f"the engine thread has stopped ({self.failure})")
            if self._closed:
                raise EngineClosed("the engine loop is closed")
            self._inbox.put((fn, future))
            self._wake.notify()
        return future.result()

    def _call_if_open(self, fn) -> None:
        """For clean-up paths: after close() there is nothing left to clean."""
        try:
            self._call(fn)
        except RuntimeError:
            if not self._closed and self.failure is None:
                raise

    def submit(self, prompt: str | list[int], params: SamplingParams, prompt_text: str | None = None,
               source: str = "req") -> Submission:
        """Hand one request to the engine thread. `source` says who sent it and begins its request id
        ("req-7", "api-8"), so a view of the batch (the dashboard) can tell the HTTP API's requests from
        the readers' without asking anyone."""
        if not (isinstance(source, str) and source.isidentifier()):
            raise ValueError(f"source must be a short word such as 'api', got {source!r}")
        request_id = f"{source}-{next(self._ids)}"
        items: queue.SimpleQueue = queue.SimpleQueue()

        def add() -> Submission:
            names = self.engine.add_request(request_id, prompt, params, prompt_text=prompt_text)
            for name in names:
                self._routes[name] = (request_id, items)
            return Submission(request_id, names, items)
        return self._call(add)

    def _items(self, sub: Submission) -> Iterator[LoopItem]:
        """A request's items until every sample has finished; aborts it if the caller stops early."""
        pending = set(sub.output_ids)
        try:
            while pending:
                try:
                    item = sub.items.get(timeout=1.0)
                except queue.Empty:          # belt and braces: a dead loop posts errors, but never hang
                    if self._thread.is_alive():
                        continue
                    item = LoopItem(None, error=RuntimeError(f"the engine thread has stopped ({self.failure})")
                                    if self.failure else EngineClosed("the engine loop is closed"))
                if isinstance(item.error, _Aborted):
                    return                           # abort_soon(): the stream just ends
                if isinstance(item.error, EngineClosed):
                    raise EngineClosed(str(item.error))
                if item.error is not None:
                    raise RuntimeError(f"an engine step failed: {item.error}") from item.error
                yield item
                if item.event.finished:
                    pending.discard(item.event.request_id)
        finally:
            def release() -> None:
                if pending:                                  # stopped early: free its blocks now
                    self.engine.abort(sub.request_id)
                for name in sub.output_ids:
                    self._routes.pop(name, None)
                self.engine.take_output(sub.request_id)     # an aborted output nobody will read
            self._call_if_open(release)

    def stream(self, prompt: str | list[int], params: SamplingParams,
               prompt_text: str | None = None, source: str = "req") -> Iterator[StreamEvent]:
        """One event per generated token (the completions of an n > 1 request interleave)."""
        for item in self._items(self.submit(prompt, params, prompt_text, source)):
            yield item.event

    def generate(self, prompts: list[tuple[list[int], str | None, SamplingParams]],
                 on_output: Callable[[], None] | None = None) -> list[RequestOutput]:
        """Submit every (token ids, text, params) at once, so they are batched together; one RequestOutput
        per prompt, in order. `on_output` is called as each is collected (a progress bar)."""
        subs = []
        try:
            for ids, text, params in prompts:    # one by one: a refused prompt leaves the earlier ones listed
                subs.append(self.submit(ids, params, text))
            outputs = []
            for sub in subs:
                done = [item.output for item in self._items(sub) if item.output is not None]
                if not done:
                    raise RuntimeError(f"request {sub.request_id} ended without an output")
                outputs.append(done[0])
                if on_output is not None:
                    on_output()
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

    def abort_soon(self, request_id: str) -> None:
        """Abort a request at the next gap between steps, without waiting (safe on an event loop): its
        blocks are freed then, and its stream ends. For a reader who left while the reply was running."""
        def abort() -> None:
            self.engine.abort(request_id)
            for rid, q in list(self._routes.values()):
                if rid == request_id:
                    q.put(LoopItem(None, error=_Aborted()))
        with self._wake:
            if self._closed or self.failure is not None:
                return
            self._inbox.put((abort, concurrent.futures.Future()))
            self._wake.notify()

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
        try:
            while True:
                with self._wake:
                    while not self._closed and self._inbox.empty() and not self.engine.has_unfinished():
                        self._wake.wait()
                if self._closed:
                    break
                self._run_commands()
                if self.engine.has_unfinished():
                    self._step()
        except BaseException as exc:                         # SystemExit, a bug here: say so, wake everyone
            self.failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            print(f"[engine] the engine loop thread stopped: {self.failure}", file=sys.stderr, flush=True)
            traceback.print_exc()
        with self._wake:                                     # no command can arrive after this
            ended = (RuntimeError(f"the engine thread has stopped ({self.failure})") if self.failure
                     else EngineClosed("the engine loop is closed"))
            while not self._inbox.empty():
                _, future = self._inbox.get()
                future.set_exception(ended)
            for q in {id(q): q for _, q in self._routes.values()}.values():
                q.put(LoopItem(None, error=ended))

    def _run_commands(self) -> None:
        ran = False
        while not self._inbox.empty():
            fn, future = self._inbox.get()
            ran = True
            try:
                future.set_result(fn())
            except BaseException as exc:                     # the caller re-raises it
                future.set_exception(exc)
        if ran:                                              # an abort frees blocks without a step
            self._publish()

    def _step(self) -> None:
        try:
            events = self.engine.step()
            routed = []
            for ev in events:
                request_id, q = self._routes.get(ev.request_id, (ev.request_id, None))
                # the request's output is ready once its last completion has ended (None before that)
                output = self.engine.take_output(request_id) if ev.finished else None
                routed.append((q, LoopItem(ev, output)))
        except Exception as exc:
            self._fail_step(exc)
            return
        self._publish(len(events))         # first: a caller holding a step's token sees that step in `stats`
        for q, item in routed:
            if q is not None:
                q.put(item)

    def _fail_step(self, exc: Exception) -> None:
        """Fail the requests the broken step was running (its state may be half-updated); requests still
        waiting to be admitted never ran and are kept, so the loop goes on serving them."""
        traceback.print_exception(exc, file=sys.stderr)
        touched = self.engine.started_request_ids()
        if not touched:                  # nothing was running: the step was admitting the waiting ones
            touched = set(self.engine.unfinished_request_ids())
        for request_id in touched:
            self.engine.abort(request_id)
        for request_id, q in list(self._routes.values()):
            if request_id in touched:
                q.put(LoopItem(None, error=exc))
        self._publish()

    def _publish(self, generated: int = 0) -> None:
        """Refresh `stats` (a few attribute reads). `generated`: tokens the step just produced."""
        old, now = self.stats, time.monotonic()
        new = LoopStats.of(self.engine, old, generated, now=now)
        rate = self._rate.update(new, stepped=new.last is not old.last)
        self.stats = dataclasses.replace(new, tokens_per_s=rate)
