"""`page-allocator` (chapter 15): the engine's own block allocator, in a private engine of 32 blocks,
poked one action at a time — add a request (n samples share its blocks), step (a new block each time
a sequence crosses a multiple of 16 tokens; copy-on-write when samples part), finish (the blocks go
back to the free queue, in the order the pool hands them out again).

    Add / Step / Finish / Reset ──► action queue ──► one job drains it on its own thread ──► picture after each
                                              (compute.py)                            (view.py)

Presses made while an action runs wait their turn (a few at most); leaving the page cancels what is
queued and frees the private engine. Reset swaps the pool for a fresh one (all 32 blocks free, the
next request is A again): the page opens mid-story, on the first example, and the prose walks from an
empty pool. The side panel puts the same sequences through a contiguous
allocator that reserves each one's longest length up front.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from statistics import median

import panel as pn
import param

from widgets.common import Widget, esc, example, html_pane, measured, register
from widgets.page_allocator.compute import MAX_ANSWER, MAX_N, MAX_PROMPT, AllocatorSandbox, play
from widgets.page_allocator.view import compare_html, grid_html

DEFAULT_SENTENCE = "The cat sat on the mat and looked out of the window at the rain."
MAX_QUEUED = 16
RESET_NOTE = ("Reset: a fresh pool, every block free (the requests before it are gone). "
              "Add a request to start again from A.")
KEYS = "ArrowRight n N"
# The first example: A, then B with three samples (shared blocks, then copy-on-write), C, a few
# steps, and A finished: its blocks wait at the tail of the free queue.
SCRIPT = [("add", 40, 30, 1), ("add", 20, 40, 3), ("step",), ("add", 12, 20, 1), ("step",), ("step",),
          ("finish", "A")]


@example
def page_allocator_example(llm) -> dict:
    sandbox = AllocatorSandbox(llm, DEFAULT_SENTENCE)
    try:
        return {"sentence": DEFAULT_SENTENCE, "picture": [play(sandbox, a) for a in SCRIPT][-1]}
    finally:
        sandbox.close()


@register
class PageAllocator(Widget):
    css = "pa"
    live_text = "{model} on {device}: a private engine with 32 KV blocks, yours alone"
    own_thread = True
    sentence = param.String(default=DEFAULT_SENTENCE, doc="the prompts' tokens (the example: the reader's sentence once chosen)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._sentence = self.reader_sentence(self.sentence)
        self._prompt = pn.widgets.IntSlider(label="Prompt tokens", start=1, end=MAX_PROMPT, value=20, width=190,
                                            css_classes=["pa-prompt"])
        self._answer = pn.widgets.IntSlider(label="Tokens to generate", start=1, end=MAX_ANSWER, value=24, width=190,
                                            css_classes=["pa-answer"])
        self._n = pn.widgets.RadioButtonGroup(label="Samples (n)", options=list(range(1, MAX_N + 1)), value=1,
                                              css_classes=["pa-n"])
        self._add = self._button("Add request", "primary", "pa-add", lambda: self._queue(
            ("add", self._prompt.value, self._answer.value, self._n.value)))
        self._step = self._button("Step ▸", "default", "pa-step", lambda: self._queue(("step",)))
        self._step16 = self._button("Step ×16", "default", "pa-step16", lambda: self._queue(*[("step",)] * 16))
        self._which = pn.widgets.Select(label="Request", options=[], width=110, css_classes=["pa-which"])
        self._finish = self._button("Finish", "default", "pa-finish",
                                    lambda: self._which.value and self._queue(("finish", self._which.value)))
        self._reset = self._button("Reset", "default", "pa-reset", self._reset_pool)
        self._llm = None
        self._grid = html_pane("", ["pa-grid-pane"])
        self._side = html_pane("", ["pa-side"])
        self._sandbox, self._pending, self._label = None, deque(), ""
        self.on_page_close(self._drop_pool)
        self._source = html_pane(f'<p class="w-small pa-source">Prompts are the tokens of '
                                 f'“{esc(self._sentence[:120])}”, repeated to the length you pick.</p>')
        stage = html_pane(f'<div class="kv-stage pa-stage" tabindex="0" data-keys="{KEYS}" data-press=".pa-step" '
                          'aria-label="Page allocator: press the right arrow or n to run one engine step">'
                          "<b>Step</b> runs one engine step: the button, or <kbd>→</kbd> / <kbd>n</kbd> while the "
                          "widget has focus.</div>", ["pa-stage-pane"])
        controls = pn.FlexBox(self._prompt, self._answer,
                              pn.Column(html_pane('<p class="w-small">Samples (n)</p>'), self._n), self._add,
                              flex_wrap="wrap", align_items="flex-end", gap="0 12px")
        actions = pn.FlexBox(self._step, self._step16, self._which, self._finish, self._reset, flex_wrap="wrap",
                             align_items="flex-end", gap="0 8px")
        self.layout = pn.Column(
            self.title("<b>Live demo · the page allocator</b> — the engine's own block manager, in a private "
                       "pool of 32 blocks of 16 tokens."),
            self.gate.pane, controls, self._source, actions, stage, self.notes,
            pn.FlexBox(pn.Column(self._grid, sizing_mode="stretch_width", min_width=280, styles={"flex": "3 1 420px"}),
                       pn.Column(self._side, sizing_mode="stretch_width", min_width=260, styles={"flex": "2 1 260px"}),
                       flex_wrap="wrap", gap="0 18px", sizing_mode="stretch_width"),
            sizing_mode="stretch_width", css_classes=["pa-widget"])
        if self.example is not None:
            self._paint(self.example.data["picture"], self.example.label)
        self.gate.start()

    @staticmethod
    def _button(label, kind, css, fn):
        b = pn.widgets.Button(label=label, color=kind, disabled=True, css_classes=[css], align="end")
        b.on_click(lambda e: fn())
        return b

    # -- engine and jobs --------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        """A fresh private pool, with the first example's actions replayed so the picture carries on."""
        self._label, self._llm = measured(llm.device_name), llm
        sentence = self._sentence

        def work(job):
            sandbox = AllocatorSandbox(llm, sentence)
            for action in SCRIPT:
                job.check()
                picture = play(sandbox, action)
            return sandbox, picture

        def ready(result):
            self._sandbox, picture = result
            for b in (self._add, self._step, self._step16, self._finish, self._reset):
                b.disabled = False
            self._paint(picture, self._label)
            if self._pending:
                self._drain()                        # presses made while the pool was being set up
        self.jobs.submit(work, on_done=ready, on_error=self.gate.error)

    def _queue(self, *actions) -> None:
        if not self.gate.live:
            return
        room = MAX_QUEUED - len(self._pending)
        self._pending.extend(actions[:max(room, 0)])
        self.say(None if room >= len(actions) else
                 f"At most {MAX_QUEUED} actions wait their turn: the rest were dropped.")
        if self._sandbox is not None and not self.jobs.busy:
            self._drain()

    def _reset_pool(self) -> None:
        """Reset pressed: what waits is dropped (it was meant for the old pool), then a fresh pool."""
        if self.gate.live:
            self._pending.clear()
            self._queue(("reset",))

    def _fresh_pool(self, job, old: AllocatorSandbox) -> AllocatorSandbox:
        """On the job's thread: the old pool released (its leak check included) before a new one is made,
        so a page never holds two; a page closed meanwhile closes the new one too."""
        old.close()
        new = AllocatorSandbox(self._llm, self._sentence)
        if self._closed:
            new.close()
        else:
            self._sandbox = new
        job.check()
        return new

    def _drain(self) -> None:
        sandbox, pending = self._sandbox, self._pending

        def work(job):
            nonlocal sandbox
            picture = None
            while pending:
                job.check()
                action = pending.popleft()
                if action[0] == "reset":
                    sandbox = self._fresh_pool(job, sandbox)
                    picture = {**sandbox.last, "event": RESET_NOTE}
                    job.post(picture)
                    continue
                try:
                    picture = play(sandbox, action)
                except ValueError as exc:            # a refusal the reader should read, not an error
                    picture = {**sandbox.last, "event": f"Not done: {exc}.", "new": [], "copied": [],
                               "freed": [], "shared": []}
                job.post(picture)
            return picture

        def done(picture):
            if picture is not None:
                self._paint(picture, self._label)
            if self._pending:
                self._drain()                        # presses that came while the job was finishing
        self.jobs.submit(work, on_done=done, on_progress=lambda p: self._paint(p, self._label),
                         on_error=self.gate.error)

    def _drop_pool(self) -> None:
        """The reader left: drop what is queued and release the pool (with its leak check) on a thread of
        its own, since that waits for an action in flight; the page's end frees it too, whichever is first."""
        self._pending.clear()
        pool, self._sandbox = self._sandbox, None
        if pool is not None:
            threading.Thread(target=pool.close, daemon=True, name="page-allocator-close").start()

    # -- view -------------------------------------------------------------------------------------
    def _paint(self, picture: dict, label: str) -> None:
        self._grid.object = grid_html(picture)
        self._side.object = compare_html(picture, label)
        live = [r for r, d in picture["requests"].items() if not d["finished"]]
        self._which.options = live
        if live and self._which.value not in live:
            self._which.value = live[0]


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds (median of `repeat`): a fresh private pool with the first example replayed,
    one decode step of its five sequences, and reading the pool's picture alone (32 blocks)."""
    runs = {"replay_example_ms": [], "step_ms": [], "read_picture_ms": []}
    for _ in range(repeat):
        t = time.perf_counter()
        sandbox = AllocatorSandbox(llm, DEFAULT_SENTENCE)
        for action in SCRIPT:
            play(sandbox, action)
        runs["replay_example_ms"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        sandbox.step()
        runs["step_ms"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        for _ in range(10):
            grid_html(sandbox.picture("", sandbox.engine.allocator_state()))
        runs["read_picture_ms"].append((time.perf_counter() - t) * 1e2)
        sandbox.close()
    return {k: round(median(v), 2) for k, v in runs.items()}

