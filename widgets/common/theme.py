"""Looks shared by every widget: stylesheets, HTML panes, a colour-blind-safe palette, and Bokeh
figures that follow the app's light or dark theme (``?theme=dark``).

    dark = is_dark()                                   # the reader's theme, from the URL
    pane = html_pane("<p>…</p>", ["tok-out"])          # our CSS loaded, math typesetting off
    fig = themed_figure(height=320, dark=dark)         # a Bokeh figure in the page's colours
    PALETTE[i % len(PALETTE)]                          # Okabe–Ito colours, safe for colour-blind readers

CSS lives in ``assets/widgets.css`` (served by the app as ``static/widgets.css``), never inline: Bokeh
renders each pane in its own shadow root, so every pane lists the stylesheets it needs. The page's
colours come from Panel's theme variables, which inherit into shadow roots; a Bokeh canvas cannot
read CSS, so ``style_figure`` sets its colours from the theme explicitly.
"""
from __future__ import annotations

import panel as pn

# Okabe & Ito (2008), "Color Universal Design": distinguishable with every common colour-vision
# deficiency. Yellow is last: it has too little contrast on a light background for thin marks.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442"]
MARKERS = ["circle", "square", "triangle", "diamond", "inverted_triangle", "hex", "star"]

# Text, muted text, grid and surface colours of the two themes, for canvases that cannot read CSS.
_INK = {
    False: {"text": "#1d1d1f", "muted": "#5f6368", "grid": "#e3e6ea", "axis": "#b9bec4", "surface": "#ffffff"},
    True: {"text": "#e8e8ea", "muted": "#a9adb3", "grid": "#33383e", "axis": "#5a6068", "surface": "#1e2226"},
}

# Panel's dark theme keeps its mid-blue primary colour, too dark for link text on a dark page; on the
# light blue that replaces it, text is dark; the "good" green is lightened to read on the dark page.
DARK_OVERRIDES = (":host { --ex-accent: #7cc4ff; --ex-on-accent: #0b1f33; --ex-ok: #3fd3a0; --w-bad: #ff8a7d;"
                  " --w-vermilion-ink: #f08a3c; }"
                  # code blocks on github-dark's own canvas, where its comment grey reads at 4.5:1
                  " .prose pre { background: #161b22; }")


def static_url(name: str) -> str:
    """Root-relative URL of a file in assets/, served by Bokeh as the directory app's static/.

    The page's own address says where the app is mounted (``/app``, or under a ``--prefix``). When the
    session was made from the websocket's request instead (a page whose websocket arrived after Bokeh
    had dropped the session its page load made: seen under load), that address is the app's ``/ws``
    endpoint, whose ``static/`` does not exist: the page would come up unstyled."""
    path = "/app"
    ctx = pn.state.curdoc.session_context if pn.state.curdoc else None
    if ctx is not None and ctx.request is not None and ctx.request.path:
        path = ctx.request.path.rstrip("/")
        path = (path[:-len("/ws")] if path.endswith("/ws") else path) or "/app"
    return f"{path}/static/{name}"


def is_dark() -> bool:
    """The reader's theme: the page was opened with ``theme=dark`` (Panel reads the same argument)."""
    from widgets.common.sentence import query_arg
    return query_arg("theme") == "dark"


def stylesheets(dark: bool | None = None) -> list[str]:
    """The app's and the widgets' CSS, plus the dark theme's overrides when it is on."""
    dark = is_dark() if dark is None else dark
    sheets = [static_url("app.css"), static_url("widgets.css")]
    return sheets + [DARK_OVERRIDES] if dark else sheets


def html_pane(markup: str = "", css_classes: list[str] | None = None, dark: bool | None = None,
              **kw) -> pn.pane.HTML:
    """An HTML pane for widget output: our stylesheets, full width, no math typesetting (a reader's
    ``$`` stays a dollar sign). Everything put into it must already be escaped (``text.esc``)."""
    kw.setdefault("sizing_mode", "stretch_width")
    kw.setdefault("margin", (0, 0))
    return pn.pane.HTML(markup, stylesheets=stylesheets(dark), disable_math=True,
                        css_classes=css_classes or [], **kw)


def ink(dark: bool | None = None) -> dict[str, str]:
    """The theme's colours as hex strings: text, muted, grid, axis, surface."""
    return _INK[is_dark() if dark is None else dark]


def style_figure(fig, dark: bool | None = None):
    """Give a Bokeh figure the page's colours: transparent background, themed text, grid and axes."""
    c = ink(dark)
    fig.background_fill_alpha = 0
    fig.border_fill_alpha = 0
    fig.outline_line_color = None
    for axis in fig.axis:
        axis.axis_label_text_color = c["text"]
        axis.major_label_text_color = c["muted"]
        axis.axis_line_color = c["axis"]
        axis.major_tick_line_color = c["axis"]
        axis.minor_tick_line_color = None
        axis.axis_label_text_font_style = "normal"
    for grid in fig.grid:
        grid.grid_line_color = c["grid"]
    if fig.title is not None:
        fig.title.text_color = c["text"]
    if fig.legend:
        for legend in fig.legend:
            legend.background_fill_alpha = 0
            legend.border_line_color = None
            legend.label_text_color = c["text"]
    return fig


# Pixels between the canvas's left and right edges and the plot, unless a figure asks for other: Bokeh's
# 5 put a label beside a point at the plot's right edge, or a plot without a y axis, against the pane's
# edge (ux review: ch. 6, 7, 20).
MIN_BORDER = 16


def themed_figure(dark: bool | None = None, **kw):
    """A Bokeh figure styled by ``style_figure``; keyword arguments go to ``bokeh.plotting.figure``."""
    from bokeh.plotting import figure
    kw.setdefault("sizing_mode", "stretch_width")
    kw.setdefault("toolbar_location", None)
    kw.setdefault("min_border_left", MIN_BORDER)
    kw.setdefault("min_border_right", MIN_BORDER)
    return style_figure(figure(**kw), dark)


def legend_above(fig, ncols: int | None = None) -> None:
    """Move the figure's legend above the plot, where it hides no point: one row, or `ncols` to a row
    when one row would not fit a phone's 390 px."""
    legend = fig.legend[0]
    legend.orientation, legend.label_text_font_size, legend.padding, legend.margin = "horizontal", "8pt", 2, 0
    if ncols:
        legend.ncols = ncols
    fig.center = [r for r in fig.center if r is not legend]
    fig.add_layout(legend, "above")


def log_ticks(mantissas=(1, 2, 5)):
    """Fixed ticks at these multiples of each power of ten for a log axis: Bokeh's own log ticker drops
    labels when a range spans under two decades, or crowds "5,000 6,000 7,000 8,000" at its top."""
    from bokeh.models import FixedTicker
    return FixedTicker(ticks=[m * 10**e for e in range(-1, 8) for m in mantissas])


def log_span(values, headroom: float = 1.6, mantissas=(1, 2, 5)) -> tuple[float, float]:
    """A log axis's (start, end) from the tick at or below the smallest value to the tick at or above
    the largest times `headroom`, so the lowest point has a tick beneath it and the top point's label
    (drawn above the point) stays inside the plot."""
    ticks = sorted(m * 10**e for e in range(-1, 8) for m in mantissas)
    lo, hi = min(values), max(values) * headroom
    return (max([t for t in ticks if t <= lo] or [ticks[0]]), min([t for t in ticks if t >= hi] or [ticks[-1]]))
