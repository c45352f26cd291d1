"""What the batching timeline draws (widget.py): a Gantt chart of one run, its tokens per step, and
the HTML beside them. Pure functions of the timeline dicts from compute.timeline, so the saved first
example paints exactly like a live run.

    request A  ▇ prefill ▇▇▇▇▇▇▇ decode ▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇▇
    request B  ▇▇▇▇▇▇ ░░░░░░░░░░░░░ idle seat (static) ░░░░░░░░░░░░░░░      x: engine steps
    request E  ········ waiting ·······························▇▇▇▇▇▇
    tokens     █▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁▁█▁▁▁▁▁    (token budget: the top)
"""
from __future__ import annotations

from widgets.batching_timeline.compute import BUDGET, MODES, STATES
from widgets.common import PALETTE, card_table, esc, label_html, plural, themed_figure
from widgets.common.theme import ink

# state -> (fill colour, hatch, words for the legend and tooltips). Okabe–Ito hues; the three states
# that mean "nothing useful computed" also carry a hatch, so they read without colour.
LOOK = {
    "waiting": ("#9aa0a6", " ", "waiting in the queue (no KV cache)"),
    "prefill": (PALETTE[1], " ", "prefill (prompt tokens)"),
    "decode": (PALETTE[0], " ", "decode (one new token)"),
    "recompute": (PALETTE[3], "/", "recompute (prompt + answer again)"),
    "stalled": (PALETTE[5], " ", "holds its KV, not scheduled"),
    "idle": (PALETTE[4], "x", "done, its seat idles (padding)"),
    "preempted": (PALETTE[3], ".", "preempted: KV dropped, queued"),
    "swapped": (PALETTE[2], ".", "preempted: KV swapped to CPU"),
}
TITLES = {"static": "Static batching", "continuous": "Continuous batching"}
# Steps of margin either side of the charts' x range: step 0's bar (and the last one) sat flush on the
# frame's edge and read as a clipped sliver (ux review, ch. 14).
X_PAD = 0.6


