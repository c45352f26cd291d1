"""What the forward-pass widget draws: Bokeh figures built once per session, then fed new data, and the
HTML of a stage, of one layer's logit lens and of the lens table, from compute.py's records.

    norms_figure   ‖stream‖ after each layer, every token faint, the followed token bold (log scale:
                   the first token's stream grows a hundred times longer than the others')
    strip_figure   one token's vector at the current stage, one bar per dimension
    answer_figure  logit lens: the probability of the model's final prediction after each layer

Every mark has a hover tooltip; Bokeh escapes the token text it shows.
"""
from __future__ import annotations

import unicodedata

from bokeh.models import ColumnDataSource, HoverTool, Span

from widgets.common import PALETTE, esc, label_html, style_figure, themed_figure
from widgets.common.text import show_token
from widgets.common.theme import ink

FOLLOW, OTHERS, NEGATIVE = PALETTE[1], PALETTE[5], PALETTE[1]


def positive(dark: bool) -> str:
    """Okabe–Ito blue on a light page, its sky-blue sibling on a dark one (the deep blue is too dim there)."""
    return PALETTE[5] if dark else PALETTE[0]


def norms_figure(dark: bool):
    """Returns (figure, sources, marker): sources["all"] holds every token's points, ["one"] the
    followed token's line; ``marker`` is the vertical line at the layer being looked at."""
    fig = themed_figure(dark=dark, height=250, y_axis_type="log", x_range=(-0.5, 30.5),
                        x_axis_label="layer (0 = embedding)", y_axis_label="length of the stream ‖x‖")
    every = ColumnDataSource(dict(layer=[], norm=[], token=[], pos=[]))
    one = ColumnDataSource(dict(layer=[], norm=[], token=[], pos=[]))
    fig.scatter("layer", "norm", source=every, size=4, color=OTHERS, alpha=0.45, legend_label="other tokens")
    fig.line("layer", "norm", source=one, color=FOLLOW, line_width=2.5)
    fig.scatter("layer", "norm", source=one, size=7, color=FOLLOW, legend_label="followed token")
    fig.add_layout(fig.legend[0], "above")       # outside the plot: it would cover the points
    fig.legend.orientation = "horizontal"
    fig.legend.label_text_font_size = "11px"
    style_figure(fig, dark)                       # again, now that the legend exists
    marker = Span(location=0, dimension="height", line_color=ink(dark)["muted"], line_dash="dashed", line_width=1)
    fig.add_layout(marker)
    fig.add_tools(HoverTool(tooltips=[("token", "@pos: @token"), ("after layer", "@layer"),
                                      ("length", "@norm{0,0.0}")]))
    return fig, {"all": every, "one": one}, marker


def norms_data(tokens: list[str], norms: list[list[float]], follow: int) -> tuple[dict, dict]:
    layers = range(len(norms))
    shown = [show_token(t) for t in tokens]
    every = dict(layer=[], norm=[], token=[], pos=[])
    for pos, label in enumerate(shown):
        if pos == follow:
            continue
        every["layer"] += list(layers)
        every["norm"] += [norms[layer][pos] for layer in layers]
        every["token"] += [label] * len(norms)
        every["pos"] += [pos] * len(norms)
    one = dict(layer=list(layers), norm=[norms[layer][follow] for layer in layers],
               token=[shown[follow]] * len(norms), pos=[follow] * len(norms))
    return every, one


def strip_figure(dark: bool):
    fig = themed_figure(dark=dark, height=170, x_axis_label="dimension of the 576-number vector",
                        y_axis_label="value")
    source = ColumnDataSource(dict(dim=[], value=[], color=[]))
    fig.vbar(x="dim", top="value", width=0.9, source=source, color="color")
    fig.add_tools(HoverTool(tooltips=[("dimension", "#@dim"), ("value", "@value{+0.000}")], mode="vline"))
    fig.xgrid.grid_line_color = None
    return fig, source


def strip_data(vector: list[float], dark: bool) -> dict:
    up = positive(dark)
    return dict(dim=list(range(len(vector))), value=vector, color=[up if v >= 0 else NEGATIVE for v in vector])


def answer_figure(dark: bool):
    fig = themed_figure(dark=dark, height=200, x_range=(-0.5, 30.5), y_range=(0, 1.02),
                        x_axis_label="layer (0 = embedding)", y_axis_label="p(final prediction)")
    source = ColumnDataSource(dict(layer=[], p=[], rank=[], top=[], top_p=[]))
    fig.line("layer", "p", source=source, color=PALETTE[2], line_width=2)
    fig.scatter("layer", "p", source=source, size=6, color=PALETTE[2])
    marker = Span(location=0, dimension="height", line_color=ink(dark)["muted"], line_dash="dashed", line_width=1)
    fig.add_layout(marker)
    fig.add_tools(HoverTool(tooltips=[("after layer", "@layer"), ("p(final prediction)", "@p{0.0%}"),
                                      ("its rank", "@rank"), ("top token here", "@top (@top_p{0.0%})")]))
    return fig, source, marker


