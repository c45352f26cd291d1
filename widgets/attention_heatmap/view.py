"""What the attention heatmap draws: one head large and a layer's heads as small multiples (Bokeh), the
sentence shaded by one query's weights and the KV-bytes table (HTML), from a ``LayerView`` (compute.py).

    key →                                         one rect per (query, key) cell the causal mask
  q ┌────────┐                                    allows; the upper triangle stays empty. Hovering
  u │■       │  ← hovered row: outlined, and     a cell shows query, key, weight and scaled score,
  e │■ ■     │    the sentence below shaded      and moves the row outline at once (in the browser);
  r │■ ■ ■   │    by that row's weights          the sentence strip is redrawn by the server.
  y └────────┘

Colours: one blue hue from light to dark (readable with every colour-vision deficiency), starting
above white so a tiny weight is still visibly a cell, unlike a masked one.
"""
from __future__ import annotations

import numpy as np
from bokeh.models import (BoxAnnotation, ColorBar, ColumnDataSource, CustomJS, FixedTicker, HoverTool,
                          LinearColorMapper, Range1d, TapTool)
from bokeh.palettes import Blues256

from widgets.attention_heatmap.compute import LayerView, kv_bytes_rows
from widgets.common import esc, label_html, modelled, show_token, themed_figure
from widgets.common.theme import ink

LABELLED_TOKENS = 24         # above this many tokens, axes show every few tokens' positions only
EMPTY = {"x": [], "y": [], "prob": [], "score": [], "value": [], "qtok": [], "ktok": [], "head": []}


def palette(dark: bool) -> list[str]:
    """Low values pale in the light theme, dark in the dark theme; skip the end that melts into the page."""
    return list(Blues256[:-40]) if dark else list(reversed(Blues256))[40:]


def _tooltips(with_head: bool) -> list[tuple[str, str]]:
    head = [("head", "@head")] if with_head else []
    return head + [("query", "@qtok (token @y)"), ("key", "@ktok (token @x)"),
                   ("weight", "@prob{0.000}"), ("scaled score q·k/√d", "@score{0.00}")]


def _axes(fig, tokens: list[str], show_labels: bool) -> None:
    T = len(tokens)
    fig.x_range.start, fig.x_range.end = -0.5, T - 0.5
    fig.y_range.start, fig.y_range.end = T - 0.5, -0.5          # query 0 on top, like a matrix
    step = 1 if T <= LABELLED_TOKENS else max(1, round(T / 12))
    ticks = list(range(0, T, step))
    for axis in (fig.xaxis[0], fig.yaxis[0]):
        axis.ticker = FixedTicker(ticks=ticks)
        axis.visible = show_labels
        # Canvas text, not HTML: nothing a reader types can become markup here.
        axis.major_label_overrides = ({i: show_token(tokens[i])[:14] for i in ticks} if step == 1
                                      else {i: str(i) for i in ticks})


