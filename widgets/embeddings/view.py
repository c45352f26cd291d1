"""How the embedding explorer draws its numbers (compute.py's plain data): HTML for the cosine and the
neighbour list, a Bokeh scatter for the PCA map (one renderer per word set, so the legend, colours and
markers never move). Everything that came from the reader is escaped here."""
from __future__ import annotations

import panel as pn

from widgets.common import MARKERS, PALETTE, esc, label_html, show_token
from widgets.common.theme import ink, is_dark, themed_figure


def _bar(value: float) -> str:
    """A cosine from −1 to 1 as a bar growing left or right from the middle."""
    pct = max(-1.0, min(1.0, value)) * 50
    side = f"left: 50%; width: {pct:.1f}%" if pct >= 0 else f"left: {50 + pct:.1f}%; width: {-pct:.1f}%"
    return f'<span class="emb-bar" aria-hidden="true"><span class="emb-fill{" neg" if pct < 0 else ""}" style="{side}"></span></span>'


def compare_html(c: dict | None, label: str) -> str:
    if c is None:
        return ""
    return (f'<div class="emb-compare"><p class="emb-cos">cosine(“{esc(show_token(c["a"]))}”, '
            f'“{esc(show_token(c["b"]))}”) = <b class="emb-cos-value">{c["cos"]:.2f}</b> {_bar(c["cos"])}</p>'
            f'<ul class="emb-how">{"".join(f"<li>{esc(h)}</li>" for h in c["how"])}</ul>'
            f"<p>{label_html(label)}</p></div>")


def neighbours_html(n: dict | None, label: str) -> str:
    if n is None:
        return ""
    rows = "".join(
        f'<li><code class="emb-tok">{esc(show_token(text))}</code><span class="w-small emb-id">id {tid}</span>'
        f'<span class="emb-val">{cos:.2f}</span>{_bar(cos)}</li>' for tid, text, cos in n["rows"])
    return (f'<div class="emb-neighbours"><p>The ten rows nearest to “{esc(show_token(n["word"]))}” among all '
            f'of the table (cosine similarity):</p><ol class="emb-list">{rows}</ol>'
            f'<p class="w-small">{esc(n["how"])}. {label_html(label)}</p></div>')


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def facts_html(facts: list, label: str, modelled_label: str) -> str:
    vocab, hidden, dtype, here, bf16, q8 = facts
    return (f'<p class="w-small emb-facts">The table: {vocab:,} rows × {hidden} columns = {vocab * hidden:,} numbers. '
            f"Here, in {esc(dtype)}: <b>{_mb(here)}</b> {label_html(label.split(' in ')[0])}. "
            f"In bf16 it would take {_mb(bf16)}, and as Q8_0, the 8-bit format the shipped file uses for it "
            f"(32 values in 34 bytes), {_mb(q8)} {label_html(modelled_label)}.</p>")


def map_note_html(share: list[float], label: str) -> str:
    """What the two axes of the map keep of the words' spread."""
    return (f'<p class="w-small">PCA keeps the two directions along which these words differ most: they carry '
            f"{100 * share[0]:.0f}% and {100 * share[1]:.0f}% of the spread among them; the other 574 "
            f"dimensions are flattened away. Hover a point for its tokens (and for its word where "
            f"labels would overlap). {label_html(label)}</p>")


_SYMBOL = {"circle": "●", "square": "■", "triangle": "▲", "diamond": "◆", "inverted_triangle": "▼", "hex": "⬢", "star": "★"}


def legend_html(set_names: list[str]) -> str:
    """The map's key, in the same colours and shapes as the points."""
    keys = "".join(f'<span class="emb-key"><span style="color: {PALETTE[i % len(PALETTE)]}" aria-hidden="true">'
                   f"{_SYMBOL[MARKERS[i % len(MARKERS)]]}</span> {esc(name)}</span>" for i, name in enumerate(set_names))
    return f'<p class="w-small emb-legend">Word sets on the map (click a button to show or hide it): {keys}</p>'


