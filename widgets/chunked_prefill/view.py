"""What the chunked-prefill widget (widget.py) draws from one comparison (compute.compare):

    StepBars   per step, stacked bars of each request's tokens (three chats' decodes, the document's
               chunk) against the token budget's line: one figure for chunking on, one for off, on
               the same axes (StepBars.pair), so the unchunked step stands as tall as its tokens
    GapPlot    every chat token's gap since the chat's previous token, against time since the
               document arrived, on and off; dashed lines where the document got its first token
    summary_html   the numbers in words
    progress_text  where a run in flight is (run, step, stage), for the notes' progress line

Bokeh models change only under the document lock: callers wrap ``show`` in ``pn.state.execute``.
"""
from __future__ import annotations

from statistics import median

from widgets.common import PALETTE, esc, is_dark, label_html, plural, style_figure, themed_figure
from widgets.common.load import busy_note
from widgets.common.theme import legend_above
from widgets.chunked_prefill.compute import AFTER_STEPS, DOC, chat_names

COLOURS = {"chat 1": PALETTE[0], "chat 2": PALETTE[5], "chat 3": PALETTE[2], DOC: PALETTE[3]}
MODES = {"on": ("chunked", PALETTE[1], "circle"), "off": ("not chunked", PALETTE[4], "square")}


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


def bar_rows(run: dict) -> dict:
    """Stacked-bar rectangles: one per request per step, chats first, the document on top."""
    cols = {"x": [], "y": [], "h": [], "color": [], "tip": []}
    for s in run["steps"]:
        bottom = 0
        for who in [*chat_names(3), DOC]:
            n = s["tokens"].get(who)
            if not n:
                continue
            kind = s["kinds"][who]
            what = f"{plural(n, 'token')} of its prompt" if kind == "prefill" else "1 decode token"
            cols["x"].append(s["step"])
            cols["y"].append(bottom + n / 2)
            cols["h"].append(n)
            cols["color"].append(COLOURS.get(who, PALETTE[6]))
            cols["tip"].append(f"step {s['step']:+d}: {who}, {what} (step total {sum(s['tokens'].values()):,} "
                               f"of a {run['budget']:,}-token budget, {_ms(s['wall_ms'])})")
            bottom += n
    return cols


class StepBars:
    """Tokens per request in each step, with the budget as a dashed line. ``share`` gives this figure
    another's x and y ranges (the same Bokeh objects: each range then spans both figures' bars)."""

    def __init__(self, title: str, share: StepBars | None = None):
        from bokeh.models import ColumnDataSource, HoverTool
        dark = is_dark()
        self.src = ColumnDataSource(data={"x": [], "y": [], "h": [], "color": [], "tip": []})
        self.budget = ColumnDataSource(data={"x": [], "y": [], "tip": []})
        ranges = {"x_range": share.fig.x_range, "y_range": share.fig.y_range} if share else {}
        self.fig = themed_figure(dark=dark, height=190, title=title, x_axis_label="step (0 = the document arrives)",
                                 y_axis_label="tokens", **ranges)
        bars = self.fig.rect("x", "y", width=0.8, height="h", fill_color="color", line_color=None, source=self.src)
        line = self.fig.line("x", "y", source=self.budget, color=PALETTE[3], line_dash="dashed", line_width=2)
        self.fig.add_tools(HoverTool(renderers=[bars], tooltips="@tip"),
                           HoverTool(renderers=[line], tooltips="@tip", mode="vline"))
        self.fig.y_range.start = 0
        self.fig.title.text_font_size = "9pt"
        self.fig.xgrid.visible = False
        style_figure(self.fig, dark)

    @classmethod
    def pair(cls, title_on: str, title_off: str) -> dict[str, StepBars]:
        """The "on" and "off" figures on one pair of axes. With a y axis each, the unchunked run's one
        284-token step was drawn as tall as a 64-token chunk, and the figure's point was lost (ux review
        ch. 17); one x axis puts the same step under the same step."""
        on = cls(title_on)
        return {"on": on, "off": cls(title_off, share=on)}

    def show(self, run: dict | None, title: str) -> None:
        self.fig.title.text = title
        if run is None:
            self.src.data = {"x": [], "y": [], "h": [], "color": [], "tip": []}
            self.budget.data = {"x": [], "y": [], "tip": []}
            return
        self.src.data = bar_rows(run)
        xs = [s["step"] for s in run["steps"]]
        tip = f"token budget: {run['budget']:,} tokens per step"
        self.budget.data = {"x": [min(xs) - 0.5, max(xs) + 0.5], "y": [run["budget"]] * 2, "tip": [tip, tip]}


