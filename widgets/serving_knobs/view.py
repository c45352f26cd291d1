"""What the serving-knobs widget (widget.py) draws: the runs as points of a throughput/latency
frontier (one figure for TTFT, one for ITL, p50 and p99 each), the chosen pattern's request lengths,
and the runs as a table. Each point is numbered like its row in the table; hover for its settings.

    latency │  ▲3                ▲ p99    ● p50    ── the frontier: no other run has both more
     (log)  │ ▲1 ●3  ▲2                              tokens/s and less latency
            │●1 ───●2
            └──────────────── output tokens/s
"""
from __future__ import annotations

from widgets.common import MARKERS, PALETTE, card_table, esc, is_dark, label_html, style_figure, themed_figure
from widgets.common.theme import legend_above, log_span, log_ticks
from widgets.serving_knobs.compute import frontier

KINDS = {"chatbot": ("chat", PALETTE[0]), "summarization": ("summarization", PALETTE[1]),
         "codegen": ("code generation", PALETTE[2])}
PCTS = {"p50": (PALETTE[0], "circle"), "p99": (PALETTE[3], "triangle")}


def _ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x / 1e3:,.2f} s" if x >= 1000 else (f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms")


def tip(n: int, p: dict, what: str, pct: str) -> str:
    return (f"run {n}: {p['label']} → {p['tokens_per_s']:,.1f} output tokens/s, {what} {pct} "
            f"{_ms(p[f'{what.lower()}_{pct}_ms'])} · {p.get('source') or 'measured on ' + p['device']}")


class FrontierPlot:
    """Latency (TTFT or ITL) at p50 and p99 against throughput; the frontier of each drawn as a line."""

    def __init__(self, what: str):
        from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter, Range1d
        dark = is_dark()
        self.what = what
        # The y range is set by show() from the points (log_span): Bokeh's own left the top point's
        # number outside the plot and the lowest point with no tick beneath it.
        self.fig = themed_figure(dark=dark, height=240, y_axis_type="log", x_axis_label="output tokens/s",
                                 y_axis_label=f"{what} (ms, log scale)", y_range=Range1d(10, 10_000))
        self.src, self.line, marks = {}, {}, []
        for pct, (colour, marker) in PCTS.items():
            self.src[pct] = ColumnDataSource(data={"x": [], "y": [], "n": [], "tip": []})
            self.line[pct] = ColumnDataSource(data={"x": [], "y": []})
            self.fig.line("x", "y", source=self.line[pct], color=colour, line_width=2, alpha=0.6)
            marks.append(self.fig.scatter("x", "y", source=self.src[pct], color=colour, marker=marker, size=10,
                                          legend_label=f"{what} {pct}"))
            self.fig.text("x", "y", text="n", source=self.src[pct], x_offset=7, y_offset=-4, text_font_size="8pt",
                          text_color=colour)
        self.fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
        self.fig.yaxis.ticker = log_ticks()                                   # 1, 2, 5 × 10ⁿ: never jammed
        self.fig.yaxis.formatter = NumeralTickFormatter(format="0,0.[0]")    # 150,000 rather than 1.5e+5
        style_figure(self.fig, dark)
        legend_above(self.fig)

    def show(self, runs: list[tuple[int, dict]]) -> None:
        key = self.what.lower()
        for pct in PCTS:
            field = f"{key}_{pct}_ms"
            have = [(n, p) for n, p in runs if p[field]]
            self.src[pct].data = {"x": [p["tokens_per_s"] for _, p in have], "y": [p[field] for _, p in have],
                                  "n": [str(n) for n, _ in have], "tip": [tip(n, p, self.what, pct) for n, p in have]}
            best = frontier([p for _, p in have], field)
            self.line[pct].data = {"x": [p["tokens_per_s"] for p in best], "y": [p[field] for p in best]}
        shown = [v for pct in PCTS for v in self.src[pct].data["y"]]
        if shown:
            self.fig.y_range.start, self.fig.y_range.end = log_span(shown)


