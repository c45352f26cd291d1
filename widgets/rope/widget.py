"""`rope` (chapter 6): a query and a key turning with their positions; their score depends on m − n.

    query position m [────●──────]   key position n [──●────────]   ☑ move both together
    left: pair [0]   right: pair [15]
    two pair plots, the score and the same distance elsewhere, the score curve    (view.py)

Everything is `llm.rope`, the function the model's attention calls, on a real query and key (see
compute.py). A slider move costs well under a millisecond, so it is computed on the session's event
loop rather than as a background job (no busy flicker while dragging).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import panel as pn

from engine import ModelConfig
from widgets.common import Widget, clamp, example, html_pane, is_dark, measured, register
from widgets.common.jobs import error_message
from widgets.common.timing import timed
from widgets.rope.compute import SOURCE, content, rope_view
from widgets.rope.view import PairPlot, ScoreCurve, caption_html, readout_html

DEFAULTS = {"m": 4, "n": 3, "pairs": (0, 15)}
MAX_POSITION = ModelConfig().max_position_embeddings - 1     # SmolLM2's window: positions 0 … 8,191
PAIRS = ModelConfig().head_dim // 2


@example
def rope_example(llm) -> dict:
    return rope_view(llm, DEFAULTS["m"], DEFAULTS["n"], DEFAULTS["pairs"])


@register
class RopeWidget(Widget):
    css = "rope"
    live_text = "rotated by {model}'s own RoPE on {device} as you slide"

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        dark = is_dark()
        # No fixed bounds on the typed value: the browser would refuse it silently; we clamp and say so.
        self._m = pn.widgets.EditableIntSlider(label="Query position m", start=0, end=MAX_POSITION,
                                               value=DEFAULTS["m"], css_classes=["rope-m"], width=260)
        self._n = pn.widgets.EditableIntSlider(label="Key position n", start=0, end=MAX_POSITION,
                                               value=DEFAULTS["n"], css_classes=["rope-n"], width=260)
        self._together = pn.widgets.Checkbox(label="Move both together (keep m − n)", value=False,
                                             css_classes=["rope-together"])
        self._pair_a = pn.widgets.IntSlider(label="Left: pair", start=0, end=PAIRS - 1, value=DEFAULTS["pairs"][0],
                                            css_classes=["rope-pair-a"], width=200)
        self._pair_b = pn.widgets.IntSlider(label="Right: pair", start=0, end=PAIRS - 1, value=DEFAULTS["pairs"][1],
                                            css_classes=["rope-pair-b"], width=200)
        self._plots = (PairPlot(dark), PairPlot(dark))
        self._curve = ScoreCurve(dark)
        self._readout = html_pane("", ["rope-readout"])
        self._caption = html_pane("", ["rope-caption"])
        self._ready = False
        for w in (self._m, self._n, self._pair_a, self._pair_b):
            w.param.watch(self._on_change, "value")
        self._controls = (self._m, self._n, self._together, self._pair_a, self._pair_b)
        for w in self._controls:
            w.disabled = True                           # the saved example is one picture: wait for the model
        s = SOURCE
        title = self.title(
            "<b>RoPE, turning</b> — one pair of numbers of a query (blue) and of a key "
            f"(orange) from SmolLM2 (layer {s['layer'] + 1}, head {s['head']}: ‘␣is’ looking at ‘␣France’). "
            "Slide the positions: the arrows turn, and the score changes only when the distance m − n does. "
            "Tick “move both together” to keep the distance.")
        sliders = pn.FlexBox(self._m, self._n, self._together, flex_wrap="wrap", align_items="flex-end",
                             sizing_mode="stretch_width")
        pairs = pn.FlexBox(self._pair_a, self._pair_b, flex_wrap="wrap", sizing_mode="stretch_width")
        plots = pn.GridBox(*[pn.pane.Bokeh(p.figure, sizing_mode="stretch_width", margin=2) for p in self._plots],
                           ncols=2, sizing_mode="stretch_width")
        self.layout = pn.Column(title, self.gate.pane, sliders, self.notes, pairs, plots, self._readout,
                                pn.pane.Bokeh(self._curve.figure, sizing_mode="stretch_width"),
                                self._caption, sizing_mode="stretch_width", css_classes=["rope-widget"])
        self._syncing = False
        if self.example is not None:
            self._show(self.example.data, self.example.label)
        self.gate.start()

    # -- events ---------------------------------------------------------------------------------
    def _on_change(self, event) -> None:
        if self._syncing:
            return
        note = None
        if event.obj in (self._m, self._n):
            value, note = clamp(event.new, 0, MAX_POSITION, "A position")
            if note:
                self._syncing = True
                try:
                    event.obj.param.update(value=value, start=0, end=MAX_POSITION)
                finally:
                    self._syncing = False
                event = _Moved(event.obj, event.old, value)
        if self._together.value and event.obj in (self._m, self._n):
            # Keep the distance: move the other position by the same amount.
            other = self._n if event.obj is self._m else self._m
            target = other.value + event.new - event.old
            self._syncing = True
            try:
                if 0 <= target <= MAX_POSITION:
                    other.value = target
                else:                                   # the other one would leave the window: refuse
                    event.obj.value = event.old
                    note = (f"Moving both would put the other position at {target:,}, outside 0–{MAX_POSITION:,}: "
                            "not moved.")
            finally:
                self._syncing = False
        self.say(note)
        self._update()

    def on_live(self, llm) -> None:
        # The real query and key come from one inspect pass: off the event loop, once per server.
        def ready(_):
            self._ready = True
            for w in self._controls:
                w.disabled = False
            self._update()
        self.jobs.submit(lambda job: content(llm), ready, on_error=self.gate.error)

    def _update(self) -> None:
        if not self._ready:
            return
        llm = self.gate.llm
        try:
            t0 = time.perf_counter()
            view = rope_view(llm, self._m.value, self._n.value, (self._pair_a.value, self._pair_b.value))
            self._show(view, measured(llm.device_name, time.perf_counter() - t0))
        except Exception as exc:                        # one line for the reader; the page keeps working
            self.gate.error(error_message(exc))

    def _show(self, view: dict, label: str) -> None:
        for plot, p in zip(self._plots, view["pairs"]):
            plot.show(p, view["m"], view["n"])
        self._curve.show(view)
        self._readout.object = readout_html(view)
        self._caption.object = caption_html(label)


@dataclass(slots=True)
class _Moved:
    """A slider change after clamping (the shape of a param event, for the handler above)."""
    obj: object
    old: int
    new: int


def bench(llm, repeats: int = 7) -> dict:
    """Server milliseconds per slider move (median, p90): both pair plots, the score, the curve and the
    shifted scores, drawn into the figures."""
    plots = (PairPlot(False), PairPlot(False))
    content(llm)                                        # the real query and key: one inspect pass, once
    moves = iter(range(10_000))

    def move():
        r = next(moves)
        view = rope_view(llm, 100 * r + 5, 100 * r, (r % 32, 31 - r % 32))
        for plot, p in zip(plots, view["pairs"]):
            plot.show(p, view["m"], view["n"])
    return {"rope": {"slider_move": timed(move, repeats), "device": llm.device_name}}
