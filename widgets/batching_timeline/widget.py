"""`batching-timeline` (chapter 14): the same requests through the engine's static and continuous
schedulers, each in a private engine on the loaded model, drawn as Gantt charts from the step traces.

    pattern / lengths / KV memory / recompute or swap ──Run──► static run ──► continuous run
                                                                 │ each step posted: the charts grow
                                                                 ▼
                                      two Gantts + tokens per step, a comparison table, your runs

The engine side is compute.py, the drawing view.py. One run at a time per reader (a new Run or Stop
cancels the old one between two steps), at most two readers' runs at once on the server (sharing.BATCHING_RUNS),
and a run's private engine is released in its ``finally`` when the reader leaves mid-run.
"""
from __future__ import annotations

import time
from statistics import median

import panel as pn
import param

from widgets.batching_timeline.compute import (DEFAULT_BLOCKS, MAX_BLOCKS, MODES, NAMES, PATTERN_LABELS, Req,
                                               format_lengths, min_blocks, parse_lengths, pattern_lengths,
                                               run_both, run_mode)
from widgets.batching_timeline.view import (TITLES, X_PAD, compare_html, gantt_data, gantt_figure, history_html,
                                            history_row, legend_html, waiting_text)
from widgets.common import Widget, example, html_pane, is_dark, measured, register
from widgets.common.sharing import BATCHING_RUNS

DEFAULT_PATTERN = "long-short"
MAX_HISTORY = 8


@example
def batching_timeline_example(llm) -> dict:
    reqs, _ = parse_lengths(format_lengths(pattern_lengths(DEFAULT_PATTERN)))
    return {"lengths": format_lengths(pattern_lengths(DEFAULT_PATTERN)), "kv_blocks": DEFAULT_BLOCKS,
            "preemption": "recompute", "runs": {m: run_mode(llm, reqs, m) for m in MODES}}


