"""Background jobs for one widget: debounce, supersede, cancel, and hand results back to the page.

A widget never computes on the session's event loop (that would freeze the page for every reader of
this tab). It hands a function to its ``JobRunner``:

    runner = JobRunner(on_busy=self._show_busy)             # in the widget's constructor
    runner.submit(work, on_done, debounce_ms=120)            # on every input change

    keystroke ─► submit ─(debounce: a newer submit cancels this one)─► work(job) on a pool thread
                                                                             │ job.post(partial)
                                                       on_progress(partial) ◄┤ (latest one only)
                                                       on_done(result)      ◄┘ on the session's loop

* **Supersede.** Each ``submit`` cancels the job before it: a pending one never starts, a running one
  sees ``job.cancelled`` (``work`` checks it between pieces, or calls ``job.check()``), and whatever
  it returns is dropped. Only the newest job's results reach the page.
* **Cancel.** ``runner.cancel()`` (a Stop button) cancels the current job; ``runner.close()`` also
  refuses new ones and runs when the reader leaves the page (the websocket closes, or the session is
  destroyed), so an abandoned tab stops its work and frees what the work held (``work`` frees it in
  ``finally``).
* **Errors.** An exception in ``work`` becomes a one-line message for ``on_error`` (the traceback
  goes to the server log), never a traceback on the page.

Callbacks run with the session's document lock held (``doc.add_next_tick_callback``, the one
document method Bokeh allows from other threads). Without a session (unit tests, benchmarks)
they run on the worker thread itself; ``wait_idle()`` lets a test wait for them.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from engine import EngineClosed, SandboxFreed
from widgets.common.sandboxes import PageClosed, current_page, owned_by, page_sandboxes

log = logging.getLogger(__name__)

# Raised inside work when the reader or the server went away mid-job: its page closed and freed its
# private engines (or closed before the work asked for one), or the server is stopping. Not a fault:
# there is nobody to tell, and a traceback in the log would read as one.
ENDED = (SandboxFreed, PageClosed, EngineClosed)

# Shared by every session of the server: light widget work is short, and two CPU cores cannot
# run more than a few jobs at once anyway. Long jobs (a generation) get a thread of their own.
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="widget-job")


class Cancelled(Exception):
    """Raised by ``job.check()`` inside ``work`` once the job is superseded or cancelled."""


def error_message(exc: BaseException) -> str:
    """A short, reader-facing line for an exception (no traceback, no file paths)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 160 else text[:157] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Job:
    """One submitted piece of work, as ``work(job)`` sees it."""

    def __init__(self, runner: "JobRunner", number: int, callbacks: tuple):
        self._runner, self.number, self.callbacks = runner, number, callbacks
        self._cancel = threading.Event()
        self._on_cancel: list[Callable[[], None]] = []
        self.timer: threading.Timer | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()
        if self.timer is not None:
            self.timer.cancel()
        for fn in self._on_cancel:
            try:
                fn()
            except Exception:              # clean-up must not break the canceller (the event loop)
                log.exception("%s: a cancel callback failed", self._runner._name)

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` as soon as the job is cancelled (at once if it already is): for work that
        waits on something else, e.g. aborting an engine request instead of waiting for its next token.
        ``fn`` runs on the cancelling thread (possibly the event loop): it must not block."""
        self._on_cancel.append(fn)
        if self.cancelled:
            fn()

    def check(self) -> None:
        """Raise ``Cancelled`` if a newer input or the reader leaving made this job pointless."""
        if self._cancel.is_set():
            raise Cancelled()

    def post(self, value: Any) -> None:
        """Send a partial result to ``on_progress``; if the page has not shown the last one yet,
        this one replaces it (a slow browser sees fewer updates, never a backlog)."""
        self._runner._post(self, value)


class JobRunner:
    def __init__(self, on_busy: Callable[[bool], None] | None = None, own_thread: bool = False,
                 doc=None, name: str = "widget"):
        """``on_busy(True/False)`` shows and hides the widget's busy state. ``own_thread=True`` runs
        each job on a fresh thread (for long jobs such as streaming a generation) instead of the
        shared pool. ``doc`` defaults to the current session's document."""
        import panel as pn
        self._on_busy, self._own_thread, self._name = on_busy, own_thread, name
        self._doc = doc if doc is not None else pn.state.curdoc
        if self._doc is not None and self._doc.session_context is None:
            self._doc = None                       # built outside a server session: call back directly
        self._lock = threading.Lock()
        self._current: Job | None = None
        self._count = 0
        self._closed = False
        self._idle = threading.Event()
        self._idle.set()
        self._pending_post: dict[int, Any] = {}    # job number -> latest partial not yet shown
        if self._doc is not None:
            pn.state.on_session_destroyed(lambda _ctx: self.close())
            # Bokeh destroys a session only at its next sweep for unused sessions (~17 s after the tab
            # closed): a generation would run on for as long. The websocket's close is immediate.
            self._doc.on_event("connection_lost", lambda _event: self.close())
        self._page = current_page() if self._doc is None else self._doc   # owns the sandboxes jobs make
        if self._page is not None:
            page_sandboxes(self._page)             # they are freed when it closes (sandboxes.py)

    # -- the widget's side ----------------------------------------------------------------------
    def submit(self, work: Callable[[Job], Any], on_done: Callable[[Any], None], *,
               on_progress: Callable[[Any], None] | None = None,
               on_error: Callable[[str], None] | None = None, debounce_ms: int = 0) -> Job | None:
        """Run ``work(job)`` off the event loop after ``debounce_ms`` of quiet, cancelling the job
        before it. Returns the job (None once the runner is closed)."""
        with self._lock:
            if self._closed:
                return None
            if self._current is not None:
                self._current.cancel()
            self._count += 1
            job = self._current = Job(self, self._count, (work, on_done, on_progress, on_error))
            self._idle.clear()
        self._busy(True)
        if debounce_ms > 0:
            job.timer = threading.Timer(debounce_ms / 1000, self._launch, (job,))
            job.timer.daemon = True
            job.timer.start()
        else:
            self._launch(job)
        return job

    def cancel(self) -> None:
        """Cancel the current job (if any); its results will never reach the page."""
        with self._lock:
            job, self._current = self._current, None
        if job is not None:
            job.cancel()
            self._idle.set()
            self._busy(False)

    def close(self) -> None:
        """Cancel and refuse further jobs: the reader has left."""
        with self._lock:
            self._closed = True
        self.cancel()

    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until the newest job has delivered (tests and benchmarks, never the event loop)."""
        return self._idle.wait(timeout)

    # -- worker side ----------------------------------------------------------------------------
    def _launch(self, job: Job) -> None:
        if job.cancelled:
            return
        if self._own_thread:
            threading.Thread(target=self._run, args=(job,), daemon=True, name=f"{self._name}-job").start()
        else:
            _POOL.submit(self._run, job)

    def _run(self, job: Job) -> None:
        work, on_done, _, on_error = job.callbacks
        if job.cancelled:
            return
        try:
            with owned_by(self._page):             # sandboxes made by the work belong to this page
                result = work(job)
        except Cancelled:
            if not job.cancelled:      # work gave up on its own: still end the busy state
                self._deliver(job, lambda: None)
            return
        except ENDED as exc:           # the page closed or the server is stopping: nobody to tell
            log.debug("%s job ended: %s", self._name, exc)
            self._deliver(job, lambda: None)
            return
        except Exception as exc:       # the reader sees one line; the log keeps the traceback
            log.exception("%s job failed", self._name)
            message = error_message(exc)
            self._deliver(job, lambda: on_error(message) if on_error is not None else None)
            return
        self._deliver(job, lambda: on_done(result))

    def _post(self, job: Job, value: Any) -> None:
        on_progress = job.callbacks[2]
        if on_progress is None or job.cancelled:
            return
        with self._lock:
            scheduled = job.number in self._pending_post
            self._pending_post[job.number] = value
        if scheduled:
            return                     # the callback already queued will show this newer value

        def show() -> None:
            with self._lock:
                latest = self._pending_post.pop(job.number, None)
            if self._current is job and not job.cancelled:
                on_progress(latest)
        self._call_on_loop(show)

    def _deliver(self, job: Job, callback: Callable[[], None]) -> None:
        def finish() -> None:
            if self._current is not job or job.cancelled:
                return                 # superseded while it ran: a newer job owns the page
            with self._lock:
                self._pending_post.pop(job.number, None)
                self._current = None
            try:
                callback()
            finally:
                with self._lock:       # the callback may have submitted a follow-up job: still busy
                    idle = self._current is None
                if idle:
                    self._idle.set()
                    self._busy(False)
        self._call_on_loop(finish)

    def _busy(self, busy: bool) -> None:
        if self._on_busy is not None:
            self._call_on_loop(lambda: self._on_busy(busy))

    def _call_on_loop(self, fn: Callable[[], None]) -> None:
        if self._doc is None or threading.current_thread() is threading.main_thread() and self._on_loop():
            fn()
            return
        doc = self._doc

        def run() -> None:
            from panel.io.state import set_curdoc
            with set_curdoc(doc):
                fn()
        try:
            doc.add_next_tick_callback(run)
        except Exception:              # the session is gone: nothing left to update
            pass

    def _on_loop(self) -> bool:
        """True when called from the session's own event loop with its document current."""
        import panel as pn
        return pn.state.curdoc is self._doc
