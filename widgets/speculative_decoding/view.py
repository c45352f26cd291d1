"""What the speculative-decoding widget draws: steps as rows of token chips, the running numbers, the
simulator's last round (HTML), and the curve both modes are measured against (Bokeh). Every token's
text passes through esc() (model output is text too).

    #2 verify   [✓ ␣the] [✓ ␣cat] [✗ ␣dog] [· ␣sat]  →  [↺ ␣mat]      kept 2 of 4, then the correction
    #3 verify   [✓ ␣on] [✓ ␣the] [✓ ␣mat]  +  [★ .]                    all 3 kept, and a bonus token

Status is drawn twice, as a colour (Okabe–Ito) and as a symbol, so it reads without colour too.
"""
from __future__ import annotations

from widgets.common import (PALETTE, card_table, esc, label_html, plural, recorded_label, show_token, style_figure,
                            themed_figure)
from widgets.speculative_decoding.compute import StepView
from widgets.speculative_decoding.simulator import closed_form_curve

SYMBOL = {"accepted": "✓", "rejected": "✗", "unjudged": "·", "bonus": "★", "correction": "↺",
          "sampled": "•", "first": "•", "dropped": "∅"}
MEANING = {"accepted": "draft kept", "rejected": "draft rejected", "unjudged": "draft never judged (after a rejection)",
           "bonus": "bonus: every draft kept, the target adds one more", "correction": "the target's own token in place of the rejected draft",
           "sampled": "the target's own token (no draft this step)", "first": "the first token, from the prefill",
           "dropped": "after the end of the reply (end of text, or the token limit): not part of it"}


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}g}"


def chip(text: str, status: str, p: float | None = None, q: float | None = None, extra: str = "") -> str:
    tip = [MEANING[status], f"text “{show_token(text)}”"]
    if p is not None:
        tip.append(f"p = {p:.3g} (target)")
    if q is not None:
        tip.append(f"q = {q:.3g} (draft)")
        if p is not None and status in ("accepted", "rejected"):
            tip.append(f"kept with probability min(1, p/q) = {min(1.0, p / q) if q > 0 else 1.0:.3g}")
    elif status in ("accepted", "rejected") and p is not None:
        tip.append("q = 1 (a lookup names its guess with certainty): kept with probability p")
    tip = " · ".join(tip) + extra
    return (f'<span class="sd-tok sd-{status}" title="{esc(tip)}" aria-label="{esc(tip)}" tabindex="0">'
            f'<span class="sd-sym" aria-hidden="true">{SYMBOL[status]}</span>{esc(show_token(text))}</span>')


def step_row(v: StepView) -> str:
    if v.kind == "prefill":
        what = f"prefill: {plural(v.prompt_tokens, 'prompt token')} in one pass, then the first token"
        chips = "".join(chip(t.text, t.status, t.p) for t in v.tokens)
    elif v.kind == "decode":
        what = "no draft this step: a plain decode"
        chips = "".join(chip(t.text, t.status, t.p) for t in v.tokens)
    else:
        last = v.tokens[-1]
        drafts = "".join(chip(t.text, t.status, t.p, t.q) for t in v.tokens[:-1])
        joiner = '<span class="sd-join" aria-hidden="true">+</span>' if last.status == "bonus" else \
            '<span class="sd-join" aria-hidden="true">→</span>'
        chips = drafts + joiner + chip(last.text, last.status, last.p)
        what = (f"{v.num_accepted} of {plural(v.num_drafts, 'draft')} kept"
                + (", then a bonus token" if last.status == "bonus" else ", then the target's correction"))
    return (f'<li class="sd-step sd-step-{v.kind}" data-step="{v.step}"><span class="sd-step-head">'
            f'#{v.step} <span class="sd-kind">{esc(v.kind)}</span> · {plural(v.emitted, "token")}'
            f'{f" · {v.step_ms:.0f} ms" if v.step_ms else ""}</span><span class="sd-chips">{chips}</span>'
            f'<span class="sd-what">{esc(what)}</span></li>')