@register
class BatchingTimeline(Widget):
    css = "bt"
    live_text = "{model} on {device}, in private engines of its own: press Run"
    own_thread = True
    pattern = param.Selector(default=DEFAULT_PATTERN, objects=list(PATTERN_LABELS),
                             doc="the requests the chapter starts with")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._pattern = pn.widgets.Select(label="Requests like", options={v: k for k, v in PATTERN_LABELS.items()},
                                          value=self.pattern, css_classes=["bt-pattern"], sizing_mode="stretch_width")
        self._lengths = pn.widgets.TextInput(label="Prompt→answer tokens, one pair per request (at most 8)",
                                             value=format_lengths(pattern_lengths(self.pattern)), max_length=200,
                                             css_classes=["bt-lengths"], sizing_mode="stretch_width")
        self._blocks = pn.widgets.IntSlider(label="KV memory (blocks of 16 tokens)", start=1, end=MAX_BLOCKS,
                                            value=DEFAULT_BLOCKS, css_classes=["bt-blocks"], width=260)
        self._mode = pn.widgets.RadioButtonGroup(label="When memory runs out", options=["recompute", "swap"],
                                                 value="recompute", css_classes=["bt-preemption"],
                                                 color="default")
        self._run = self.run_button("Run ▸", self._start, width=110, align="end")
        self._pattern.param.watch(self._on_pattern, "value")
        self._lengths.param.watch(self._on_lengths, "value")
        self._compare = html_pane("", ["bt-compare-pane"])
        self._history_pane = html_pane("", ["bt-history-pane"])
        self._history: list[dict] = []
        ids = list(NAMES)
        dark = is_dark()
        self._figs = {m: gantt_figure(ids, dark) for m in MODES}
        charts = []
        for m, (fig, strip, _, _) in self._figs.items():
            charts += [html_pane(f'<p class="bt-chart-title"><b>{TITLES[m]}</b></p>', [f"bt-title-{m}"]),
                       pn.pane.Bokeh(fig, sizing_mode="stretch_width"),
                       pn.pane.Bokeh(strip, sizing_mode="stretch_width")]
        self.layout = pn.Column(
            self.title("<b>Live demo · static vs continuous batching</b> — the same requests through the "
                       "engine's two schedulers, 4 seats, a token budget of 128 per step."),
            self.gate.pane,
            pn.FlexBox(pn.Column(self._pattern, sizing_mode="stretch_width", min_width=220, max_width=420),
                       self._blocks, pn.Column(html_pane('<p class="w-small">Preemption</p>'), self._mode),
                       self._run, flex_wrap="wrap", align_items="flex-end", gap="0 12px"),
            self._lengths, self.notes, self._compare, html_pane(legend_html(), ["bt-legend-pane"]),
            *charts, self._history_pane, sizing_mode="stretch_width", css_classes=["bt-widget"])
        self._fit_slider(parse_lengths(self._lengths.value)[0])
        if self.example is not None and self.example.data["lengths"] == self._lengths.value:
            self._paint(self.example.data["runs"], self.example.label, now=True)
        else:
            self._paint({}, "", now=True)
        self.gate.start()

    # -- inputs -----------------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        self._run.disabled = False

    def _on_pattern(self, event) -> None:
        self._lengths.value = format_lengths(pattern_lengths(event.new))

    def _on_lengths(self, event) -> None:
        reqs, notes = parse_lengths(event.new)
        self._fit_slider(reqs)
        self.say(*(notes or ["Press Run to send these requests."]))

    def _fit_slider(self, reqs: list[Req]) -> None:
        """Raise the slider to the fewest blocks that still hold the longest request alone. Its range
        stays 1-64: a range changed from the server left the browser's keyboard (Home) on the old one."""
        low = min(min_blocks(reqs), MAX_BLOCKS)
        if self._blocks.value < low:
            self._blocks.value = low

    def stop(self) -> None:
        self.jobs.cancel()                        # the run stops between two steps; its engine is released
        self.say("Stopped: the steps so far stay on the charts.")

    def _start(self) -> None:
        if not self.gate.live:
            return
        reqs, notes = parse_lengths(self._lengths.value)
        if not reqs:
            self.say(*notes, "Type at least one request, such as 20→40.")
            return
        llm, blocks, preemption = self.gate.llm, max(self._blocks.value, min_blocks(reqs)), self._mode.value
        if blocks > self._blocks.value:
            notes = notes + [f"KV memory raised to {blocks} blocks: the longest request needs that many on its own."]
            self._blocks.value = blocks
        label = measured(llm.device_name)
        self.say(*notes)
        started = time.perf_counter()

        def progress(posted):
            mode, what = posted
            if mode is None:                  # waiting in line: `what` is the place
                self._paint({}, label, running=None)
                self.say(*notes, progress=waiting_text(what, BATCHING_RUNS.seats))
                return
            self._paint(what, label, running=mode)

        def done(runs):
            self._paint(runs, label)
            self._history = ([history_row(runs[m]) for m in reversed(MODES)] + self._history)[:MAX_HISTORY]
            self._history_pane.object = history_html(self._history)
            cut = [m for m in MODES if not runs[m]["summary"]["complete"]]
            extra = [f"{TITLES[m]} stopped after {runs[m]['summary']['steps']} steps, the most one run may take "
                     "here." for m in cut]
            self.say(*notes, *extra, progress=f"Both runs took {time.perf_counter() - started:,.1f} s of this "
                                              "server's time.")
        self.jobs.submit(lambda job: run_both(llm, reqs, blocks, preemption, job), on_done=done,
                         on_progress=progress, on_error=self.gate.error)

    # -- view -------------------------------------------------------------------------------------
    def _paint(self, runs: dict, label: str, running: str | None = None, now: bool = False) -> None:
        self._compare.object = compare_html(runs, label, running)
        longest = max((len(t["steps"]) for t in runs.values()), default=10)
        data = {m: gantt_data(t, label) for m, t in runs.items()}

        def draw():                                  # Bokeh models: under the document lock
            for m, (fig, strip, seg, steps) in self._figs.items():
                ids = [r["id"] for r in runs[m]["requests"]] if m in runs else list(NAMES)
                fig.y_range.factors = list(reversed(ids))
                fig.height = 42 + 24 * len(ids)
                fig.x_range.end = max(longest, 10) + X_PAD
                seg.data, steps.data = data.get(m) or (_blank(seg.data), _blank(steps.data))
        draw() if now else pn.state.execute(draw, schedule=True)


def _blank(data: dict) -> dict:
    return {k: [] for k in data}


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds (median of `repeat`): the chapter's eight requests through each scheduler in a
    fresh private engine (every step run and its timeline rebuilt, as the widget posts it)."""
    reqs, _ = parse_lengths(format_lengths(pattern_lengths(DEFAULT_PATTERN)))
    runs = {f"{m}_run_ms": [] for m in MODES}
    for _ in range(repeat):
        for m in MODES:
            t = time.perf_counter()
            run_mode(llm, reqs, m, on_progress=lambda tl: None)
            runs[f"{m}_run_ms"].append((time.perf_counter() - t) * 1e3)
    return {k: round(median(v), 1) for k, v in runs.items()}

