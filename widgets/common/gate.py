"""The engine-ready gate: a widget's status line, and "call me once the shared model is loaded".

    self.gate = EngineGate(engine, on_ready=self._live, example=load_example("tokenizer"))
    layout = pn.Column(title, self.gate.pane, ...)        # the status line sits in the widget
    runner = JobRunner(on_busy=self.gate.set_busy)          # "computing…" while a job runs
    ...on_error=self.gate.error                             # a failed job: one line, page keeps working
    self.gate.start()                                       # last line of the constructor

The line reads, in turn (``data-state`` on it is what browser tests wait for):

    loading  "Loading the model… meanwhile: an example computed ahead of time (recorded on …)."
    live     "Live: computed by SmolLM2-135M-Instruct on cpu (2 threads) as you type."
    busy     "Computing…"
    failed   "The model could not be loaded (…). What you see is the saved example; …"
    error    "That did not work: ValueError: …"     (the widget stays live)

``gate.start()`` goes last in the widget's constructor. ``on_ready(llm)`` then runs once, on the
session's event loop, after the page has painted (Panel's ``onload``): if the engine is already up it
runs at once, otherwise a light poll waits for it.
``watch_engine`` is that poll on its own, for anything else that shows the engine's state (the page
header). Outside a server session (unit tests) call ``gate.check()`` yourself.
"""
from __future__ import annotations

from typing import Callable

import panel as pn

from widgets.common.handle import EngineStatus
from widgets.common.labels import label_html
from widgets.common.text import esc
from widgets.common.theme import html_pane

POLL_MS = 300
SETTLED = (EngineStatus.READY, EngineStatus.FAILED)


def in_session() -> bool:
    return pn.state.curdoc is not None and pn.state.curdoc.session_context is not None


def watch_engine(engine, on_change: Callable[[object], None]) -> None:
    """Call ``on_change(snapshot)`` now and whenever the engine's state changes, until it is ready or
    has failed. Starts the engine's load if nobody has (it normally starts with the server)."""
    last = [None]

    def check() -> bool:
        snap = engine.snapshot()
        key = (snap.status, snap.detail, snap.progress)
        if key != last[0]:
            last[0] = key
            on_change(snap)
        return snap.status in SETTLED

    engine.start()
    if check() or not in_session():
        return
    holder = {}

    def poll() -> None:
        if check() and "cb" in holder:
            holder.pop("cb").stop()
    holder["cb"] = pn.state.add_periodic_callback(poll, period=POLL_MS)


def loading_text(snap) -> str:
    """'Loading the model… 12 s · dequantizing: 50%' from an engine snapshot (plain text)."""
    parts = ["Loading the model…"]
    if snap.elapsed_s:
        parts.append(f"{snap.elapsed_s:.0f} s")
    if snap.progress:
        parts.append(snap.progress)
    return " · ".join(parts)


class EngineGate:
    def __init__(self, engine, on_ready: Callable[[object], None], example=None,
                 live_text: str = "computed by {model} on {device} as you change the inputs"):
        self.engine, self._on_ready, self._example, self._live_text = engine, on_ready, example, live_text
        self.state, self.busy, self.message = "loading", False, ""
        self.llm = None
        # the live line's first word: a widget whose every number is arithmetic about hardware the reader
        # lacks (chapter 13) says "Modelled", not "Live" (data-state stays "live": the model is loaded)
        self.live_word = "Live"
        self.pane = html_pane(self._html(None), ["w-status-pane"])

    def start(self) -> None:
        """Call at the end of the widget's constructor (``on_ready`` may use anything it built).
        In a session: after the first paint, so the example shows at once; outside one: now."""
        if in_session():
            pn.state.onload(self.check)
        else:
            self.check()

    @property
    def example(self):
        """The saved example the widget is showing while the model loads (None: it shows none)."""
        return self._example

    @example.setter
    def example(self, example) -> None:
        self._example = example
        self._render()

    @property
    def live(self) -> bool:
        return self.llm is not None

    def check(self) -> None:
        """Look at the engine now; start watching it if it is still loading."""
        watch_engine(self.engine, self._engine_changed)

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        if busy:
            self.message = ""
        self._render()

    def error(self, message: str) -> None:
        """A job failed: say so in one line; the widget stays live."""
        self.busy, self.message = False, message
        self._render()

    # -- internals ------------------------------------------------------------------------------
    def _engine_changed(self, snap) -> None:
        if snap.status is EngineStatus.READY:
            if self.llm is None:
                self.llm, self.state = self.engine.llm, "live"
                self._render(snap)
                self._on_ready(self.llm)
            return
        self.state = "failed" if snap.status is EngineStatus.FAILED else "loading"
        self._render(snap)

    def _render(self, snap=None) -> None:
        self.pane.object = self._html(snap)

    def _html(self, snap) -> str:
        if self.state == "live" and self.message:
            return self._line("error", f"That did not work: {esc(self.message)}. Try other input; "
                                       "the rest of the page keeps working.")
        if self.state == "live":
            if self.busy:
                return self._line("busy", "Computing…")
            llm = self.llm
            text = self._live_text.format(model=esc(llm.config.name), device=esc(llm.device_name))
            note = ""
            if self.engine.snapshot().random_weights:
                note = " (random weights: the numbers are noise, the mechanics are real)"
            return self._line("live", f"{self.live_word}: {text}{note}.")
        saved = ""
        if self.example is not None:
            saved = f" Meanwhile you see an example computed ahead of time: {label_html(self.example.label)}."
        if self.state == "failed":
            reason = esc(snap.detail) if snap is not None else "unknown error"
            return self._line("failed", f"The model could not be loaded ({reason}).{saved} The server's "
                                        "console has the details; restarting <code>panel serve app</code> "
                                        "retries the load.")
        progress = esc(loading_text(snap)) if snap is not None else "Loading the model…"
        return self._line("loading", f"{progress}{saved}")

    @staticmethod
    def _line(state: str, body: str) -> str:
        role = 'role="alert"' if state in ("failed", "error") else 'role="status" aria-live="polite"'
        return f'<p class="w-status" data-state="{state}" {role}>{body}</p>'
