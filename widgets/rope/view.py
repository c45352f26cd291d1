"""How the RoPE widget draws one ``rope_view`` (compute.py): a pair of dimensions as two arrows on their
circles (Bokeh), the score against distance, and the readout's HTML. No engine calls here.

    ┌ pair 0 (fast) ───┐ ┌ pair 15 (slow) ──┐    arrows: this pair of the query (blue) and of the
    │   ↗ q   ↖ k      │ │      → q ↗ k     │    key (orange) after RoPE turned them
    └──────────────────┘ └──────────────────┘
    score q·k/√d = 1.024 at m − n = 1 · the same distance at (m+100, n+100): 1.024 …
    ┌ score against distance m − n, 0 … 127 ┐  the dot marks the current distance
"""
from __future__ import annotations

import math

from bokeh.models import Arrow, ColumnDataSource, HoverTool, Span, VeeHead

from widgets.common import PALETTE, label_html, themed_figure
from widgets.common.theme import ink


class PairPlot:
    """One pair of dimensions as two arrows from the origin, on their circles."""

    def __init__(self, dark: bool):
        c = ink(dark)
        self.source = ColumnDataSource({"x": [0.0, 0.0], "y": [0.0, 0.0], "who": ["query", "key"],
                                        "pos": [0, 0], "angle": [0.0, 0.0], "color": PALETTE[:2]})
        self.rings = ColumnDataSource({"r": [1.0, 1.0], "who": ["query", "key"], "color": PALETTE[:2]})
        # No axes, so a 4 px border all round (at 390 px two plots share a row, and the title needs all
        # of its 175 px); 15% of room around the circles keeps an arrow's head or dot at the circle's
        # edge inside the plot.
        fig = themed_figure(dark, height=270, sizing_mode="stretch_width", match_aspect=True, tools="",
                            min_border=4, min_border_left=4, min_border_right=4, title="")
        fig.x_range.range_padding = fig.y_range.range_padding = 0.15
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


class ScoreCurve:
    """The score q·k/√d against the distance m − n, with the current distance marked."""

    def __init__(self, dark: bool):
        self.curve = ColumnDataSource({"d": [], "s": []})
        self.mark = ColumnDataSource({"d": [], "s": []})
        fig = themed_figure(dark, height=200, tools="", x_axis_label="distance m − n (positions)",
                            y_axis_label="score q·k/√d")
        dots = fig.scatter("d", "s", source=self.curve, size=4, color=PALETTE[2])
        fig.line("d", "s", source=self.curve, color=PALETTE[2], alpha=0.6)
        here = fig.scatter("d", "s", source=self.mark, size=12, color=PALETTE[3], marker="diamond")
        fig.add_tools(HoverTool(renderers=[dots, here], tooltips=[("m − n", "@d"), ("score", "@s{0.000}")]))
        self.figure = fig

    def show(self, view: dict) -> None:
        self.curve.data = {"d": list(range(len(view["curve"]))), "s": view["curve"]}
        d = view["m"] - view["n"]
        inside = 0 <= d < len(view["curve"])
        self.mark.data = {"d": [d] if inside else [], "s": [view["score"]] if inside else []}


def readout_html(view: dict) -> str:
    """The score at (m, n), the same distance elsewhere, and what each shown pair adds."""
    m, n = view["m"], view["n"]
    d = m - n
    same = " · ".join(f"({s['m']:,}, {s['n']:,}): <b>{s['score']:.3f}</b>" for s in view["same"])
    ahead = (" A key after its query is masked in a real model; the rotation rule holds all the same."
             if d < 0 else "")
    pair_lines = "".join(
        f"<li>pair {p['pair']} (a full turn every {2 * math.pi / p['speed']:,.0f} positions): the query turned by m·θ = {m * p['speed']:,.3f} rad, the key by "
        f"n·θ = {n * p['speed']:,.3f} rad; the angle between them changed by (m − n)·θ = "
        f"{d * p['speed']:,.3f} rad. This pair adds {p['dot']:.3f} to q·k.</li>" for p in view["pairs"])
    return (f'<p class="rope-score">m = {m:,}, n = {n:,}, <b>m − n = {d:,}</b> · score q·k/√d over all 32 pairs: '
            f'<b class="rope-value">{view["score"]:.3f}</b></p>'
            f'<p class="w-small">The same distance elsewhere, (m, n) → score: {same or "out of the window"}.{ahead}</p>'
            f'<ul class="rope-pairs">{pair_lines}</ul>')


def caption_html(label: str) -> str:
    return (f'<p class="w-small">Computed with the model\'s rope function (θ base '
            f"100,000, pair i = dimensions i and i + 32) in float32, as the model does: far "
            f"into the window the last digit can wobble. {label_html(label)}</p>")