class LengthScatter:
    """ISL against OSL of the chosen pattern's requests, coloured by kind (mixed has all three)."""

    def __init__(self):
        from bokeh.models import ColumnDataSource, HoverTool
        dark = is_dark()
        self.fig = themed_figure(dark=dark, height=220, x_axis_label="prompt tokens (ISL)",
                                 y_axis_label="output tokens (OSL)")
        self.src, marks = {}, []
        for i, (kind, (name, colour)) in enumerate(KINDS.items()):
            self.src[kind] = ColumnDataSource(data={"x": [], "y": [], "tip": []})
            marks.append(self.fig.scatter("x", "y", source=self.src[kind], color=colour, marker=MARKERS[i], size=8,
                                          legend_label=name))
        self.fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
        self.fig.x_range.start = self.fig.y_range.start = 0
        self.fig.x_range.range_padding = self.fig.y_range.range_padding = 0.15   # no point against an edge
        style_figure(self.fig, dark)
        legend_above(self.fig)
        # A kind the pattern has no request of keeps its legend item hidden: an item whose renderer
        # has no points is drawn without a marker (chat showed "summarization" and "code generation").
        self.items = {kind: item for kind, item in zip(KINDS, self.fig.legend[0].items)}

    def show(self, requests: list[dict]) -> None:
        for kind, (name, _) in KINDS.items():
            mine = [(i, r) for i, r in enumerate(requests, 1) if r["kind"] == kind]
            self.src[kind].data = {"x": [r["isl"] for _, r in mine], "y": [r["osl"] for _, r in mine],
                                   "tip": [f"request {i} ({name}): {r['isl']} prompt tokens, {r['osl']} output "
                                           "tokens" for i, r in mine]}
            self.items[kind].visible = bool(mine)


RUN_COLUMNS = ("run", "max_num_seqs", "budget", "chunked · caching", "tokens/s", "TTFT p50 / p99",
               "ITL p50 / p99", "preempted · cache hits")


def _run_cells(n: int, p: dict) -> list:
    k = p["knobs"]
    return [n, k["max_num_seqs"], f'{p["budget_used"]:,}{"*" if p["budget_used"] != k["budget"] else ""}',
            f'{"on" if k["chunked"] else "off"} · {"on" if k["caching"] else "off"}', (f'{p["tokens_per_s"]:,.1f}', "sk-tps"),
            f'{_ms(p["ttft_p50_ms"])} / {_ms(p["ttft_p99_ms"])}', f'{_ms(p["itl_p50_ms"])} / {_ms(p["itl_p99_ms"])}',
            f'{p["preemptions"]} · {p["hit_rate"]:.0%}']


def runs_html(runs: list[tuple[int, dict]], others: int) -> str:
    """The runs of the chosen pattern as a table, newest last."""
    star = any(p["budget_used"] != p["knobs"]["budget"] for _, p in runs)
    notes = []
    if star:
        notes.append("* without chunked prefill the budget is raised to hold the longest request whole, "
                     "as the engine requires.")
    if others:
        notes.append(f"{others} run(s) of other patterns are kept: pick their pattern to see them.")
    sources = "".join(f'<p class="w-small">{label_html(s)}</p>'
                      for s in sorted({p.get("source") or f"measured on {p['device']}" for _, p in runs}))
    table = card_table(RUN_COLUMNS, [_run_cells(n, p) for n, p in runs], "sk-tab",
                       empty="Press Run: each run adds a row and a point.")
    return table + "".join(f'<p class="w-small">{esc(n)}</p>' for n in notes) + sources


def progress_html(p: dict | None) -> str:
    if not p:
        return ""
    return (f'<p class="w-small sk-progress" aria-live="polite">Serving: {p["done"]} of {p["total"]} requests done, '
            f'{p["steps"]:,} steps, {p["elapsed_s"]:,.1f} s. Press Stop to cancel.</p>')


def stopped_html() -> str:
    return '<p class="w-small sk-progress">Stopped: that run left no point.</p>'
