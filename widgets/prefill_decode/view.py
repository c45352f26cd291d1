"""What the prefill-vs-decode widget shows for its measured points (compute.py's dicts): TTFT and ITL
against the prompt's length on a log scale, the recorded H200 rows as stars beside them, and the table.
Pure functions of the points, so the saved first example paints exactly like a live measurement.

    ms (log)   ● TTFT grows with the prompt: the prefill computes every prompt token
               ■ ITL stays flat: each later step computes one token and reads the weights once
               ☆ the same, recorded on an H200
"""
from __future__ import annotations

from widgets.common import PALETTE, esc, is_dark, label_html, style_figure, themed_figure
from widgets.common.theme import legend_above, log_ticks  # noqa: F401 (roofline.py takes log_ticks from here)


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


def latency_figure(with_recorded: bool):
    """An empty TTFT/ITL plot and its sources ("ttft", "itl", "rec_ttft", "rec_itl"); the recorded
    H200 marks are drawn only when the engine has recorded rows."""
    from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter
    c = PALETTE
    src = {k: ColumnDataSource(data={"tokens": [], "ms": [], "tip": []}) for k in
           ("ttft", "itl", "rec_ttft", "rec_itl")}
    fig = themed_figure(dark=is_dark(), height=260, y_axis_type="log", x_axis_label="prompt tokens",
                        y_axis_label="milliseconds")
    fig.line("tokens", "ms", source=src["ttft"], color=c[0], line_width=2)
    fig.line("tokens", "ms", source=src["itl"], color=c[1], line_width=2, line_dash="dashed")
    marks = [fig.scatter("tokens", "ms", source=src["ttft"], color=c[0], size=9, legend_label="TTFT"),
             fig.scatter("tokens", "ms", source=src["itl"], color=c[1], size=8, marker="square",
                         legend_label="ITL (median)")]
    if with_recorded:
        marks += [fig.scatter("tokens", "ms", source=src["rec_ttft"], color=c[0], size=12, marker="star",
                              fill_alpha=0.2, legend_label="TTFT, H200 (recorded)"),
                  fig.scatter("tokens", "ms", source=src["rec_itl"], color=c[1], size=12, marker="star",
                              fill_alpha=0.2, legend_label="ITL, H200 (recorded)")]
    fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
    fig.yaxis.ticker = log_ticks()
    fig.yaxis.formatter = NumeralTickFormatter(format="0,0.[0]")
    style_figure(fig, is_dark())       # again: the legend exists only now
    # Above the plot, two to a row: inside it, the box sat on the measured points (ux review ch. 11).
    legend_above(fig, ncols=2)
    return fig, src


def measured_data(points: list[dict], label: str) -> dict[str, dict]:
    """The "ttft" and "itl" sources' columns for the measured points."""
    return {key: {"tokens": [p["tokens"] for p in points], "ms": [p[field] for p in points],
                  "tip": [f"{what} {_ms(p[field])} for {p['tokens']:,} prompt tokens · {label}" for p in points]}
            for key, field, what in (("ttft", "ttft_ms", "TTFT"), ("itl", "itl_ms", "ITL (median)"))}


def recorded_data(rows: list[dict], label: str) -> dict[str, dict]:
    """The "rec_ttft" and "rec_itl" sources' columns for the recorded batch-1 rows (each where measured)."""
    out = {}
    for key, field in (("rec_ttft", "ttft_ms"), ("rec_itl", "itl_ms")):
        pts = [r for r in rows if r[field]]
        out[key] = {"tokens": [r["prompt_tokens"] for r in pts], "ms": [r[field] for r in pts],
                    "tip": [f"{field[:-3].upper()} {_ms(r[field])} for {r['prompt_tokens']:,} prompt "
                            f"tokens, batch 1 · {label}" for r in pts]}
    return out


def table_html(points: list[dict], label: str, device: str, rec: tuple[list[dict], str, str]) -> str:
    """This server's points (with what may have helped or shared them), then the recorded H200 rows."""
    rows = [f'<tr><td>{p["tokens"]:,}</td><td class="pd-ttft">{_ms(p["ttft_ms"])}</td>'
            f'<td>{_ms(p["prefill_ms"])}</td><td class="pd-itl">{_ms(p["itl_ms"])}</td>'
            f'<td>{esc(device)}{caveat(p)}</td></tr>' for p in points]
    rec_rows, rec_label, rec_device = rec
    rows += [f'<tr class="pd-recorded"><td>{r["prompt_tokens"]:,}</td>'
             f'<td>{_ms(r["ttft_ms"]) if r["ttft_ms"] else "–"}</td><td>–</td>'
             f'<td>{_ms(r["itl_ms"]) if r["itl_ms"] else "–"}</td><td>{esc(rec_device)} (recorded)</td></tr>'
             for r in rec_rows]
    if not points:
        rows.append('<tr><td colspan="5" class="placeholder">Press Measure: each length appears here as it '
                    "finishes.</td></tr>")
    sources = [label_html(label)] if label and points else []
    sources.append(f"H200 rows: {label_html(rec_label)}" if rec_rows else
                   "Our engine on an H200 (TTFT and ITL by prompt length): not recorded yet.")
    flat = flat_ttft_note(rec_rows)
    if flat:
        sources.append(flat)
    return ('<div class="pd-scroll"><table class="pd-tab"><thead><tr><th>prompt tokens</th><th>TTFT</th>'
            '<th title="the engine\'s own wall time for the prefill step">prefill step</th><th>ITL</th>'
            f'<th>device</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            + "".join(f'<p class="w-small">{x}</p>' for x in sources))


def flat_ttft_note(rec_rows: list[dict]) -> str:
    """Why the recorded GPU rows may contradict the chapter: when TTFT hardly grows across a long span of
    prompts, what was timed is the engine's fixed cost per step, not the prefill's arithmetic. Said only when
    the figures show it, so a re-recorded file that climbs loses the note by itself."""
    ttft = sorted((r["prompt_tokens"], r["ttft_ms"]) for r in rec_rows if r.get("ttft_ms"))
    if len(ttft) < 2:
        return ""
    (t0, ms0), (t1, ms1) = ttft[0], ttft[-1]
    if t1 < 8 * t0 or ms1 > 1.5 * ms0:        # a prompt 8x longer that costs < 1.5x: flat, not compute-bound
        return ""
    return (f"The H200's TTFT barely grows from {t0:,} to {t1:,} prompt tokens ({_ms(ms0)} → {_ms(ms1)}): "
            "on a GPU this small model's prefill arithmetic takes well under a millisecond, so these rows time the "
            "engine's fixed cost per step (scheduling, kernel launches, copying the token back), not the prefill.")


def caveat(p: dict) -> str:
    """What else touched this point: prompt tokens the prefix cache supplied, steps other readers shared."""
    notes = []
    if p.get("cached"):
        notes.append(f"{p['cached']:,} tokens from the prefix cache")
    if p.get("shared"):
        notes.append(f"{p['shared']} steps shared with other readers")
    return f'<br><span class="w-small">{esc("; ".join(notes))}</span>' if notes else ""
