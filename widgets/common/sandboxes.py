"""Private engines owned by the page that made them: freed when the reader leaves, bounded per page.

    with page_sandbox(llm, num_kv_blocks=16, max_num_seqs=2) as box:    # instead of llm.sandbox(...)
        ...                                                              # step it (engine/sandbox.py)
    # leaving the block aborts what is left, checks no KV block stayed in use, and frees the memory

    box = sandbox(llm, ...); ...; release(box, "kv-cache")   # the same, for one that outlives a call

* **Owner.** The page (Bokeh session) that asks owns the sandbox; the widget passes nothing. Work a
  ``JobRunner`` runs is owned by its page (``owned_by``), and code on the session's event loop by
  ``pn.state.curdoc``. Outside a page (unit tests, benchmarks, saved examples) the caller frees it.
* **Freed with the page.** When the page's websocket closes or its session is destroyed, every
  sandbox it still holds is freed (requests aborted, KV memory released) at once — not whenever the
  garbage collector gets to it. ``llm.sandboxes()`` shows it from the engine's side.
* **Bounded.** One page holds at most PAGE_KV_BYTES of sandbox KV cache at a time; one more is
  refused with a message that says the limit (``Refused``, shown as the widget's error line).
"""
from __future__ import annotations

import logging
import threading
import weakref
from contextlib import contextmanager

from engine import SandboxFreed
from widgets.common.sharing import Refused

log = logging.getLogger(__name__)


class PageClosed(Refused):
    """The page closed before its work asked for a private engine: the work just stops."""


PAGE_KV_BYTES = 256 * 2**20       # the batching timeline's largest run (swap space included) is ~96 MiB
_OWNER = threading.local()


class PageSandboxes:
    """The sandboxes of one page, and their KV bytes against the page's budget."""

    def __init__(self, limit: int = PAGE_KV_BYTES):
        self.limit = limit
        self._live: weakref.WeakSet = weakref.WeakSet()    # a sandbox the widget dropped is not held here
        self._lock = threading.Lock()
        self.ended = False

    def live(self) -> list:
        return [s for s in list(self._live) if not s.freed]

    @property
    def kv_bytes(self) -> int:
        return sum(s.kv_bytes for s in self.live())

    def open(self, llm, **kwargs):
        need = llm.sandbox_kv_bytes(**kwargs)
        with self._lock:                 # priced, checked and made as one: two jobs cannot both squeeze in
            if self.ended:
                raise PageClosed("this page has closed")
            held = self.kv_bytes
            if held + need > self.limit:
                raise Refused(f"this page's private engines would hold {(held + need) / 2**20:.0f} MiB of KV "
                              f"cache; the limit per page is {self.limit / 2**20:.0f} MiB: wait for one to finish")
            made = llm.sandbox(**kwargs)
            self._live.add(made)
            return made

    def end(self, wait: bool = False) -> threading.Thread:
        """The page has gone: free every sandbox it holds. ``free()`` waits for a step in flight, so this
        runs on a thread of its own (the caller may be the event loop); ``wait=True`` joins it."""
        with self._lock:
            self.ended = True
            held = self.live()
        thread = threading.Thread(target=self._free, args=(held,), daemon=True, name="page-sandboxes-free")
        thread.start()
        if wait:
            thread.join()
        return thread

    @staticmethod
    def _free(held: list) -> None:
        for s in held:
            try:
                s.free()
            except Exception:                # one failing free must not keep the others' memory
                log.exception("freeing a sandbox failed")
        if held:
            log.info("page closed: %d sandbox(es) freed, %.0f MiB of KV cache", len(held),
                     sum(s.kv_bytes for s in held) / 2**20)


_PAGES: "weakref.WeakKeyDictionary[object, PageSandboxes]" = weakref.WeakKeyDictionary()
_PAGES_LOCK = threading.Lock()


def page_sandboxes(doc) -> PageSandboxes:
    """The ledger of a page's document, made (with its session-end hooks) on first use. JobRunner makes
    it on the event loop when a widget starts, so the hooks are never added from a worker thread."""
    with _PAGES_LOCK:
        ledger = _PAGES.get(doc)
        if ledger is None:
            ledger = _PAGES[doc] = PageSandboxes()
            doc.on_event("connection_lost", lambda _event: ledger.end())
            doc.on_session_destroyed(lambda _ctx: ledger.end())
        return ledger


@contextmanager
def owned_by(doc):
    """Sandboxes made inside this block (on this thread) belong to ``doc``'s page."""
    before = getattr(_OWNER, "doc", None)
    _OWNER.doc = doc
    try:
        yield
    finally:
        _OWNER.doc = before


def current_page():
    """The document of the page this code works for, or None outside a session."""
    doc = getattr(_OWNER, "doc", None)
    if doc is not None:
        return doc
    if threading.current_thread() is threading.main_thread():     # the server's event loop
        import panel as pn
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            return doc
    return None


def sandbox(llm, **kwargs):
    """``llm.sandbox(**kwargs)`` owned by the current page (freed when it closes, within its budget);
    a plain sandbox outside a page."""
    doc = current_page()
    if doc is None:
        return llm.sandbox(**kwargs)
    return page_sandboxes(doc).open(llm, **kwargs)


def release(box, who: str) -> None:
    """Abort whatever the sandbox still runs, check from the engine's own state that no KV block stayed in
    use (a leak is logged as an error), and free its memory. One its page already freed is left alone."""
    if box.freed:                        # its page closed first and freed it (the page's ledger logs how much)
        log.info("%s: sandbox freed with its page", who)
        return
    try:
        for rid in box.unfinished_request_ids():
            box.abort(rid)
        state = box.allocator_state()
    except SandboxFreed:
        log.info("%s: sandbox freed with its page", who)
        return
    if state.num_free != state.num_blocks or state.tables or box.has_unfinished():
        log.error("%s: sandbox closed with %d of %d KV blocks still in use", who,
                  state.num_blocks - state.num_free, state.num_blocks)
    else:
        log.info("%s: sandbox freed, %d of %d KV blocks free", who, state.num_free, state.num_blocks)
    box.free()


@contextmanager
def page_sandbox(llm, who: str = "widget", **kwargs):
    """``sandbox(llm, **kwargs)`` for the length of a ``with`` block, released (``release``) however it ends."""
    box = sandbox(llm, **kwargs)
    try:
        yield box
    finally:
        release(box, who)