def answer_data(lens: list[dict]) -> dict:
    return dict(layer=[r["layer"] for r in lens], p=[r["answer_p"] for r in lens],
                rank=[r["answer_rank"] for r in lens], top=[show_token(r["top"][0][1]) for r in lens],
                top_p=[r["top"][0][2] for r in lens])


# -- HTML ------------------------------------------------------------------------------------------------
def stage_html(d: dict, stage: dict, step: int, label: str) -> str:
    """One stage of the block for the followed token: its shapes, its formula, what changed."""
    tok = esc(show_token(d["tokens"][d["token"]]))
    shapes = "".join(f'<li><code>{esc(name)}</code> <span class="fp-shape">[{", ".join(map(str, shape))}]</span></li>'
                     for name, shape in stage["shapes"])
    facts = "".join(f"<tr><th scope=\"row\">{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in stage["facts"])
    lens = d["lens"][d["block"]]["top"][0]
    after = ""
    if stage["key"] == "add2":
        after = (f'<p class="w-small">Read through the final norm and LM head now, the stream would predict '
                 f'“{esc(show_token(lens[1]))}” ({lens[2]:.0%}); chapter 9 follows this through all 30 blocks.</p>')
    return (f'<div class="fp-stage" data-stage="{esc(stage["key"])}">'
            f'<p class="fp-head"><b>{"Input" if step == 0 else f"Step {step} of 6"} · {esc(stage["title"])}</b> in block {d["block"]}, token '
            f'{d["token"]} “{tok}” · <code>{esc(stage["formula"])}</code></p>'
            f'<div class="fp-cols"><ul class="fp-shapes" aria-label="tensor shapes">{shapes}</ul>'
            f'<table class="fp-facts">{facts}</table></div>{after}'
            f'<p class="w-small">Bars: this token’s {len(stage["vector"])} numbers after this stage · '
            f'{label_html(label)}</p></div>')


def _tip(text: str) -> str:
    """A title naming the characters a token's mark stands for (⍽ is Unicode's NO-BREAK SPACE, U+00A0):
    the mark alone would leave a reader guessing."""
    hidden = [c for c in dict.fromkeys(text) if not c.isprintable() and c != "\n" and c != "\t"]
    if not hidden:
        return ""
    names = ", ".join(f"{show_token(c)} = {unicodedata.name(c, 'a control character').lower()} "
                      f"(U+{ord(c):04X})" for c in hidden)
    return f' title="{esc(names)}"'


def layer_html(d: dict, layer: int, label: str) -> str:
    """The logit lens after one layer: the top next tokens, and how likely the final prediction is there."""
    row = d["lens"][layer]
    bars = "".join(f'<li><span class="fp-tok"{_tip(text)}>{esc(show_token(text))}</span><meter min="0" max="1" '
                   f'value="{p:.4f}"></meter><span class="fp-p">{p:.1%}</span></li>'
                   for _i, text, p in row["top"])
    where = "the embedding (before any block)" if layer == 0 else f"block {layer}"
    last = len(d["lens"]) - 1
    final = (" This is the model’s real prediction: the logits the sampler draws from (chapter 10)."
             if layer == last else f" The final prediction “{esc(show_token(d['lens'][last]['top'][0][1]))}” "
             f"has {row['answer_p']:.1%} here (rank {row['answer_rank']}).")
    return (f'<div class="fp-layer" data-layer="{layer}"><p class="fp-head"><b>After {where}</b>: '
            f"what token {d['token']} “{esc(show_token(d['tokens'][d['token']]))}” would predict next.{final}</p>"
            f'<ol class="fp-top">{bars}</ol><p class="w-small">Final RMSNorm + LM head applied to the stream '
            f"[n, 576] → [n, 49152], softmax · {label_html(label)}</p></div>")


def lens_table_html(d: dict, current: int) -> str:
    rows = []
    for r in reversed(d["lens"]):                  # the prediction on top: the stream flows upward
        cells = "".join(f"<td{_tip(text)}>{esc(show_token(text))} <span class=\"w-small\">{p:.0%}</span></td>"
                        for _i, text, p in r["top"][:3])
        on = ' class="on"' if r["layer"] == current else ""
        name = "emb" if r["layer"] == 0 else str(r["layer"])
        rows.append(f'<tr{on}><th scope="row">{name}</th>{cells}</tr>')
    return ('<div class="fp-lens-box"><table class="fp-lens-table"><caption>Logit lens: the top 3 next tokens '
            "after each layer; the top row is the model’s prediction</caption><thead><tr><th>layer</th>"
            f'<th>1st</th><th>2nd</th><th>3rd</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def saved_note_html(text: str) -> str:
    return (f'<p class="w-small">Showing the saved example “{esc(text)}”; your sentence follows once '
            "the model is loaded.</p>")