def steps_html(views: list[StepView], label: str, placeholder: str = "", done: bool = False) -> str:
    if not views:
        return f'<div class="sd-steps"><p class="placeholder">{esc(placeholder)}</p></div>'
    rows = "".join(step_row(v) for v in views)
    what = "Steps and times" if any(v.step_ms for v in views) else "Steps"
    end = (f'<p class="sd-end">The reply is complete: {plural(sum(v.emitted for v in views), "token")} '
           f'in {plural(len(views), "step")}.</p>') if done else ""
    return (f'<div class="sd-steps" aria-live="polite"><ol class="sd-list">{rows}</ol>{end}'
            f'<p class="w-small">{what} {label_html(label)}</p></div>')


def reply_html(views: list[StepView]) -> str:
    """The reply so far, each token coloured by where it came from: a kept draft, or the target itself."""
    parts = []
    for v in views:
        for t in v.tokens:
            if t.status in ("rejected", "unjudged", "dropped"):
                continue
            origin = "sd-from-draft" if t.status == "accepted" else "sd-from-target"
            parts.append(f'<span class="{origin}" title="{"a kept draft" if t.status == "accepted" else "the target"}'
                         f'">{esc(t.text)}</span>')
    return f'<div class="sd-reply">{"".join(parts) or "<span class=placeholder>The reply appears here.</span>"}</div>'


def legend_html() -> str:
    items = [("accepted", "kept draft"), ("rejected", "rejected draft"), ("unjudged", "never judged"),
             ("correction", "target's correction"), ("bonus", "bonus token")]
    return '<p class="sd-legend">' + "".join(
        f'<span class="sd-tok sd-{s}"><span class="sd-sym" aria-hidden="true">{SYMBOL[s]}</span>{esc(w)}</span>'
        for s, w in items) + "</p>"


def _count(n: int, one: str, css: str, many: str | None = None) -> str:
    """``plural`` with the number in bold under ``css`` (the browser tests read it): "<b>1</b> token"."""
    return plural(n, one, many).replace(f"{n:,}", f'<b class="{css}">{n:,}</b>', 1)


def engine_stats_html(s: dict, label: str) -> str:
    if not s or not s.get("passes"):
        return '<div class="sd-stats sd-engine-stats"><p class="placeholder">Numbers appear after the first step.</p></div>'
    a = s["a"]
    closed = s["closed_form"]
    lines = [
        f'{_count(s["passes"], "target pass", "sd-passes", "target passes")} produced '
        f'{_count(s["tokens"], "token", "sd-tokens")}: '
        f'<b class="sd-tpp">{_num(s["tokens_per_pass"])}</b> per pass (plain decoding: 1).',
        f'Drafts: {s["drafts"]} proposed, {s["accepted"]} kept. a = kept / judged = <b class="sd-a">{_num(a)}</b> '
        f'(vLLM\'s kept / proposed: {_num(s["acceptance_rate"])}).',
    ]
    if closed is not None:
        lines.append(f'Verify passes yield <b class="sd-tpvp">{_num(s["tokens_per_verify_pass"])}</b> tokens each; '
                     f'the closed form (1 − a<sup>k+1</sup>)/(1 − a) at a = {_num(a)}, k = {s["k"]} gives '
                     f'<b class="sd-closed">{_num(closed)}</b>.')
    rule = s.get("rule")
    if rule and rule.get("min_acceptance") is not None:
        off = rule.get("disable_by_batch_size")
        lines.append(f'The rule: {"nobody drafts in a step of more than " + str(off) + " requests; " if off else ""}'
                     f'a request whose window of {rule["probe_drafts"]} judged drafts can no longer keep '
                     f'{rule.get("threshold") or rule["min_acceptance"]:.0%} decodes the next '
                     f'{rule["pause_tokens"]} tokens plainly, each pause twice the last '
                     f'(<span class="sd-pauses">{plural(rule["pauses"], "pause")}</span> here).')
    if s.get("verify_ms") is not None:
        lines.append(f'A verify step took {s["verify_ms"]:.0f} ms, {s["propose_ms"]:.0f} ms of it drafting '
                     f'{label_html(label)}.')
    return '<div class="sd-stats sd-engine-stats">' + "".join(f"<p>{line}</p>" for line in lines) + "</div>"


