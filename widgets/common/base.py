"""Widget: what every widget does the same way, written once.

    @register
    class KVCacheWidget(Widget):                          # widgets/kv_cache/widget.py: directive "kv-cache"
        css = "kv"                                        # its CSS prefix: notes pane .kv-notes, .kv-progress
        live_text = "{model} on {device}, in a private engine of its own"

        def __init__(self, engine, prompt: str = DEFAULT_PROMPT, **params):
            super().__init__(engine, **params)           # example, gate, jobs, notes: ready to use
            self.box = ...
            self.run = self.run_button("Prefill", self.start)
            self.layout = pn.Column(self.title("..."), self.gate.pane, self.box, self.run, self.notes, ...)
            self.paint_example()                          # the saved first example, at once
            self.gate.start()                             # last: on_live may use everything above

        def on_live(self, llm): ...                       # once, when the shared model is ready

What the base owns:

* ``self.example``  the saved first example (``example.json`` in the widget's folder), or None.
* ``self.gate``     the status line and "call ``on_live(llm)`` once the model is loaded" (gate.py).
* ``self.jobs``     the widget's background work: debounce, supersede, cancel, closed with the page
                    (jobs.py). Its busy state drives the gate's "Computing…" and every run button.
* ``self.notes``    notes under the inputs; ``self.say(*notes, progress=...)`` writes them, escaped.
* ``run_button``    a button that reads "Stop" (and stops the work) while a job runs.
* ``read_prompt``   the text of a box, clipped to its limit with a note; None (and a note) if empty.
* ``on_page_close`` clean-up for when the reader leaves: ``close()`` runs it, once, with the job runner's.
* ``reader_sentence(example)`` the text to start from: the chapter's example, or the reader's carried
                    sentence once they chose it (sentence.py); the "Use my sentence" / "Back to the
                    chapter's example" control then appears under the status line by itself.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import panel as pn

from widgets.common.examples import Example, load_example
from widgets.common.gate import EngineGate, in_session
from widgets.common.guard import guard_inputs
from widgets.common.jobs import JobRunner
from widgets.common.registry import directive_of
from widgets.common.sentence import choice_html, reader_sentence
from widgets.common.text import clip, esc
from widgets.common.theme import html_pane, static_url


def notes_html(notes, progress: str = "", css: str = "w") -> str:
    """Each non-empty note as one escaped line, then an optional progress line (announced to screen readers)."""
    out = "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)
    return out + (f'<p class="w-small {css}-progress" aria-live="polite">{esc(progress)}</p>' if progress else "")


def style_controls(layout) -> None:
    """Give every Panel control inside ``layout`` (sliders, inputs, spinners, buttons, selects, the
    parts of composite controls) the shared controls stylesheet: a 3 px focus ring, 24 px spinner
    arrows. Their names for screen readers come from their visible labels (widgets.js)."""
    sheet = static_url("controls.css")
    seen: set[int] = set()

    def visit(obj) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, pn.widgets.Widget) and sheet not in obj.stylesheets:
            obj.stylesheets = [*obj.stylesheets, sheet]
        inner = getattr(obj, "_composite", None)
        for child in list(getattr(obj, "objects", None) or []) + ([inner] if inner is not None else []):
            visit(child)
    for obj in layout.select(pn.viewable.Viewable):
        visit(obj)


def defer_figures(layout) -> None:
    """Send the layout's Bokeh figures after the page's first paint. Building a figure's view in the
    browser costs tens of milliseconds (a chapter with five of them took 1.2-1.5 s to show its widget's
    first number); the text, controls and numbers are cheap. Each figure of a fixed height is swapped
    for a box of the same height (the page does not jump when it arrives) until the browser says the
    document is loaded (``pn.state.onload``), then all of them come in one message."""
    waiting: list[tuple[pn.layout.ListLike, int, pn.pane.Bokeh]] = []

    def visit(parent) -> None:
        for i, child in enumerate(list(getattr(parent, "objects", None) or [])):
            fig = getattr(child, "object", None) if isinstance(child, pn.pane.Bokeh) else None
            if fig is not None and getattr(fig, "height", None) and getattr(fig, "visible", True):
                waiting.append((parent, i, child))
            elif isinstance(child, pn.layout.ListLike):
                visit(child)
    visit(layout)
    if not waiting:
        return
    for parent, i, pane in waiting:
        parent[i] = pn.pane.HTML('<p class="w-small w-figure-wait">Drawing the chart…</p>',
                                 height=pane.object.height, margin=pane.margin,
                                 sizing_mode="stretch_width" if pane.sizing_mode else None,
                                 width=None if pane.sizing_mode else pane.object.width,
                                 max_width=pane.max_width, css_classes=["w-figure-wait-pane"])

    def swap() -> None:
        with pn.io.hold():
            for parent, i, pane in waiting:
                parent[i] = pane
    pn.state.onload(swap)


class Widget(pn.viewable.Viewer):
    css: ClassVar[str] = "w"                      # the widget's CSS prefix (assets/widgets.css)
    live_text: ClassVar[str] = "computed by {model} on {device} as you change the inputs"
    own_thread: ClassVar[bool] = False            # long jobs (a generation) get a thread each, not the pool
    empty_prompt: ClassVar[str] = "The prompt is empty: type a sentence first."
    shows_example: ClassVar[bool] = True         # False: it computes at once (no model needed), no example line

    def __init__(self, engine, **params):
        super().__init__(**params)
        self.example: Example | None = load_example(self.directive())
        self.notes = html_pane("", [f"{self.css}-notes"])
        self.gate = EngineGate(engine, self.on_live, example=self.example if self.shows_example else None,
                               live_text=self.live_text)
        self.jobs = JobRunner(on_busy=self.on_busy, own_thread=self.own_thread, name=self.directive())
        self._run_buttons: list[tuple[pn.widgets.Button, str, str]] = []
        self._closers: list[Callable[[], None]] = []
        self._closed = False
        self.sentence_choice: pn.pane.HTML | None = None       # made by reader_sentence(), placed by __panel__
        if in_session():       # the websocket's close is immediate; Bokeh's session sweep comes ~17 s later
            pn.state.on_session_destroyed(lambda _ctx: self.close())
            pn.state.curdoc.on_event("connection_lost", lambda _event: self.close())

    @classmethod
    def directive(cls) -> str:
        return directive_of(cls.__module__)

    def __panel__(self):
        if not getattr(self, "_controls_styled", False):
            self._controls_styled = True
            self._place_sentence_choice()
            style_controls(self.layout)
            guard_inputs(self.layout, lambda note: self.say(note))
            if in_session():
                defer_figures(self.layout)
        return self.layout

    # -- what a widget overrides ------------------------------------------------------------------
    def on_live(self, llm) -> None:
        """The shared model is loaded (once, on the session's event loop): enable inputs, compute."""

    def on_busy(self, busy: bool) -> None:
        """A job started (True) or ended (False): the status line and the run buttons follow."""
        self.gate.set_busy(busy)
        for button, label, color in self._run_buttons:
            button.label = "Stop" if busy else label
            button.color = "warning" if busy else color

    def stop(self) -> None:
        """Stop pressed: cancel the running job (a widget that keeps partial results overrides this)."""
        self.jobs.cancel()

    # -- shared pieces ----------------------------------------------------------------------------
    def say(self, *notes: str | None, progress: str = "") -> None:
        self.notes.object = notes_html(notes, progress, self.css)

    def run_button(self, label: str, on_run: Callable[[], None], color: str = "primary", **kw) -> pn.widgets.Button:
        """A button that starts the widget's work, and reads "Stop" while it runs (a press then calls
        ``stop()``). Disabled until the model is live unless ``disabled=False`` is given."""
        kw.setdefault("disabled", True)
        kw.setdefault("css_classes", [f"{self.css}-run"])
        button = pn.widgets.Button(label=label, color=color, **kw)
        button.on_click(lambda _event: self.stop() if self.jobs.busy else on_run())
        self._run_buttons.append((button, label, color))
        return button

    def read_prompt(self, text: str | None, limit: int, empty: str | None = None) -> tuple[str, str | None] | None:
        """(text clipped to ``limit`` characters, the note saying so or None); None after saying ``empty``
        when there is nothing but whitespace."""
        clipped, note = clip((text or "").strip(), limit)
        if not clipped:
            self.say(empty or self.empty_prompt)
            return None
        return clipped, note

    def reader_sentence(self, example: str) -> str:
        """The text this widget starts from: ``example`` (the chapter's worked example, which the prose
        quotes), or the reader's carried sentence when this page uses it (``mine=1`` in the URL). Also
        makes the one control that switches between the two; ``__panel__`` places it, so a widget only
        swaps its call of ``sentence.reader_sentence`` for this one."""
        self.sentence_choice = html_pane(choice_html(example), ["w-sentence-choice"])
        return reader_sentence(example)

    def _place_sentence_choice(self) -> None:
        """The control goes right under the status line (the line that says where the numbers come from),
        above the widget's inputs, so it is seen before the example is read; else under the title."""
        if self.sentence_choice is None or not isinstance(self.layout, pn.layout.ListLike):
            return
        objects = list(self.layout.objects)
        if any(o is self.sentence_choice for o in objects):
            return
        at = next((i + 1 for i, o in enumerate(objects) if o is self.gate.pane), min(1, len(objects)))
        self.layout.insert(at, self.sentence_choice)

    def on_page_close(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the reader leaves (the session ends) or the widget is closed, whichever is first."""
        self._closers.append(fn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.jobs.close()
        for fn in self._closers:
            fn()

    @staticmethod
    def title(html: str) -> pn.pane.HTML:
        """The widget's one-line heading (trusted markup written in the widget, never reader text)."""
        return html_pane(f'<p class="w-title">{html}</p>')
