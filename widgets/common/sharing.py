"""Fair sharing of the one engine: per-session limits, and a global admission queue for generations.

    reader = reader_of(doc)                     # one per browser (an anonymous cookie), else per page
    with reader.generation(should_stop, on_place) as seat:   # per-session limit, then a server-wide seat
        ... llm.stream(...)                     # reader.requests holds the ids: the dashboard's "yours"

* **Per session.** At most MAX_PER_SESSION generations of one reader run at once; one more gets a
  message (`Refused`), not a queue place: one tab cannot fill the server's seats.
* **Server-wide.** At most SEATS generations stream at once (each holds KV blocks and a share of every
  step); the rest wait in arrival order, and `on_place(n)` tells the widget its place while it waits,
  so a burst of readers queues visibly instead of exhausting memory. A waiter whose reader leaves
  (`should_stop()`) drops out of the queue.
* Prompt length and max_tokens limits stay with each widget (they say their own limits).
"""
from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict, deque
from contextlib import contextmanager

SEATS = 8
MAX_PER_SESSION = 2


class Refused(Exception):
    """A limit said no; the message is for the reader."""


class Admission:
    def __init__(self, seats: int = SEATS):
        self.seats = seats
        self._cond = threading.Condition()
        self._queue: deque[object] = deque()
        self.running = 0

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @contextmanager
    def seat(self, should_stop=lambda: False, on_place=lambda place: None):
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            told = None
            try:
                while True:
                    place = self._queue.index(ticket)
                    if place == 0 and self.running < self.seats:
                        break
                    if place != told:
                        told = place
                        on_place(place + 1)
                    if should_stop():
                        raise Refused("stopped while waiting for a seat")
                    self._cond.wait(0.25)
            finally:
                if self._queue and ticket in self._queue:
                    self._queue.remove(ticket)
                self._cond.notify_all()
            self.running += 1
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self._cond.notify_all()


# What a 2-core server admits at once, in one place (each waits in line, told its place, still cancellable):
ADMISSION = Admission()                 # replies streaming from the shared engine
BATCHING_RUNS = Admission(seats=2)      # batching-timeline runs: two private engines stepped flat out each
PARALLEL_RUNS = Admission(seats=1)      # parallelism runs: each starts worker processes that load the model


class Reader:
    """One browser session's share: its live generations and their request ids."""

    def __init__(self):
        self._lock = threading.Lock()
        self.active = 0
        self.requests: set[str] = set()      # request ids this reader has in the shared engine now

    @contextmanager
    def generation(self, should_stop=lambda: False, on_place=lambda place: None):
        with self._lock:
            if self.active >= MAX_PER_SESSION:
                raise Refused(f"this page already runs {self.active} generations (the limit per reader is "
                              f"{MAX_PER_SESSION}): stop one or wait for it to finish")
            self.active += 1
        try:
            with ADMISSION.seat(should_stop, on_place):
                yield self
        finally:
            with self._lock:
                self.active -= 1


_READERS: "weakref.WeakKeyDictionary[object, Reader]" = weakref.WeakKeyDictionary()
_BY_BROWSER: "OrderedDict[str, Reader]" = OrderedDict()      # newest last; the oldest dropped past a cap
_MAX_BROWSERS = 10_000
_LOCK = threading.Lock()
_ID = re.compile(r"[0-9a-f]{16}")


def _browser_id(doc) -> str | None:
    """The anonymous `reader` cookie that assets/widgets.js sets (absent on a browser's very first page)."""
    try:
        value = doc.session_context.request.cookies.get("reader")
    except AttributeError:
        return None
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def reader_of(doc) -> Reader:
    """The Reader of a session: one per browser (every tab of it), else one per page; a private one
    outside a session (tests, benchmarks)."""
    if doc is None:
        return Reader()
    key = _browser_id(doc)
    with _LOCK:
        if key is not None:
            reader = _BY_BROWSER.pop(key, None) or Reader()
            _BY_BROWSER[key] = reader
            while len(_BY_BROWSER) > _MAX_BROWSERS:
                _BY_BROWSER.popitem(last=False)
            return reader
        reader = _READERS.get(doc)
        if reader is None:
            reader = _READERS[doc] = Reader()
        return reader
