"""What the sampler widget draws, from compute.py's ``shaped_dict`` (the saved example has the same form).

    1. ␣Paris   [▭▭▭▭▭▭▭▭▭▭]  hollow: the model's probability (temperature 1, no filter)
                [■■■■■■■■■]    solid: what the engine samples from with these settings
                        ◆      the share of the N draws that landed there
    …
    all others  [▭]            the other 49,132 tokens in one bar

Every row has one tooltip (an invisible bar as long as the row's longest mark) with the token, its
logit, both probabilities, the draws and its fate ("kept", "cut by top-k", …). Below the chart: a
summary line, and the two continuations side by side.
"""
from __future__ import annotations

from bokeh.models import ColumnDataSource, FactorRange, HoverTool

from engine import SamplingParams
from widgets.common import PALETTE, esc, label_html, show_token, themed_figure
from widgets.common.theme import ink
from widgets.sampler.compute import CONTINUE_TOKENS, TOP


def kept_colour(dark: bool) -> str:
    return PALETTE[5] if dark else PALETTE[0]      # the deep blue is too dim on a dark page


def sampler_figure(dark: bool):
    fig = themed_figure(dark=dark, height=520, y_range=FactorRange(), x_axis_label="probability",
                        min_border_left=10)
    src = ColumnDataSource(dict(label=[], model=[], shaped=[], drawn=[], count=[], n=[], token=[], id=[], logit=[],
                                fate=[], color=[], reach=[], cut=[]))
    fig.hbar(y="label", right="model", height=0.8, source=src, fill_alpha=0, line_color=ink(dark)["muted"],
             line_width=1.2)
    fig.hbar(y="label", right="shaped", height=0.55, source=src, color="color")
    fig.scatter(x="drawn", y="label", source=src, marker="diamond", size=11, color=PALETTE[1],
                line_color=ink(dark)["text"], line_width=0.6)
    fig.text(x="reach", y="label", text="cut", source=src, text_font_size="11px", text_baseline="middle",
             text_color=ink(dark)["muted"])          # "✗ top-k" beside a row the filters removed
    # One invisible bar per row, as long as the longest mark in it: hovering anywhere on a row's
    # marks shows that row's one tooltip (the three marks overlap, three tooltips would stack).
    hit = fig.hbar(y="label", right="reach", height=0.95, source=src, fill_alpha=0, line_alpha=0)
    fig.add_tools(HoverTool(renderers=[hit], tooltips=[
        ("token", "@token (id @id)"), ("logit", "@logit{0.00}"), ("model's probability", "@model{0.00%}"),
        ("sampler draws from", "@shaped{0.00%}"), ("drawn", "@count of @n (@drawn{0.0%})"), ("", "@fate")]))
    fig.ygrid.grid_line_color = None
    fig.yaxis.major_label_text_font_size = "12px"
    fig.css_classes = ["smp-chart"]          # for tests: a Bokeh pane drops its own classes
    return fig, src


def chart_rows(s: dict) -> list[str]:
    """The chart's row labels, most likely first."""
    return [f"{r + 1}. {show_token(t)}" for r, t in enumerate(s["texts"])] + ["all others"]


def chart_data(s: dict, colour: str) -> dict:
    """The figure's columns: the top tokens one row each, then one row for all the others."""
    labels = chart_rows(s)
    n = s["n"]
    counts = s["counts"] + [s["rest_count"]]
    fates = [f"cut by {c}" if c in ("top-k", "top-p", "min-p") else
             ("rounds to 0 at this temperature" if c == "≈0" else ("greedy keeps only the top token" if c else "kept"))
             for c in s["cut"]] + [f"{s['vocab'] - TOP:,} tokens together"]
    shaped = s["p_shaped"] + [s["rest_shaped"]]
    return dict(label=labels, model=s["p_model"] + [s["rest_model"]], shaped=shaped,
                drawn=[c / n for c in counts], count=counts, token=[show_token(t) for t in s["texts"]] + ["others"],
                id=[str(i) for i in s["ids"]] + ["–"], logit=s["logits"] + [float("nan")], fate=fates,
                color=[colour] * len(labels), n=[f"{n:,}"] * len(labels),
                reach=[max(a, b, c / n) + 0.01 for a, b, c in zip(s["p_model"] + [s["rest_model"]], shaped, counts)],
                cut=[f"✗ {c}" if c in ("top-k", "top-p", "min-p") else "" for c in s["cut"]]
                + ["✗ all cut" if s["rest_shaped"] == 0 and s["rest_model"] > 0 else ""])


def decode(s: dict, token_id: int) -> str:
    return s["texts"][s["ids"].index(token_id)] if token_id in s["ids"] else f"token {token_id}"


def summary_html(s: dict, settings: dict, label: str) -> str:
    greedy = settings["temperature"] == 0
    kept = [f"{show_token(t)}" for t, p in zip(s["texts"], s["p_shaped"]) if p > 0]
    first = esc(show_token(decode(s, s["first_draw"])))
    unfiltered = settings["top_k"] == 0 and settings["top_p"] >= 1 and settings["min_p"] == 0
    mode = ("Temperature 0 is greedy: the sampler puts all the probability on the top token."
            if greedy else f"{s['survivors']:,} of {s['vocab']:,} tokens can be drawn"
            + (" (the others' chances are too small to register in 32-bit floats)" if unfiltered else "")
            + f"; of the top {TOP}, {len(kept)} survive the filters.")
    return (f'<p class="smp-line">{esc(mode)} The other {s["vocab"] - TOP:,} tokens hold '
            f"<b>{s['rest_shaped']:.1%}</b> of what is drawn (the model gives them {s['rest_model']:.1%}). "
            f"Draw #1 of {s['n']:,} with seed {s['seed']}: “{first}”. {label_html(label)}</p>")


def saved_note_html(prompt: str) -> str:
    return (f'<p class="w-small">Showing the saved example “{esc(prompt)}”; your '
            "prompt follows once the model is loaded.</p>")


WRITING = '<p class="placeholder">The shared engine is writing both continuations…</p>'


def conts_html(conts: dict, params: SamplingParams, label: str) -> str:
    how = {"greedy": "greedy (temperature 0)",
           "sampled": f"sampled: temperature {params.temperature:g}, top-k {params.top_k}, top-p "
                      f"{params.top_p:g}, min-p {params.min_p:g}, seed {params.seed}"}
    cols = "".join(f'<div class="smp-cont" data-kind="{k}"><p class="w-small">{esc(how[k])}</p><p class="smp-text">'
                   + "".join(f'<span class="tok" title="token id {i}">{esc(t)}</span>' for i, t in conts[k])
                   + "</p></div>" for k in ("greedy", "sampled"))
    return f'<div class="smp-conts-row">{cols}</div><p class="w-small">{CONTINUE_TOKENS} tokens each · {label_html(label)}</p>'