def gantt_figure(ids: list[str], dark: bool):
    """An empty Gantt (one row per request, A on top) and its tokens-per-step strip; their sources."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Range1d, Span
    seg = ColumnDataSource(data=_empty_segments())
    fig = themed_figure(dark=dark, height=42 + 24 * len(ids), y_range=FactorRange(*reversed(ids)),
                        x_range=Range1d(-X_PAD, 10 + X_PAD), min_border_left=30, min_border_right=10)
    bars = fig.hbar(y="req", left="start", right="end", height=0.72, source=seg, fill_color="color",
                    hatch_pattern="hatch", hatch_color=ink(dark)["text"], hatch_alpha=0.45, hatch_scale=6,
                    line_color=None)
    fig.add_tools(HoverTool(renderers=[bars], tooltips="@tip"))
    fig.xaxis.visible = False
    fig.ygrid.grid_line_color = None
    steps = ColumnDataSource(data=_empty_steps())
    strip = themed_figure(dark=dark, height=96, x_range=fig.x_range, y_range=Range1d(0, BUDGET * 1.08),
                          x_axis_label="engine step", y_axis_label="tokens", min_border_left=30,
                          min_border_right=10)
    cols = strip.vbar_stack(["prefill", "decode", "padding"], x="x", width=0.9, source=steps,
                            color=[PALETTE[1], PALETTE[0], PALETTE[4]], line_color=None)
    strip.add_tools(HoverTool(renderers=cols, tooltips="@tip"))
    strip.add_layout(Span(location=BUDGET, dimension="width", line_color=ink(dark)["muted"], line_dash="dashed",
                          line_width=1))
    strip.yaxis.ticker = [0, BUDGET]
    strip.xgrid.grid_line_color = None
    return fig, strip, seg, steps


def _empty_segments() -> dict:
    return {k: [] for k in ("req", "start", "end", "color", "hatch", "state", "tip")}


def _empty_steps() -> dict:
    return {k: [] for k in ("x", "step", "prefill", "decode", "padding", "tip")}


def gantt_data(t: dict, label: str) -> tuple[dict, dict]:
    """The Gantt's and the strip's column data for one timeline."""
    req = {r["id"]: r for r in t["requests"]}
    seg = _empty_segments()
    for s in t["segments"]:
        color, hatch, words = LOOK[s["state"]]
        r, n = req[s["req"]], s["end"] - s["start"]
        span = f"step {s['start']}" if n == 1 else f"steps {s['start']}–{s['end'] - 1}"
        toks = f", {plural(s['tokens'], 'token')}" if s["tokens"] else ""
        done = t["finish"].get(s["req"])
        tail = f"; answer complete after step {done}" if done is not None else ""
        seg["req"].append(s["req"])
        seg["start"].append(s["start"])
        seg["end"].append(s["end"])
        seg["color"].append(color)
        seg["hatch"].append(hatch)
        seg["state"].append(s["state"])
        seg["tip"].append(f"{s['req']} ({r['prompt']}→{r['output']} tokens): {words}, {span}{toks}{tail}")
    st = _empty_steps()
    for s in t["steps"]:
        st["x"].append(s["step"] + 0.5)
        st["step"].append(s["step"])
        for k in ("prefill", "decode", "padding"):
            st[k].append(s[k])
        pad = f" + {s['padding']} padding" if s["padding"] else ""
        st["tip"].append(f"step {s['step']}: {s['prefill']} prefill + {s['decode']} decode tokens{pad} "
                         f"(budget {BUDGET}), {s['ms']:,.0f} ms · {label}")
    return seg, st


def legend_html(states=STATES) -> str:
    items = "".join(f'<span class="bt-key"><span class="bt-sw bt-{s}"></span>'
                    f"{esc(LOOK[s][2])}</span>" for s in states)
    return f'<div class="bt-legend" aria-label="what the colours mean">{items}</div>'


def _ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    return f"{ms / 1e3:,.2f} s" if ms >= 1000 else f"{ms:,.0f} ms"


def compare_html(runs: dict, label: str, running: str | None = None) -> str:
    """The two runs side by side: steps, time, throughput, when answers come back, waste, preemptions."""
    cols = [m for m in MODES if m in runs]
    if not cols:
        return '<p class="w-small placeholder">Press Run: both charts fill in as the engine steps.</p>'

    def cell(m, fn):
        t = runs[m]
        return fn(t["summary"], t), f"bt-{m}"
    rows = [
        ("engine steps", lambda s, t: f'{s["steps"]:,}' + ("" if s["complete"] else " so far")),
        ("time in those steps", lambda s, t: _ms(s["time_s"] * 1e3)),
        ("output tokens per second", lambda s, t: f'{s["tok_per_s"]:,.1f}'),
        ("mean step an answer is complete", lambda s, t: "–" if s["mean_finish_step"] is None else
         f'{s["mean_finish_step"]:,.1f} ({_ms(s["mean_finish_ms"])})'),
        ("seat-steps with no work (idle seats)", lambda s, t: f'{s["padding"]:,} of {s["seat_steps"]:,}'),
        ("peak KV blocks in use", lambda s, t: f'{peak_blocks(t)} of {t["kv_blocks"]}'),
        ("preemptions", lambda s, t: f'{s["preemptions"]}' + _preempt_cost(s, t)
         + (f' ({plural(s["released_seats"], "seat")} freed early*)' if s.get("released_seats") else "")),
    ]
    # a card per measure on a phone (card_table): two columns of numbers scrolled sideways at 390 px
    heads = ["measure"] + [TITLES[m] + (" (running…)" if m == running else "") for m in cols]
    table = card_table(heads, [[(name, "bt-measure")] + [cell(m, fn) for m in cols] for name, fn in rows],
                       "bt-compare")
    return (table + f'<p class="w-small">Times: {label_html(label)}. Steps, seats and '
            "blocks are the engine's own counts.</p>" + released_html(runs) + _verdict(runs) + noise_html(runs))


def peak_blocks(t: dict) -> int:
    return t["kv_blocks"] - min((s["free_blocks"] for s in t["steps"]), default=t["kv_blocks"])


def _preempt_cost(s: dict, t: dict) -> str:
    if not s["preemptions"]:
        return ""
    if t["preemption"] == "swap":
        return f' ({plural(s["swapped_blocks"], "block")} copied to CPU and back)'
    return "" if s["recomputed_tokens"] is None else f' ({plural(s["recomputed_tokens"], "token")} prefilled again)'


def released_html(runs: dict) -> str:
    """Static batching's way out of a memory squeeze: a request already done keeps its seat (computing
    padding) until the whole batch ends, so when blocks run short the engine lets such a seat go first.
    The engine's trace calls that a preemption; nothing is lost or redone, so it is said apart, in words
    (the review read "preemptions 5 (0 tokens prefilled again)" and could not tell what had happened)."""
    out = []
    for m in MODES:
        n = runs.get(m, {}).get("summary", {}).get("released_seats", 0)
        if n:
            they = ("Its request was", "it") if n == 1 else ("Their requests were", "them")
            out.append(f'<p class="w-small bt-released">* {TITLES[m]} freed {plural(n, "seat")} early when the KV '
                       f"memory ran short. {they[0]} already finished and only computing padding while the rest of "
                       f"the batch ran, so nothing was lost or redone: that is why no preemption counts {they[1]}.</p>")
    return "".join(out)


# Steps of the same size whose median times differ by more than this between the two runs: the CPU was
# shared (on a quiet server the same step takes the same time, within ~15% here).
PACE_RATIO = 1.3


def step_pace(t: dict) -> dict[int, float]:
    """Median milliseconds of the run's decode steps by the number of sequences computed (padding too):
    steps of the same size do the same work, so on a quiet server they take the same time in both runs."""
    by_size: dict[int, list[float]] = {}
    for s in t["steps"]:
        if s["prefill"] == 0 and s["decode"] + s["padding"] > 0:
            by_size.setdefault(s["decode"] + s["padding"], []).append(s["ms"])
    return {n: sorted(v)[len(v) // 2] for n, v in by_size.items() if len(v) >= 3}


def noise_html(runs: dict) -> str:
    """A note when the two runs' seconds cannot be compared: other work shared the server during a run,
    the same-sized steps took different times in the two runs, or continuous batching took fewer steps
    but more seconds (the lesson inverted by noise). Steps, which noise cannot change, are the comparison."""
    if not all(m in runs and runs[m]["summary"]["complete"] for m in MODES):
        return ""
    st, ct = runs["static"]["summary"], runs["continuous"]["summary"]
    why = []
    busy = st.get("busy_steps", 0) + ct.get("busy_steps", 0)
    if busy:
        why.append(f"other readers' work shared this server's CPU during {busy:,} of the two runs' "
                   f"{st['steps'] + ct['steps']:,} steps")
    ps, pc = step_pace(runs["static"]), step_pace(runs["continuous"])
    both = sorted(set(ps) & set(pc))
    if both:
        n = max(both, key=lambda k: max(ps[k], pc[k]) / max(min(ps[k], pc[k]), 1e-9))
        if max(ps[n], pc[n]) / max(min(ps[n], pc[n]), 1e-9) > PACE_RATIO:
            why.append(f"a step of {plural(n, 'request')} decoding took {ps[n]:,.0f} ms in the static run "
                       f"but {pc[n]:,.0f} ms in the continuous one")
    if ct["steps"] < st["steps"] and ct["time_s"] > st["time_s"]:
        why.append("continuous batching took fewer steps yet more seconds")
    if not why:
        return ""
    return (f'<p class="bt-verdict bt-noise">The server was busy during this run: {"; ".join(why)}. Its seconds '
            f"are noisy, so compare steps (<b>{ct['steps']:,}</b> continuous vs <b>{st['steps']:,}</b> static), "
            "which noise cannot change, rather than seconds or tokens per second; run again when it is quieter "
            "to compare times.</p>")


def _verdict(runs: dict) -> str:
    if not all(m in runs and runs[m]["summary"]["complete"] for m in MODES):
        return ""
    st, ct = runs["static"]["summary"], runs["continuous"]["summary"]
    return (f'<p class="bt-verdict">Continuous batching served the same {len(runs["static"]["requests"])} requests '
            f'in <b>{ct["steps"]}</b> steps instead of <b>{st["steps"]}</b>, and the average answer was complete at '
            f'step <b>{ct["mean_finish_step"]:.0f}</b> instead of <b>{st["mean_finish_step"]:.0f}</b>.</p>')


def history_html(history: list[dict]) -> str:
    """Every run this reader made (newest first): compare memory sizes and recompute with swap."""
    if not history:
        return ""
    rows = [[TITLES[h["mode"]].split()[0].lower(), str(h["kv_blocks"]), esc(h["preemption"]), f'{h["steps"]:,}',
             _ms(h["time_s"] * 1e3), f'{h["tok_per_s"]:,.1f}', str(h["preemptions"]), h["cost"]] for h in history]
    table = card_table(("mode", "KV blocks", "preemption", "steps", "time", "tok/s", "preempted", "cost"), rows)
    return f'<details class="bt-history" open><summary>Your runs (newest first)</summary>{table}</details>'


def history_row(t: dict) -> dict:
    s = t["summary"]
    cost = _preempt_cost(s, t).strip(" ()") or "–"
    return {"mode": t["mode"], "kv_blocks": t["kv_blocks"], "preemption": t["preemption"], "steps": s["steps"],
            "time_s": s["time_s"], "tok_per_s": s["tok_per_s"], "preemptions": s["preemptions"], "cost": esc(cost)}


def waiting_text(place: int, seats: int) -> str:
    """What a run waiting in line for one of the server's comparison seats says (place 1 is next)."""
    ahead = "yours is next" if place == 1 else f"{plural(place - 1, 'run')} ahead of yours"
    return (f"Waiting for a seat: this server runs {plural(seats, 'comparison')} at once and other readers' "
            f"runs hold them; {ahead} (place {place} in line)…")