class HeadHeatmap:
    """One head, large: cells, colour bar, row outline; ``row_source`` carries the hovered row."""

    def __init__(self, dark: bool):
        self.dark = dark
        self.source = ColumnDataSource(dict(EMPTY))
        self.row_source = ColumnDataSource({"row": [0]})           # the hovered query row
        self.mapper = LinearColorMapper(palette=palette(dark), low=0, high=1)
        fig = themed_figure(dark, x_range=Range1d(-0.5, 0.5), y_range=Range1d(0.5, -0.5), tools="",
                            width=540, height=560, sizing_mode="scale_width", max_width=540, x_axis_location="above",
                            min_border_left=4, min_border_right=4, outline_line_color=None,
                            css_classes=["ah-heatmap"])
        fig.grid.visible = False
        fig.xaxis.major_label_orientation = 1.0
        fig.xaxis.axis_label, fig.yaxis.axis_label = "key token (what is looked at)", "query token (who looks)"
        cells = fig.rect("x", "y", 1, 1, source=self.source, line_color=None,
                         fill_color={"field": "value", "transform": self.mapper},
                         hover_line_color=ink(dark)["text"], hover_line_width=1.5)
        self.row_box = BoxAnnotation(left=-0.5, right=0.5, top=-0.5, bottom=0.5, fill_alpha=0,
                                     line_color=ink(dark)["text"], line_width=2, line_dash="dashed")
        fig.add_layout(self.row_box)
        # The outline follows the pointer in the browser; the server hears the new row and redraws
        # the sentence strip (one round trip per row entered, not per pixel).
        follow = CustomJS(args={"src": self.source, "row": self.row_source, "box": self.row_box}, code="""
            const ix = cb_data.index.indices;
            if (!ix.length) return;
            const i = src.data.y[ix[0]];
            box.top = i - 0.5; box.bottom = i + 0.5; box.right = i + 0.5;
            if (row.data.row[0] !== i) row.data = {row: [i]};
        """)
        fig.add_tools(HoverTool(renderers=[cells], tooltips=_tooltips(False), callback=follow))
        c = ink(dark)
        self.colorbar = ColorBar(color_mapper=self.mapper, width=10, title="weight", title_text_color=c["text"],
                                 major_label_text_color=c["muted"], background_fill_alpha=0,
                                 title_text_font_style="normal")
        fig.add_layout(self.colorbar, "right")
        self.figure = fig

    def show(self, tokens: list[str], data: dict, low: float, high: float, mode: str, row: int) -> None:
        _axes(self.figure, tokens, show_labels=True)
        self.mapper.low, self.mapper.high = low, high
        self.colorbar.title = "weight" if mode == "probs" else "scaled score"
        self.source.data = data
        self.show_row(row)

    def show_row(self, row: int) -> None:
        self.row_box.update(top=row - 0.5, bottom=row + 0.5, right=row + 0.5)
        if self.row_source.data["row"] != [row]:
            self.row_source.data = {"row": [row]}


class HeadGrid:
    """Every head of a layer as small multiples: one row per GQA group (the query heads that share
    a KV head). Tapping a head picks it for the large heatmap (``on_pick(head)``)."""

    def __init__(self, dark: bool, num_heads: int, group: int, on_pick):
        self.dark, self.group = dark, group
        self.mapper = LinearColorMapper(palette=palette(dark), low=0, high=1)
        self.sources, self.figures = [], []
        for h in range(num_heads):
            src = ColumnDataSource(dict(EMPTY))
            fig = themed_figure(dark, x_range=Range1d(-0.5, 0.5), y_range=Range1d(0.5, -0.5), tools="",
                                height=170, sizing_mode="stretch_width", min_border=2,
                                title=f"head {h}", css_classes=["ah-small", f"ah-small-{h}"])
            fig.grid.visible = False
            fig.axis.visible = False
            r = fig.rect("x", "y", 1, 1, source=src, line_color=None,
                         fill_color={"field": "prob", "transform": self.mapper},
                         nonselection_fill_alpha=1.0, selection_fill_alpha=1.0)
            fig.add_tools(HoverTool(renderers=[r], tooltips=_tooltips(True)), TapTool(renderers=[r]))
            src.selected.on_change("indices", lambda attr, old, new, h=h: new and on_pick(h))
            fig.title.text_font_size = "11px"
            self.sources.append(src)
            self.figures.append(fig)
        # One Panel pane per head in a CSS grid: a Bokeh gridplot that stretches kept the page's layout
        # from ever settling (Panel's onload, and so the widget, never started).
        import panel as pn
        self.layout = pn.GridBox(*[pn.pane.Bokeh(f, sizing_mode="stretch_width", height=170, margin=2)
                                   for f in self.figures], ncols=group, sizing_mode="stretch_width", max_width=600)

    def show(self, tokens: list[str], per_head: list[dict], chosen: int) -> None:
        c = ink(self.dark)
        for h, (fig, src) in enumerate(zip(self.figures, self.sources)):
            _axes(fig, tokens, show_labels=False)
            src.data = per_head[h]
            src.selected.indices = []
            kv = h // self.group
            fig.title.text = f"head {h} · KV {kv}"
            fig.title.text_color = c["text"] if h == chosen else c["muted"]
            fig.title.text_font_style = "bold" if h == chosen else "normal"
            fig.outline_line_color = c["text"] if h == chosen else c["grid"]
            fig.outline_line_width = 2 if h == chosen else 1