def round_html(verdicts: list[bool | None], k: int) -> str:
    """The simulator's last round: k draft slots, then the target's token."""
    if not verdicts:
        return '<div class="sd-round"><p class="placeholder">Press “1 round” to play one.</p></div>'
    chips = []
    for j, v in enumerate(verdicts):
        status = "accepted" if v else "rejected" if v is False else "unjudged"
        chips.append(chip(f"d{j + 1}", status))
    last = "bonus" if all(verdicts) else "correction"
    chips.append(f'<span class="sd-join" aria-hidden="true">{"+" if last == "bonus" else "→"}</span>')
    chips.append(chip("target", last))
    kept = sum(1 for v in verdicts if v)
    return (f'<div class="sd-round"><span class="sd-chips">{"".join(chips)}</span>'
            f'<span class="sd-what">{kept} of {k} kept: {plural(kept + 1, "token")} from one target pass</span></div>')


def sim_stats_html(sim, draft_cost: float, label: str) -> str:
    if not sim.rounds:
        return (f'<div class="sd-stats sd-sim-numbers"><p>Closed form at a = {sim.a:.2f}, k = {sim.k}: '
                f'<b class="sd-closed">{sim.closed_form:.3f}</b> tokens per target pass {label_html(label)}.</p></div>')
    full = " (the tally stops at 100,000 rounds)" if sim.full else ""
    return ('<div class="sd-stats sd-sim-numbers">'
            f'<p>{_count(sim.rounds, "round", "sd-rounds")}{full}: <b class="sd-sim-tpp">{sim.tokens_per_pass:.3f}</b> '
            f'tokens per target pass; the closed form says <b class="sd-closed">{sim.closed_form:.3f}</b>.</p>'
            f'<p>With a draft step costing c = {draft_cost:.2f} of a target step, a round costs 1 + k·c = '
            f'{1 + sim.k * draft_cost:.2f} target steps: speed-up <b class="sd-speedup">{sim.speedup(draft_cost):.2f}×</b> '
            f'(closed form {sim.modelled_speedup(draft_cost):.2f}×) {label_html(label)}.</p></div>')


# -- the chart both modes share -------------------------------------------------------------------
def curve_figure(point_label: str, speedup: bool = False):
    """Tokens per target pass against a: the closed form for k (and, with ``speedup``, the modelled
    speed-up), and one point for what was measured or simulated. Returns (figure, curve, point)."""
    from bokeh.models import ColumnDataSource, HoverTool
    fig = themed_figure(height=260, x_range=(0, 1), y_axis_label="tokens per target pass",
                        x_axis_label="acceptance a", min_border_left=50)
    curve = ColumnDataSource({"x": [], "y": [], "s": [], "what": []})
    point = ColumnDataSource({"x": [], "y": [], "what": []})
    line = fig.line("x", "y", source=curve, line_width=2.5, color=PALETTE[0],
                    legend_label="(1 − a^(k+1)) / (1 − a)")
    marks = [line]
    if speedup:
        marks.append(fig.line("x", "s", source=curve, line_width=2, line_dash="dashed", color=PALETTE[1],
                              legend_label="speed-up ÷ (1 + k·c)"))
    dot = fig.scatter("x", "y", source=point, size=11, color=PALETTE[3], marker="diamond",
                      legend_label=point_label)
    fig.add_tools(HoverTool(renderers=marks, tooltips=[("a", "@x{0.00}"), ("closed form", "@y{0.00} tokens/pass"),
                                                       ("", "@what")], mode="vline"))
    fig.add_tools(HoverTool(renderers=[dot], tooltips=[("", "@what")]))
    fig.legend.location = "top_left"
    style_figure(fig)                                  # again, now that the legend exists (dark theme)
    return fig, curve, point