class GapPlot:
    """Inter-token gaps of the chats over time, chunking on and off."""

    def __init__(self):
        from bokeh.models import ColumnDataSource, HoverTool
        dark = is_dark()
        self.fig = themed_figure(dark=dark, height=230, x_axis_label="ms since the document arrived",
                                 y_axis_label="gap before each chat token (ms)")
        self.src, self.ttft, marks = {}, {}, []
        for mode, (name, colour, marker) in MODES.items():
            self.src[mode] = ColumnDataSource(data={"x": [], "y": [], "tip": []})
            self.ttft[mode] = ColumnDataSource(data={"x0": [], "y0": [], "x1": [], "y1": [], "tip": []})
            marks.append(self.fig.scatter("x", "y", source=self.src[mode], color=colour, marker=marker, size=7,
                                          legend_label=name))
            marks.append(self.fig.segment("x0", "y0", "x1", "y1", source=self.ttft[mode], color=colour,
                                          line_dash="dashed", line_width=2,
                                          legend_label=f"{name}: document's 1st token"))
        self.fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
        self.fig.y_range.start = 0
        style_figure(self.fig, dark)
        legend_above(self.fig, ncols=2)         # a row per mode: its gaps, its document's first token

    def show(self, data: dict, label: str) -> None:
        top = max([g for m in MODES if m in data for gs in data[m]["gaps"].values() for _, g in gs] or [1])
        for mode, (name, _, _) in MODES.items():
            run = data.get(mode)
            pts = [(who, t, g) for who, gs in (run["gaps"].items() if run else []) for t, g in gs]
            self.src[mode].data = {"x": [t for _, t, _ in pts], "y": [g for _, _, g in pts],
                                   "tip": [f"{who}, {name}: a token {_ms(g)} after its previous one, at {_ms(t)} · "
                                           f"{label}" for who, t, g in pts]}
            ttft = run["doc_ttft_ms"] if run else None
            tip = f"the document's first token, {name}: {_ms(ttft)} after it arrived · {label}" if run else ""
            self.ttft[mode].data = ({"x0": [ttft], "y0": [0], "x1": [ttft], "y1": [top], "tip": [tip]} if run else
                                    {"x0": [], "y0": [], "x1": [], "y1": [], "tip": []})


def legend_html() -> str:
    keys = "".join(f'<span class="cp-key"><span class="cp-swatch cp-{i}"></span>{esc(w)}</span>'
                   for i, w in enumerate(COLOURS))            # cp-0 … cp-3: COLOURS in assets/widgets.css
    return f'<p class="cp-legend w-small">{keys}<span class="cp-key cp-budget">- - token budget</span></p>'


def gap_stats(run: dict) -> tuple[float, float]:
    """The largest and the median gap of the chats' tokens after the document arrived."""
    gaps = [g for gs in run["gaps"].values() for t, g in gs if t > 0]
    return (max(gaps), median(gaps)) if gaps else (0.0, 0.0)


def summary_html(data: dict, label: str) -> str:
    on, off = data.get("on"), data.get("off")
    if on is None:
        return '<p class="cp-summary placeholder">Running…</p>'
    top_on, mid_on = gap_stats(on)
    chunks = on["doc_chunks"]
    parts = [f'<p class="cp-summary">The document ({plural(on["doc_tokens"], "prompt token")}) went in '
             f'<b class="cp-chunks">{plural(len(chunks), "chunk")}</b> under a budget of {on["budget"]:,} '
             f'({" + ".join(f"{c:,}" for c in chunks)}). Chunked: its first token after '
             f'<b class="cp-ttft-on">{_ms(on["doc_ttft_ms"])}</b>; the chats\' longest gap '
             f'<b class="cp-gap-on">{_ms(top_on)}</b> (median {_ms(mid_on)}).']
    if off is not None:
        top_off, mid_off = gap_stats(off)
        parts.append(f' Not chunked (one step, budget raised to {off["budget"]:,} to hold it): first token after '
                     f'<b class="cp-ttft-off">{_ms(off["doc_ttft_ms"])}</b>; longest gap '
                     f'<b class="cp-gap-off">{_ms(top_off)}</b> (median {_ms(mid_off)}).')
    parts.append(f"</p><p class=\"w-small\">{label_html(label)} · private engines, freed after each run "
                 f"({on['free_after']} of {on['num_blocks']} blocks free).</p>")
    return "".join(parts)


def progress_text(p: dict | None) -> str:
    """Where a running comparison is (compute.drive's progress, posted after every step): the run, its
    step and stage, and a note when other readers' work shares the CPU. "" when there is nothing to say."""
    if not p:
        return ""
    run = (f"Run 1 of 2 (chunked, budget {p['budget']:,})" if p["run"] == "on" else
           f"Run 2 of 2 (not chunked, budget raised to {p['budget']:,})")
    stage = p["stage"]
    if stage == "chats":
        what = "the three chats' prompts"
    elif stage == "warm":
        what = "the chats decode; the document arrives next"
    elif stage == "document":
        what = (f"the document: {p['doc_done']:,} of {plural(p['doc_tokens'], 'prompt token')} computed"
                + (f" ({plural(p['chunks'], 'chunk')} so far)" if p["run"] == "on" and p["chunks"] else ""))
    else:
        what = f"the document has its first token; {p['after']} of {AFTER_STEPS} steps after it"
    return f"{run}: step {p['steps']}, {what}…{busy_note(p.get('others', 0))}"