# -- the cells, the sentence strip and the KV table, from a LayerView ------------------------------------
def cells(view: LayerView, head: int, mode: str) -> dict[str, list]:
    """Column data for one head's heatmap: one cell per (query, key) pair the mask allows.
    ``mode`` is "probs" (softmax weights) or "scores" (scaled scores); both go in every tooltip."""
    T = view.num_tokens
    rows, cols = np.tril_indices(T)
    prob, score = view.probs[head, rows, cols], view.scores[head, rows, cols]
    labels = [show_token(t) for t in view.tokens]     # Bokeh escapes tooltip fields: plain text here
    return {"x": cols.tolist(), "y": rows.tolist(), "prob": prob.tolist(), "score": score.tolist(),
            "value": (prob if mode == "probs" else score).tolist(),
            "qtok": [labels[i] for i in rows], "ktok": [labels[j] for j in cols],
            "head": [head] * len(rows)}


def value_range(view: LayerView, head: int, mode: str) -> tuple[float, float]:
    """Colour scale: weights always 0–1 (comparable across heads); scores from their min to max."""
    if mode == "probs":
        return 0.0, 1.0
    s = view.scores[head]
    lo, hi = float(np.nanmin(s)), float(np.nanmax(s))
    return (lo, hi) if hi > lo else (lo - 1.0, hi + 1.0)


WEIGHT_LEVELS = 8              # shades of the sentence strip (classes aw0 … aw7 in widgets.css)


def strip_html(view: LayerView, head: int, row: int, top: int = 3) -> str:
    """The sentence with query token ``row`` outlined and every earlier token shaded by the weight
    the query gives it; later tokens are greyed out (masked). Everything is escaped."""
    row = min(max(int(row), 0), view.num_tokens - 1)
    weights = view.probs[head, row]
    spans = []
    for j, tok in enumerate(view.tokens):
        piece = esc(show_token(tok))
        if j > row:
            spans.append(f'<span class="as-tok as-masked" title="masked: after the query">{piece}</span>')
            continue
        level = min(int(weights[j] * WEIGHT_LEVELS), WEIGHT_LEVELS - 1)
        query = " as-query" if j == row else ""
        spans.append(f'<span class="as-tok aw{level}{query}" title="weight {weights[j]:.3f}">{piece}</span>')
    best = np.argsort(-weights[: row + 1], kind="stable")[:top]
    most = ", ".join(f"‘{esc(show_token(view.tokens[j]))}’ {weights[j]:.2f}" for j in best)
    return (f'<p class="as-readout">Query <b>‘{esc(show_token(view.tokens[row]))}’</b> (token {row}, head '
            f"{head}) puts most weight on {most}.</p>"
            f'<div class="as-strip" aria-label="the sentence shaded by attention weight">{"".join(spans)}</div>')


def kv_table_html(cfg, num_tokens: int) -> str:
    """Chapter 5's table: KV bytes per token with one KV head per query head (MHA), the model's own
    (GQA), or one for all (MQA), and for the reader's sentence."""
    rows = kv_bytes_rows(cfg, num_tokens)
    top = max(r["per_token"] for r in rows)
    body = "".join(
        f'<tr class="{"ah-this" if r["model"] else ""}"><th scope="row">{r["name"]}'
        f'{" · this model" if r["model"] else ""}<br><span class="w-small">{r["kv_heads"]} KV '
        f'head{"s" if r["kv_heads"] > 1 else ""}</span></th>'
        f'<td><meter min="0" max="{top}" value="{r["per_token"]}"></meter> <b>{r["per_token"]:,} B</b>'
        f'<br><span class="w-small">{r["formula"]}</span></td><td>{r["sentence"] / 1024:,.1f} KiB</td></tr>'
        for r in rows)
    return (f'<table class="ah-kv-table"><caption>Keys and values stored per token with {esc(cfg.name)}\'s '
            f"shapes in bf16 (2 × layers × KV heads × head dim × 2 bytes): one KV head per query head "
            f"(MHA), its real {cfg.num_kv_heads} (GQA), or one for all (MQA) · "
            f"{label_html(modelled('arithmetic from the model config'))}</caption><thead><tr><th>scheme</th>"
            f"<th>per token</th><th>your {num_tokens} tokens</th></tr></thead><tbody>{body}</tbody></table>")