# Where each word's label goes, worked out in the browser: whether two labels overlap depends on the
# plot's size in pixels (about 300 px wide on a phone, 650 on a desktop), which only the browser knows.
# Each label tries the right of its point, then the left, above, below and the four corners, and takes
# the first place that stays inside the plot and covers no point and no label placed before it; a word
# with no free place keeps only its tooltip (the map's note says so). It runs when the data or the ranges change
# and, through a ResizeObserver on the plot's element, when the plot's width does.
_PLACE_LABELS = """
const run = (tries) => {
  // The first call can come before the plot's view exists or has its size (the ranges' first change):
  // try again shortly, or no label would show until the data next changed.
  const view = Bokeh.index.find_one(fig);
  const later = () => { if (tries < 100) setTimeout(() => run(tries + 1), 100); };
  if (view == null) return later();
  if (view._emb_labels == null) {
    let queued = false;
    view._emb_labels = new ResizeObserver(() => {
      if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; run(0); }); }
    });
    view._emb_labels.observe(view.el);
  }
  const W = view.frame.bbox.width, H = view.frame.bbox.height;
  const xr = fig.x_range, yr = fig.y_range;
  if (!(W > 0 && H > 0 && xr.end > xr.start && yr.end > yr.start)) return later();
  const X = (x) => (x - xr.start) / (xr.end - xr.start) * W;
  const Y = (y) => (y - yr.start) / (yr.end - yr.start) * H;      // upwards, as y_offset counts
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = font;
  const pts = [];
  for (const src of sources)
    for (let i = 0; i < src.data.x.length; i++)
      pts.push({x: src.data.x[i], y: src.data.y[i], word: src.data.word[i]});
  const R = 6, GAP = 7, TH = 12;                 // a marker's half size, label's gap and height (px)
  const taken = pts.map((p) => [X(p.x) - R, Y(p.y) - R, X(p.x) + R, Y(p.y) + R]);
  const hits = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
  const out = {x: [], y: [], word: [], xo: [], yo: [], align: []};
  for (const p of pts) {
    const w = ctx.measureText(p.word).width + 2, px = X(p.x), py = Y(p.y), up = R + 1 + TH / 2;
    for (const [dx, dy, align] of [[GAP, 0, "left"], [-GAP, 0, "right"], [0, up, "center"], [0, -up, "center"],
                                   [GAP, up, "left"], [GAP, -up, "left"], [-GAP, up, "right"], [-GAP, -up, "right"]]) {
      const x0 = align == "left" ? px + dx : align == "right" ? px + dx - w : px - w / 2;
      const box = [x0, py + dy - TH / 2, x0 + w, py + dy + TH / 2];
      if (box[0] < 0 || box[2] > W || box[1] < 0 || box[3] > H || taken.some((t) => hits(t, box)))
        continue;
      taken.push(box);
      out.x.push(p.x); out.y.push(p.y); out.word.push(p.word);
      out.xo.push(dx); out.yo.push(dy); out.align.push(align);
      break;
    }
  }
  labels.data = out;
};
run(0);
"""
LABEL_FONT = "11px"


class EmbeddingMap:
    """The 2-D PCA picture: ``show(map_data)`` replaces the points; the figure itself is built once."""

    def __init__(self, set_names: list[str]):
        from bokeh.models import ColumnDataSource, CustomJS, HoverTool, LabelSet
        dark = is_dark()
        c = ink(dark)
        self.fig = themed_figure(dark, height=380, x_axis_label="PC1", y_axis_label="PC2")
        self.sources = {}
        for i, name in enumerate(set_names):
            src = ColumnDataSource({"x": [], "y": [], "word": [], "pieces": [], "set": []})
            self.fig.scatter("x", "y", source=src, size=11, marker=MARKERS[i % len(MARKERS)],
                             color=PALETTE[i % len(PALETTE)], alpha=.9)
            self.sources[name] = src
        # One label source for every set, filled by _PLACE_LABELS in the browser.
        self.labels = ColumnDataSource({"x": [], "y": [], "word": [], "xo": [], "yo": [], "align": []})
        self.fig.add_layout(LabelSet(x="x", y="y", text="word", source=self.labels, x_offset="xo", y_offset="yo",
                                     text_align="align", text_baseline="middle", text_font_size=LABEL_FONT,
                                     text_color=c["text"]))
        place = CustomJS(args={"fig": self.fig, "sources": list(self.sources.values()), "labels": self.labels,
                               "font": f"{LABEL_FONT} {self.fig.xaxis[0].major_label_text_font}"},
                         code=_PLACE_LABELS)
        for src in self.sources.values():
            src.js_on_change("data", place)
        for rng in (self.fig.x_range, self.fig.y_range):
            rng.js_on_change("start", place)
            rng.js_on_change("end", place)
        self.fig.add_tools(HoverTool(tooltips=[("word", "@word"), ("set", "@set"), ("tokens", "@pieces"),
                                               ("PC1, PC2", "@x{0.00}, @y{0.00}")]))
        # Room around the points for their labels. The key is HTML (legend_html), where it wraps on a
        # phone; a Bokeh legend would be cut off.
        self.fig.x_range.range_padding, self.fig.y_range.range_padding = 0.2, 0.12
        self.pane = pn.pane.Bokeh(self.fig, sizing_mode="stretch_width", css_classes=["emb-map"])

    def show(self, data: dict) -> None:
        by_set: dict[str, dict[str, list]] = {n: {"x": [], "y": [], "word": [], "pieces": [], "set": []}
                                              for n in self.sources}
        for name, word, pieces, n_tokens, x, y in data["points"]:
            if name not in by_set:
                continue
            d = by_set[name]
            d["x"].append(x)
            d["y"].append(y)
            d["word"].append(word)
            d["pieces"].append(f"{pieces} ({n_tokens} tokens, averaged)" if n_tokens > 1 else pieces)
            d["set"].append(name)
        for name, src in self.sources.items():
            src.data = by_set[name]
        share = data["share"]
        self.fig.xaxis.axis_label = f"PC1 ({100 * share[0]:.0f}% of the spread)"
        self.fig.yaxis.axis_label = f"PC2 ({100 * share[1]:.0f}%)"
