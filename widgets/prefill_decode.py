"""`prefill-decode` (chapter 11): the reader's sentence prefilled at several lengths on this server,
TTFT and inter-token latency measured for each, beside the modelled decode roofline (roofline.py).

    the sentence ─► token ids, repeated to 16, 64, 128 … tokens ─► the shared engine, 8 new tokens
                    (each run starts with a fresh number, so       │
                     the prefix cache cannot skip the prefill)      ▼
                                            TTFT = submit → first token;  ITL = median gap after it

It runs on the shared engine, so another reader's requests may share its steps (the table says so).
One background job on a thread of its own; each length's point is posted as it lands; Stop (or
leaving the page) aborts the request in flight and frees its blocks.
"""
from __future__ import annotations

import itertools
import random
import time
from statistics import median

import panel as pn

from widgets.common import (EngineGate, JobRunner, PALETTE, esc, html_pane, is_dark, label_html, load_example,
                            measured, reader_sentence, recorded, register, request_passes, style_figure,
                            themed_figure)
from widgets.common.examples import example
from widgets.common.text import clip
from widgets.roofline import RooflinePanel, log_ticks, recorded_latency_rows

DEFAULT_SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun."
LENGTHS = (16, 64, 128, 256, 512, 1024)
LONGEST = {"128 tokens": 128, "256 tokens": 256, "512 tokens": 512, "1,024 tokens": 1024}
NEW_TOKENS = 8
MAX_CHARS = 400
_RUNS = itertools.count(random.SystemRandom().randrange(10_000, 90_000))   # fresh prompt heads


def ladder(longest: int) -> list[int]:
    return [n for n in LENGTHS if n <= longest]


def prompt_ids(tokenizer, sentence: str, length: int, run: int) -> list[int]:
    """`length` token ids: "Run 12345:" then the sentence's tokens over and over."""
    head = tokenizer.encode(f"Run {run}:").ids
    body = tokenizer.encode(" " + (sentence.strip() or DEFAULT_SENTENCE)).ids
    return (head + body * (length // len(body) + 1))[:length]


def measure_one(llm, ids: list[int], new_tokens: int = NEW_TOKENS, check=lambda: None) -> dict:
    """Prefill `ids` and decode `new_tokens` greedily; times from this thread and the engine's trace."""
    from engine import SamplingParams
    start, times, request_id = llm.num_steps(), [], None
    t0 = time.perf_counter()
    stream = llm.stream(ids, SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True))
    try:
        for ev in stream:
            times.append(time.perf_counter())
            request_id = ev.request_id
            check()                      # raises Cancelled: closing the stream aborts the request
    finally:
        stream.close()
    p = request_passes(llm.trace_since(start), request_id)
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"tokens": len(ids), "ttft_ms": (times[0] - t0) * 1e3, "itl_ms": median(gaps) * 1e3,
            "prefill_ms": p.prefill_s * 1e3, "cached": p.cached_prompt_tokens, "shared": p.shared_passes}


def measure(llm, sentence: str, lengths, new_tokens: int = NEW_TOKENS, check=lambda: None,
            post=lambda points: None) -> list[dict]:
    """One point per prompt length, shortest first (a tiny warm-up run first, not reported)."""
    measure_one(llm, prompt_ids(llm.tokenizer, sentence, 16, next(_RUNS)), new_tokens, check)
    points = []
    for n in lengths:
        check()
        points.append(measure_one(llm, prompt_ids(llm.tokenizer, sentence, n, next(_RUNS)), new_tokens, check))
        post(list(points))
    return points


@example("prefill-decode")
def prefill_decode_example(llm) -> dict:
    return {"sentence": DEFAULT_SENTENCE, "points": measure(llm, DEFAULT_SENTENCE, ladder(512))}


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