def draw_curve(curve, point, k: int, a, tokens_per_pass, label: str, cost: float | None = None) -> None:
    """The closed form for k in ``curve``, and (a, tokens per pass) in ``point`` (none before a first step)."""
    xs, ys = closed_form_curve(int(k))
    curve.data = {"x": xs, "y": ys, "s": [y / (1 + k * (cost or 0.0)) for y in ys],
                  "what": [f"k = {k}" + (f", c = {cost:.2f}: speed-up {y / (1 + k * cost):.2f}×" if cost is not None
                                         else "") for y in ys]}
    if a is None or tokens_per_pass is None:
        point.data = {"x": [], "y": [], "what": []}
    else:
        point.data = {"x": [a], "y": [tokens_per_pass],
                      "what": [f"{label}: a = {a:.2f}, {tokens_per_pass:.2f} tokens per pass"]}


RECORDED_SETTINGS = (("ngram_k4", "n-gram lookup, k = 4"), ("early_exit_L15_k4", "early exit L = 15, k = 4"),
                     ("oracle_a10_k4", "oracle (a = 1), k = 4"))
RECORDED_KINDS = ("code", "quoting", "repetition", "prose")


def recorded_html(data: dict | None) -> str:
    """The GPU run `bench spec --record` shipped (engine/bench/data/spec.json): each proposer's speed-up
    over plain decoding, per prompt kind, at batch 1 and 8 (medians), and what a verify step cost. None
    shipped: say what the reader sees instead."""
    if data is None:
        return ("<div class='sd-recorded'><p class='w-small'>No GPU run is recorded for this page: the engine "
                "mode above measures this server's CPU.</p></div>")
    res = data["results"]
    rows_by = {(r["batch"], r["kind"], r["setting"]): r for r in res.get("rows", [])}
    batches = sorted({b for b, _, _ in rows_by})
    rows = []
    for b in batches:
        for setting, name in RECORDED_SETTINGS:
            cells = []
            for kind in RECORDED_KINDS:
                r = rows_by.get((b, kind, setting))
                x = None if r is None else r.get("speedup")
                cells.append("–" if x is None else f"{x:.2f}×")
            rows.append([str(b), esc(name), *cells])
    table = card_table(["batch", "proposer", *RECORDED_KINDS], rows, "sd-recorded-table")
    notes = []
    plain = rows_by.get((1, "code", "plain"))
    cost = res.get("verify_cost") or {}
    one = next((r for r in cost.get("rows", []) if r["batch"] == 1), None)
    if plain is not None and one is not None:
        notes.append(f"Plain decoding made {plain['tokens_per_s']:,.0f} tokens/s at batch 1; a verify step with "
                     f"{cost['k']} drafts took {one['verify_ms']:.2f} ms against a decode step's "
                     f"{one['decode_ms']:.2f} ms ({one['ratio']:.2f}×), both replaying CUDA graphs.")
    agree = [r["agreement_with_plain"] for r in rows_by.values() if r.get("agreement_with_plain") is not None]
    if agree:
        notes.append(f"In {esc(res.get('dtype', 'bf16'))}, greedy tokens equal plain decoding's at "
                     f"{min(agree):.0%} to {max(agree):.0%} of positions: a pass over k + 1 rows rounds "
                     f"unlike a pass over one.")
    if res.get("weights") == "random":
        notes.append("Random weights: the text is noise, and a random model loops, which n-gram lookup predicts; "
                     "what transfers is the cost of a verify step and the oracle's row.")
    body = "".join(f"<p class='w-small'>{n}</p>" for n in notes)
    return (f"<div class='sd-recorded'><p><b>On a GPU</b>: speed-up over plain decoding, the median of "
            f"{res.get('repeat', 1)} runs.</p>{table}{body}"
            f"<p class='w-small'>{label_html(recorded_label(data))}</p></div>")
