"""`rope` (chapter 6): a query and a key turning with their positions; their score depends on m − n.

    query position m [────●──────]   key position n [──●────────]   ☑ move both together
    ┌ pair 0 (fast) ───┐ ┌ pair 15 (slow) ──┐    arrows: this pair of the query (blue) and of the
    │   ↗ q   ↖ k      │ │      → q ↗ k     │    key (orange) after RoPE turned them
    └──────────────────┘ └──────────────────┘
    score q·k/√d = 1.024 at m − n = 1 · the same distance at (m+100, n+100): 1.024 …
    ┌ score against distance m − n, 0 … 127 ┐  the dot marks the current distance

Everything is `llm.rope`, the function the model's attention calls, on a real query and key (see
widgets/rope_data.py). A slider move costs well under a millisecond, so it is computed on the
session's event loop rather than as a background job (no busy flicker while dragging).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import panel as pn
from bokeh.models import Arrow, ColumnDataSource, HoverTool, Span, VeeHead

from engine import ModelConfig
from widgets.common import (PALETTE, EngineGate, JobRunner, clamp, esc, example, html_pane, is_dark, label_html,
                            load_example, measured, register, themed_figure)
from widgets.common.theme import ink
from widgets.common.timing import timed
from widgets.rope_data import SOURCE, content, rope_view

DEFAULTS = {"m": 4, "n": 3, "pairs": (0, 15)}
MAX_POSITION = ModelConfig().max_position_embeddings - 1     # SmolLM2's window: positions 0 … 8,191
PAIRS = ModelConfig().head_dim // 2


@example("rope")
def rope_example(llm) -> dict:
    return rope_view(llm, DEFAULTS["m"], DEFAULTS["n"], DEFAULTS["pairs"])


class PairPlot:
    """One pair of dimensions as two arrows from the origin, on their circles."""

    def __init__(self, dark: bool):
        c = ink(dark)
        self.source = ColumnDataSource({"x": [0.0, 0.0], "y": [0.0, 0.0], "who": ["query", "key"],
                                        "pos": [0, 0], "angle": [0.0, 0.0], "color": PALETTE[:2]})
        self.rings = ColumnDataSource({"r": [1.0, 1.0], "who": ["query", "key"], "color": PALETTE[:2]})
        fig = themed_figure(dark, height=270, sizing_mode="stretch_width", match_aspect=True, tools="",
                            min_border=4, title="")
        fig.axis.visible = False
        fig.grid.visible = False
        rings = fig.circle(0, 0, radius="r", source=self.rings, fill_alpha=0, line_color="color",
                           line_alpha=0.35, line_dash="dotted")
        for span in (Span(location=0, dimension="width"), Span(location=0, dimension="height")):
            span.line_color, span.line_alpha = c["axis"], 0.6
            fig.add_layout(span)
        fig.add_layout(Arrow(end=VeeHead(size=11, fill_color="color", line_color="color"), x_start=0, y_start=0,
                             x_end="x", y_end="y", source=self.source, line_color="color", line_width=3))
        tips = fig.scatter("x", "y", source=self.source, size=9, color="color")
        fig.add_tools(HoverTool(renderers=[tips], tooltips=[("", "@who at position @pos"), ("pair", "(@x{0.000}, @y{0.000})"),
                                                            ("angle", "@angle{0.000} rad")]),
                      HoverTool(renderers=[rings], tooltips=[("", "the @who's circle: RoPE keeps its length @r{0.000}")]))
        fig.title.text_font_size = "12px"
        self.figure = fig

    def show(self, p: dict, m: int, n: int) -> None:
        (qa, qb), (ka, kb) = p["q"], p["k"]
        self.source.data = {"x": [qa, ka], "y": [qb, kb], "who": ["query", "key"], "pos": [m, n],
                            "angle": [p["q_angle"], p["k_angle"]], "color": PALETTE[:2]}
        self.rings.data = {"r": [math.hypot(qa, qb), math.hypot(ka, kb)], "who": ["query", "key"],
                           "color": PALETTE[:2]}
        self.figure.title.text = f"pair {p['pair']}: {p['speed']:.3g} rad/position"


class RopeWidget(pn.viewable.Viewer):
    def __init__(self, engine, **params):
        super().__init__(**params)
        self._saved = load_example("rope")
        dark = is_dark()
        # No fixed bounds on the typed value: the browser would refuse it silently; we clamp and say so.
        self._m = pn.widgets.EditableIntSlider(label="Query position m", start=0, end=MAX_POSITION,
                                               value=DEFAULTS["m"], css_classes=["rope-m"], width=260)
        self._n = pn.widgets.EditableIntSlider(label="Key position n", start=0, end=MAX_POSITION,
                                               value=DEFAULTS["n"], css_classes=["rope-n"], width=260)
        self._notes = html_pane("", ["rope-notes"])
        self._together = pn.widgets.Checkbox(label="Move both together (keep m − n)", value=False,
                                             css_classes=["rope-together"])
        self._pair_a = pn.widgets.IntSlider(label="Left: pair", start=0, end=PAIRS - 1, value=DEFAULTS["pairs"][0],
                                            css_classes=["rope-pair-a"], width=200)
        self._pair_b = pn.widgets.IntSlider(label="Right: pair", start=0, end=PAIRS - 1, value=DEFAULTS["pairs"][1],
                                            css_classes=["rope-pair-b"], width=200)
        self._plots = (PairPlot(dark), PairPlot(dark))
        self._curve = ColumnDataSource({"d": [], "s": []})
        self._mark = ColumnDataSource({"d": [], "s": []})
        self._readout = html_pane("", ["rope-readout"])
        self._caption = html_pane("", ["rope-caption"])
        self._ready = False
        self.gate = EngineGate(engine, self._live, example=self._saved,
                               live_text="rotated by {model}'s own RoPE on {device} as you slide")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="rope")
        for w in (self._m, self._n, self._pair_a, self._pair_b):
            w.param.watch(self._on_change, "value")
        self._controls = (self._m, self._n, self._together, self._pair_a, self._pair_b)
        for w in self._controls:
            w.disabled = True                           # the saved example is one picture: wait for the model
        s = SOURCE
        title = html_pane(
            '<p class="w-title"><b>RoPE, turning</b> — one pair of numbers of a query (blue) and of a key '
            f"(orange) from SmolLM2 (layer {s['layer']}, head {s['head']}: ‘␣is’ looking at ‘␣France’). "
            "Slide the positions: the arrows turn, and the score changes only when the distance m − n does. "
            "Tick “move both together” to keep the distance.</p>")
        sliders = pn.FlexBox(self._m, self._n, self._together, flex_wrap="wrap", align_items="flex-end",
                             sizing_mode="stretch_width")
        pairs = pn.FlexBox(self._pair_a, self._pair_b, flex_wrap="wrap", sizing_mode="stretch_width")
        plots = pn.GridBox(*[pn.pane.Bokeh(p.figure, sizing_mode="stretch_width", margin=2) for p in self._plots],
                           ncols=2, sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, sliders, self._notes, pairs, plots, self._readout,
                                 pn.pane.Bokeh(self._curve_figure(dark), sizing_mode="stretch_width"),
                                 self._caption, sizing_mode="stretch_width", css_classes=["rope-widget"])
        self._syncing = False
        if self._saved is not None:
            self._show(self._saved.data, self._saved.label)
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _curve_figure(self, dark: bool):
        fig = themed_figure(dark, height=200, tools="", x_axis_label="distance m − n (positions)",
                            y_axis_label="score q·k/√d", min_border_left=8)
        dots = fig.scatter("d", "s", source=self._curve, size=4, color=PALETTE[2])
        fig.line("d", "s", source=self._curve, color=PALETTE[2], alpha=0.6)
        here = fig.scatter("d", "s", source=self._mark, size=12, color=PALETTE[3], marker="diamond")
        fig.add_tools(HoverTool(renderers=[dots, here], tooltips=[("m − n", "@d"), ("score", "@s{0.000}")]))
        return fig

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
        self._notes.object = f'<p class="w-note">{esc(note)}</p>' if note else ""
        self._update()

    def _live(self, llm) -> None:
        # The real query and key come from one inspect pass: off the event loop, once per server.
        def ready(_):
            self._ready = True
            for w in self._controls:
                w.disabled = False
            self._update()
        self._runner.submit(lambda job: content(llm), ready, on_error=self.gate.error)

    def _update(self) -> None:
        if not self._ready:
            return
        llm = self.gate.llm
        try:
            t0 = time.perf_counter()
            view = rope_view(llm, self._m.value, self._n.value, (self._pair_a.value, self._pair_b.value))
            self._show(view, measured(llm.device_name, time.perf_counter() - t0))
        except Exception as exc:                        # one line for the reader; the page keeps working
            from widgets.common.jobs import error_message
            self.gate.error(error_message(exc))

    def _show(self, view: dict, label: str) -> None:
        m, n = view["m"], view["n"]
        for plot, p in zip(self._plots, view["pairs"]):
            plot.show(p, m, n)
        self._curve.data = {"d": list(range(len(view["curve"]))), "s": view["curve"]}
        d = m - n
        inside = 0 <= d < len(view["curve"])
        self._mark.data = {"d": [d] if inside else [], "s": [view["score"]] if inside else []}
        same = " · ".join(f"({s['m']:,}, {s['n']:,}): <b>{s['score']:.3f}</b>" for s in view["same"])
        ahead = (" A key after its query is masked in a real model; the rotation rule holds all the same."
                 if d < 0 else "")
        pair_lines = "".join(
            f"<li>pair {p['pair']} (a full turn every {2 * math.pi / p['speed']:,.0f} positions): the query turned by m·θ = {m * p['speed']:,.3f} rad, the key by "
            f"n·θ = {n * p['speed']:,.3f} rad; the angle between them changed by (m − n)·θ = "
            f"{d * p['speed']:,.3f} rad. This pair adds {p['dot']:.3f} to q·k.</li>" for p in view["pairs"])
        self._readout.object = (
            f'<p class="rope-score">m = {m:,}, n = {n:,}, <b>m − n = {d:,}</b> · score q·k/√d over all 32 pairs: '
            f'<b class="rope-value">{view["score"]:.3f}</b></p>'
            f'<p class="w-small">The same distance elsewhere, (m, n) → score: {same or "out of the window"}.{ahead}</p>'
            f'<ul class="rope-pairs">{pair_lines}</ul>')
        self._caption.object = (f'<p class="w-small">Computed with the model\'s rope function (θ base '
                                f"100,000, pair i = dimensions i and i + 32) in float32, as the model does: far "
                                f"into the window the last digit can wobble. {label_html(label)}</p>")


@dataclass(slots=True)
class _Moved:
    """A slider change after clamping (the shape of a param event, for the handler below)."""
    obj: object
    old: int
    new: int


@register("rope")
def make_rope(engine, **args) -> RopeWidget:
    """Factory for ``::: widget rope {}``."""
    return RopeWidget(engine, **args)


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