class PrefillDecodeWidget(pn.viewable.Viewer):
    def __init__(self, engine, sentence: str = DEFAULT_SENTENCE, model: str = "Llama-3-8B", gpu: str = "H100 SXM",
                 **params):
        super().__init__(**params)
        from bokeh.models import ColumnDataSource, HoverTool, NumeralTickFormatter
        saved = load_example("prefill-decode")
        text, note = clip(reader_sentence(sentence), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Your prompt (repeated to each length)", value=text, rows=2,
                                             max_length=MAX_CHARS, sizing_mode="stretch_width",
                                             css_classes=["pd-prompt"])
        self._longest = pn.widgets.Select(label="Longest prompt", options=list(LONGEST), value="512 tokens",
                                          width=140, css_classes=["pd-longest"])
        self._button = pn.widgets.Button(label="Measure", color="primary", disabled=True, width=120,
                                         align="end", css_classes=["pd-measure"])
        self._button.on_click(self._on_click)
        self._notes = html_pane(self._notes_html([note]), ["pd-notes"])
        self._table = html_pane("", ["pd-table"])
        c = PALETTE
        self._src = {k: ColumnDataSource(data={"tokens": [], "ms": [], "tip": []}) for k in
                     ("ttft", "itl", "rec_ttft", "rec_itl")}
        self._recorded_rows()
        fig = themed_figure(dark=is_dark(), height=260, y_axis_type="log", x_axis_label="prompt tokens",
                            y_axis_label="milliseconds", min_border_right=12)
        fig.line("tokens", "ms", source=self._src["ttft"], color=c[0], line_width=2)
        fig.line("tokens", "ms", source=self._src["itl"], color=c[1], line_width=2, line_dash="dashed")
        marks = [fig.scatter("tokens", "ms", source=self._src["ttft"], color=c[0], size=9, legend_label="TTFT"),
                 fig.scatter("tokens", "ms", source=self._src["itl"], color=c[1], size=8, marker="square",
                             legend_label="ITL (median)")]
        if self._rec[0]:       # the engine's recorded H200 rows, only when the file exists
            marks += [fig.scatter("tokens", "ms", source=self._src["rec_ttft"], color=c[0], size=12, marker="star",
                                  fill_alpha=0.2, legend_label="TTFT, H200 (recorded)"),
                      fig.scatter("tokens", "ms", source=self._src["rec_itl"], color=c[1], size=12, marker="star",
                                  fill_alpha=0.2, legend_label="ITL, H200 (recorded)")]
        fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
        fig.yaxis.ticker = log_ticks()
        fig.yaxis.formatter = NumeralTickFormatter(format="0,0.[0]")
        style_figure(fig, is_dark())       # again: the legend exists only now
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "8pt"
        fig.legend.padding = 4
        fig.legend.spacing = 0
        self.gate = EngineGate(engine, self._live, example=saved,
                               live_text="{model} on {device}; press Measure to time your prompt")
        self._runner = JobRunner(on_busy=self._on_busy, own_thread=True, name="prefill-decode")
        self.roofline = RooflinePanel(model=model, gpu=gpu)
        measured_part = pn.Column(
            html_pane('<p class="w-title"><b>Measured here</b> — your prompt at several lengths: the wait for '
                      "the first token (TTFT) grows with the prompt; the gap between later tokens (ITL) does not.</p>"),
            self._box, pn.FlexBox(self._longest, self._button, flex_wrap="wrap", align_items="flex-end"),
            self._notes, pn.pane.Bokeh(fig, sizing_mode="stretch_width"), self._table,
            sizing_mode="stretch_width", css_classes=["pd-measured"])
        modelled_part = pn.Column(
            html_pane('<p class="w-title"><b>Modelled on a datacenter GPU</b> — decode tokens per second as the '
                      "batch grows: nearly free until the ridge, flat after it.</p>"),
            self.roofline, sizing_mode="stretch_width", margin=(18, 0, 0, 0))
        self._layout = pn.Column(
            html_pane('<p class="w-title"><b>Live demo · prefill vs decode</b></p>'), self.gate.pane,
            measured_part, modelled_part,  # stacked: the chapter's column is too narrow for two plots abreast
            sizing_mode="stretch_width", css_classes=["pd-widget"])
        if saved is not None and saved.data["sentence"] == text:
            self._show(saved.data["points"], saved.label, saved.device, now=True)
        else:
            self._show([], "", "", now=True)
        self.gate.start()

    def __panel__(self):
        return self._layout

    # -- engine and jobs ------------------------------------------------------------------------
    def _live(self, _llm) -> None:
        self._button.disabled = False

    def _on_busy(self, busy: bool) -> None:
        self.gate.set_busy(busy)
        self._button.label = "Stop" if busy else "Measure"
        self._button.color = "warning" if busy else "primary"
        self._longest.disabled = busy

    def _on_click(self, _event=None) -> None:
        if self._runner.busy:
            self._runner.cancel()          # the job's check() raises; its stream aborts the request
            self._notes.object = self._notes_html(["Stopped: the points so far stay."])
            return
        if not self.gate.live:
            return
        text, note = clip((self._box.value or "").strip(), MAX_CHARS)
        if not text:
            self._notes.object = self._notes_html(["The prompt is empty: type a sentence first."])
            return
        llm, lengths = self.gate.llm, ladder(LONGEST[self._longest.value])
        device = llm.device_name
        label = measured(device)
        self._notes.object = self._notes_html([note], f"Measuring {len(lengths)} prompt lengths…")
        self._show([], label, device)

        def progress(points):
            self._show(points, label, device)
            left = lengths[len(points):]
            self._notes.object = self._notes_html(
                [note], f"Measured {len(points)} of {len(lengths)}; now {left[0]:,} tokens…" if left else "")
        self._runner.submit(lambda job: measure(llm, text, lengths, check=job.check, post=job.post),
                            on_done=lambda pts: (self._show(pts, label, device), setattr(self._notes, "object",
                                                                                 self._notes_html([note]))),
                            on_progress=progress, on_error=self.gate.error)

    # -- view -----------------------------------------------------------------------------------
    def _recorded_rows(self) -> None:
        from engine import load_recorded
        data = load_recorded("latency")
        rows = [r for r in recorded_latency_rows(data) if r["batch"] == 1]
        self._rec = (rows, recorded(data["device"], data["command"], data["date"]) if data else "",
                     data["device"] if data else "")
        for key, field in (("rec_ttft", "ttft_ms"), ("rec_itl", "itl_ms")):
            pts = [r for r in rows if r[field]]
            self._src[key].data = {"tokens": [r["prompt_tokens"] for r in pts], "ms": [r[field] for r in pts],
                                   "tip": [f"{field[:-3].upper()} {_ms(r[field])} for {r['prompt_tokens']:,} prompt "
                                           f"tokens, batch 1 · {self._rec[1]}" for r in pts]}

    def _show(self, points: list[dict], label: str, device: str, now: bool = False) -> None:
        def draw():                        # Bokeh models change only with the document lock held
            for key, field, what in (("ttft", "ttft_ms", "TTFT"), ("itl", "itl_ms", "ITL (median)")):
                self._src[key].data = {"tokens": [p["tokens"] for p in points], "ms": [p[field] for p in points],
                                       "tip": [f"{what} {_ms(p[field])} for {p['tokens']:,} prompt tokens · {label}"
                                               for p in points]}
        draw() if now else pn.state.execute(draw, schedule=True)   # in a session: next tick, document locked
        self._table.object = self._table_html(points, label, device)

    def _table_html(self, points: list[dict], label: str, device: str) -> str:
        rows = [f'<tr><td>{p["tokens"]:,}</td><td class="pd-ttft">{_ms(p["ttft_ms"])}</td>'
                f'<td>{_ms(p["prefill_ms"])}</td><td class="pd-itl">{_ms(p["itl_ms"])}</td>'
                f'<td>{esc(device)}{self._caveat(p)}</td></tr>' for p in points]
        rec_rows, rec_label, rec_device = self._rec
        rows += [f'<tr class="pd-recorded"><td>{r["prompt_tokens"]:,}</td><td>{_ms(r["ttft_ms"]) if r["ttft_ms"] else "–"}'
                 f'</td><td>–</td><td>{_ms(r["itl_ms"]) if r["itl_ms"] else "–"}</td><td>{esc(rec_device)} (recorded)</td></tr>'
                 for r in rec_rows]
        if not points:
            rows.append('<tr><td colspan="5" class="placeholder">Press Measure: each length appears here as it '
                        "finishes.</td></tr>")
        sources = [label_html(label)] if label and points else []
        sources.append(f"H200 rows: {label_html(rec_label)}" if rec_rows else
                       "Our engine on an H200 (TTFT and ITL by prompt length): not recorded yet.")
        return ('<div class="pd-scroll"><table class="pd-tab"><thead><tr><th>prompt tokens</th><th>TTFT</th>'
                '<th title="the engine\'s own wall time for the prefill step">prefill step</th><th>ITL</th>'
                f'<th>device</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
                + "".join(f'<p class="w-small">{x}</p>' for x in sources))

    @staticmethod
    def _caveat(p: dict) -> str:
        notes = []
        if p.get("cached"):
            notes.append(f"{p['cached']:,} tokens from the prefix cache")
        if p.get("shared"):
            notes.append(f"{p['shared']} steps shared with other readers")
        return f'<br><span class="w-small">{esc("; ".join(notes))}</span>' if notes else ""

    @staticmethod
    def _notes_html(notes, progress: str = "") -> str:
        out = "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)
        return out + (f'<p class="w-small pd-progress" aria-live="polite">{esc(progress)}</p>' if progress else "")


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds (median of `repeat`): a full roofline update (arithmetic, Bokeh sources,
    readout) and one short measuring run (16 and 64 tokens, 8 new tokens each, on the shared engine)."""
    panel, runs = RooflinePanel(), {"roofline_update_ms": [], "measure_16_and_64_tokens_ms": []}
    for _ in range(repeat * 5):
        t = time.perf_counter()
        panel.update()
        runs["roofline_update_ms"].append((time.perf_counter() - t) * 1e3)
    for _ in range(repeat):
        t = time.perf_counter()
        measure(llm, DEFAULT_SENTENCE, [16, 64])
        runs["measure_16_and_64_tokens_ms"].append((time.perf_counter() - t) * 1e3)
    return {k: round(median(v), 2) for k, v in runs.items()}


@register("prefill-decode")
def make_prefill_decode(engine, **args) -> PrefillDecodeWidget:
    """Factory for ``::: widget prefill-decode {"model": ..., "gpu": ...}``."""
    return PrefillDecodeWidget(engine, **args)
