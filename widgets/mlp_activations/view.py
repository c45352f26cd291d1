"""What the MLP widget draws: all 1,536 neurons of one token and one neuron across the sentence (Bokeh),
the token's path, the strongest neurons' table and the neuron's line (HTML), from compute.py's data.

    up ▲        ·  ·   ●           every neuron is a dot at (gate, up), coloured by its product
       │ · · ·:·:·· ·  ·           SiLU(gate) × up: left of gate = 0 the gate is shut (products near 0,
       │──────┼──────────► gate    grey); to the right, the product follows up (orange +, blue −).
       │ · ·  │ ·  ●               The biggest products are the large dots; tap one to follow it.

    ▐ ▐█ ▐ ▐▐ █ ▐                  the chosen neuron's product on each token; tap a bar to pick the token
"""
from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper, Span, TapTool

from widgets.common import esc, label_html, show_token, themed_figure
from widgets.common.theme import ink
from widgets.mlp_activations.compute import strongest_tokens

LABELLED_TOKENS = 24


def diverging(n: int = 255) -> list[str]:
    """Blue (negative) through grey (zero) to vermillion (positive): Okabe–Ito ends, safe for
    colour-blind readers, and zero reads as "nothing happens"."""
    ends = [(0x00, 0x72, 0xB2), (0x9a, 0x9a, 0x9a), (0xD5, 0x5E, 0x00)]
    out = []
    for i in range(n):
        t = 2 * i / (n - 1)
        a, b = (ends[0], ends[1]) if t <= 1 else (ends[1], ends[2])
        f = t if t <= 1 else t - 1
        out.append("#%02x%02x%02x" % tuple(round(x + (y - x) * f) for x, y in zip(a, b)))
    return out


class MLPPlots:
    def __init__(self, dark: bool, on_neuron, on_token):
        self.dark = dark
        # x = gate (before SiLU), y = up, for every neuron
        self.neurons = ColumnDataSource({k: [] for k in ("x", "y", "silu", "product", "neuron", "size")})
        self.chosen = ColumnDataSource({"x": [], "y": [], "neuron": [], "product": []})
        self.mapper = LinearColorMapper(palette=diverging(), low=-1, high=1)
        fig = themed_figure(dark, height=330, tools="", x_axis_label="gate = W_gate·x (before SiLU)",
                            y_axis_label="up = W_up·x", css_classes=["mlp-scatter"])
        dots = fig.scatter("x", "y", source=self.neurons, size="size", line_color=None,
                           fill_color={"field": "product", "transform": self.mapper}, fill_alpha=0.85,
                           nonselection_fill_alpha=0.85, selection_fill_alpha=0.85)
        ring = fig.scatter("x", "y", source=self.chosen, size=18, marker="circle", fill_alpha=0,
                           line_color=ink(dark)["text"], line_width=2)
        fig.add_layout(Span(location=0, dimension="height", line_color=ink(dark)["axis"], line_dash="dashed"))
        tips = [("neuron", "@neuron"), ("gate", "@x{+0.000}"), ("SiLU(gate)", "@silu{+0.000}"),
                ("up", "@y{+0.000}"), ("product", "@product{+0.000}")]
        fig.add_tools(HoverTool(renderers=[dots], tooltips=tips),
                      HoverTool(renderers=[ring], tooltips=[("chosen neuron", "@neuron"), ("product", "@product{+0.000}")]),
                      TapTool(renderers=[dots]))
        self.neurons.selected.on_change("indices", lambda a, o, new: new and on_neuron(self.neurons.data["neuron"][new[0]]))
        self.scatter = fig

        self.bars = ColumnDataSource({"x": [], "top": [], "tok": [], "line": []})
        prof = themed_figure(dark, height=220, tools="", y_axis_label="product", css_classes=["mlp-profile-plot"])
        prof.grid.grid_line_alpha = 0.5
        # Same colours as the dots (sign of the product); the chosen token is outlined.
        bars = prof.vbar("x", top="top", width=0.8, source=self.bars, line_color="line", line_width=2,
                         fill_color={"field": "top", "transform": self.mapper},
                         nonselection_fill_alpha=1.0, selection_fill_alpha=1.0)
        prof.add_tools(HoverTool(renderers=[bars], tooltips=[("token", "@tok (token @x)"), ("product", "@top{+0.000}")]),
                       TapTool(renderers=[bars]))
        self.bars.selected.on_change("indices", lambda a, o, new: new and on_token(int(self.bars.data["x"][new[0]])))
        self.profile = prof
        # Fixed heights, widths that stretch (a figure that scales its height with its width kept
        # the page's layout from settling).
        self.scatter_pane = pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        self.profile_pane = pn.pane.Bokeh(prof, sizing_mode="stretch_width")

    def show(self, d: dict, gate, up, prod) -> None:
        top = set(d["top"])
        n = len(gate)
        self.neurons.selected.indices = []
        self.neurons.data = {"x": gate.tolist(), "y": up.tolist(), "silu": d["silu"], "product": prod.tolist(),
                             "neuron": list(range(n)), "size": [11 if i in top else 4 for i in range(n)]}
        bound = max(float(abs(prod).max()), max(abs(v) for v in d["profile"]), 1e-6)
        self.mapper.low, self.mapper.high = -bound, bound
        k = d["neuron"]
        self.chosen.data = {"x": [float(gate[k])], "y": [float(up[k])], "neuron": [k], "product": [float(prod[k])]}
        T = len(d["tokens"])
        self.bars.selected.indices = []
        outline = ink(self.dark)["text"]
        self.bars.data = {"x": list(range(T)), "top": d["profile"], "tok": [show_token(t) for t in d["tokens"]],
                          "line": [outline if i == d["token"] else None for i in range(T)]}
        step = 1 if T <= LABELLED_TOKENS else max(1, round(T / 12))
        axis = self.profile.xaxis[0]
        axis.ticker = FixedTicker(ticks=list(range(0, T, step)))
        axis.major_label_overrides = ({i: show_token(t)[:12] for i, t in enumerate(d["tokens"])} if step == 1
                                      else {i: str(i) for i in range(0, T, step)})
        axis.major_label_orientation = 0.9 if step == 1 else 0
        self.profile.title.text = f"neuron {k}, layer {d['layer'] + 1}: each token"   # named 1-30, as in ch. 8


