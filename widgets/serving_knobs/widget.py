"""`serving-knobs` (chapter 20): pick a traffic pattern and the engine's knobs, press Run, and a private
engine serves the pattern's synthetic requests; each run becomes a point of throughput against TTFT and
ITL (p50 and p99), and the runs that nothing beats on both counts form the frontier.

    pattern, max_num_seqs, budget, chunked, caching ─► Run ─► compute.run_point (a job on its own
    thread, progress after every step, Stop or leaving the page cancels it and aborts every request)
        ─► the runs table, FrontierPlot TTFT, FrontierPlot ITL (view.py); the pattern's
           request lengths beside them (LengthScatter)

The first paint shows runs recorded ahead of time (the saved example); the reader's first run
replaces them, so one frontier never mixes machines.
"""
from __future__ import annotations

import panel as pn
import param

from widgets.common import Widget, example, html_pane, register
from widgets.common.timing import median_ms
from widgets.serving_knobs.compute import BUDGETS, PATTERNS, SEQS, Knobs, lengths, run_point
from widgets.serving_knobs.view import FrontierPlot, LengthScatter, progress_html, runs_html, stopped_html

MAX_RUNS = 16
EXAMPLE_SEQS = (1, 4, 16)


@example
def serving_knobs_example(llm) -> dict:
    runs = [run_point(llm, Knobs("chat", seqs)) for seqs in EXAMPLE_SEQS]
    return {"pattern": "chat", "runs": runs}


@register
class ServingKnobsWidget(Widget):
    css = "sk"
    live_text = "{model} on {device}; each run serves 12 requests in a private engine"
    own_thread = True
    pattern = param.String(default="chat", doc="the traffic pattern picked at first (one of PATTERNS)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        k = Knobs()
        self._pattern = pn.widgets.Select(label="Traffic pattern", options=list(PATTERNS),
                                          value=self.pattern if self.pattern in PATTERNS else "chat", width=170,
                                          css_classes=["sk-pattern"])
        self._seqs = pn.widgets.DiscreteSlider(label="max_num_seqs", options=list(SEQS), value=k.max_num_seqs,
                                               width=200, css_classes=["sk-seqs"])
        self._budget = pn.widgets.DiscreteSlider(label="token budget", options=list(BUDGETS), value=k.budget,
                                                 width=200, css_classes=["sk-budget"])
        self._chunked = pn.widgets.Checkbox(label="chunked prefill", value=k.chunked, css_classes=["sk-chunked"])
        self._caching = pn.widgets.Checkbox(label="prefix caching", value=k.caching, css_classes=["sk-caching"])
        self._run = self.run_button("Run", self._on_run, width=100)
        self._clear = pn.widgets.Button(label="Clear runs", width=110, css_classes=["sk-clear"])
        self._clear.on_click(lambda e: self._set_runs([]))
        self._pattern.param.watch(lambda e: self._show(), "value")
        self._progress = html_pane("", ["sk-progress-pane"])
        self._table = html_pane("", ["sk-table"])
        self._ttft, self._itl, self._lengths = FrontierPlot("TTFT"), FrontierPlot("ITL"), LengthScatter()
        self._runs: list[dict] = []
        self._vocab = None
        self.layout = pn.Column(
            self.title("<b>Live demo · serving knobs</b> — one workload served at the settings you pick; each run "
                       "is a point of throughput against latency."),
            self.gate.pane,
            pn.FlexBox(self._pattern, self._seqs, self._budget, flex_wrap="wrap", align_items="flex-end"),
            pn.FlexBox(self._chunked, self._caching, self._run, self._clear, flex_wrap="wrap", align_items="center"),
            self._progress, self._table,
            pn.pane.Bokeh(self._ttft.fig, sizing_mode="stretch_width"),
            pn.pane.Bokeh(self._itl.fig, sizing_mode="stretch_width"),
            html_pane('<p class="w-small">The requests of the chosen pattern: what each sends and gets back '
                      "(serve-sim's lengths × 0.05, all arriving at once).</p>"),
            pn.pane.Bokeh(self._lengths.fig, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", css_classes=["sk-widget"])
        if self.example is not None:
            self._runs = [{**p, "source": self.example.label} for p in self.example.data["runs"]]
        self._show(now=True)
        self.gate.start()

    # -- engine and jobs --------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        self._vocab = llm.config.vocab_size
        self._run.disabled = False

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)
        for w in (self._pattern, self._seqs, self._budget, self._chunked, self._caching, self._clear):
            w.disabled = busy
        if not busy:
            self._progress.object = ""

    def stop(self) -> None:
        self.jobs.cancel()                  # the job's check() raises; serve_workload aborts every request
        self._progress.object = stopped_html()

    def knobs(self) -> Knobs:
        return Knobs(self._pattern.value, int(self._seqs.value), int(self._budget.value), bool(self._chunked.value),
                     bool(self._caching.value))

    def _on_run(self) -> None:
        if not self.gate.live:
            return
        llm, knobs = self.gate.llm, self.knobs()

        def done(point):
            fresh = [p for p in self._runs if "source" not in p]      # the example's runs give way
            self._set_runs(fresh[-(MAX_RUNS - 1):] + [{**point}])
        self.jobs.submit(lambda job: run_point(llm, knobs, check=job.check, progress=job.post),
                         on_done=done, on_error=self.gate.error,
                         on_progress=lambda p: setattr(self._progress, "object", progress_html(p)))

    # -- view -------------------------------------------------------------------------------------
    def _set_runs(self, runs: list[dict]) -> None:
        self._runs = runs
        self._show()

    def _show(self, now: bool = False) -> None:
        pattern = self._pattern.value
        numbered = [(n, p) for n, p in enumerate(self._runs, 1) if p["knobs"]["pattern"] == pattern]
        self._table.object = runs_html(numbered, len(self._runs) - len(numbered))
        requests = lengths(pattern, self._vocab)

        def draw():                                        # Bokeh models: under the document lock
            self._ttft.show(numbered)
            self._itl.show(numbered)
            self._lengths.show(requests)
        draw() if now else pn.state.execute(draw, schedule=True)


def bench(llm, repeat: int = 1) -> dict:
    """Server milliseconds: one run of the chat pattern at the default knobs (12 requests served by a
    fresh private engine), and a pattern switch (its requests' lengths for the scatter)."""
    return {"run_chat_default_knobs": median_ms(lambda: run_point(llm, Knobs()), repeat=repeat, warmup=0),
            "pattern_switch": median_ms(lambda: [lengths(p, llm.config.vocab_size) for p in PATTERNS], repeat=5)}