def flow_html(d: dict, gate, prod) -> str:
    """The chosen token's way through the MLP, with how many gates are open."""
    tok = esc(show_token(d["tokens"][d["token"]]))
    opened = int((gate > 0).sum())
    return (
        f'<p class="mlp-flow-line">‘<b>{tok}</b>’ in layer {d["layer"] + 1}: 576 numbers → RMSNorm → '
        f'<span class="mlp-g">W<sub>gate</sub></span> and <span class="mlp-u">W<sub>up</sub></span> (576 → 1,536 '
        f"each) → SiLU(gate) × up = 1,536 products → W<sub>down</sub> (1,536 → 576) → added to the token's "
        f"hidden state.</p><p class=\"w-small\">The gate is open (gate &gt; 0) for {opened:,} of the {len(gate):,} "
        f"features; SiLU squashes the other {len(gate) - opened:,} towards 0. {int((np.abs(prod) < 0.01).sum()):,} "
        "products are within 0.01 of 0.</p>")


def table_html(d: dict, gate, silu, up, prod) -> str:
    rows = "".join(
        f'<tr class="{"mlp-chosen" if n == d["neuron"] else ""}"><th scope="row">{n}</th>'
        f"<td>{gate[n]:+.2f}</td><td>{silu[n]:+.2f}</td><td>{up[n]:+.2f}</td><td><b>{prod[n]:+.2f}</b></td></tr>"
        for n in d["top"])
    return (f'<table class="mlp-table"><caption>The {len(d["top"])} neurons with the largest |product| for '
            "this token</caption><thead><tr><th>neuron</th><th>gate</th><th>SiLU(gate)</th><th>up</th>"
            f"<th>product</th></tr></thead><tbody>{rows}</tbody></table>")


def profile_html(d: dict) -> str:
    """The tokens of the sentence that drive the chosen neuron hardest."""
    profile = np.asarray(d["profile"])
    best = ", ".join(f"‘{esc(show_token(d['tokens'][i]))}’ {profile[i]:+.2f}" for i in strongest_tokens(profile))
    return (f'<p class="mlp-profile-line">Neuron <b>{d["neuron"]}</b> of layer '
            f'{d["layer"] + 1} responds most strongly to {best}.</p>')


def caption_html(label: str) -> str:
    return (f'<p class="w-small">Gate, up and products are the values the layer computed, as '
            f"<code>inspect</code> recorded them. {label_html(label)}</p>")
