"""`chunked-prefill` (chapter 17): a long document arrives while three short chats decode; private
engines run it with chunked prefill under the reader's token budget and without, and the widget
draws each step's tokens per request against the budget and the chats' inter-token gaps over time.

    budget slider / document edit ─► compute.compare (two private engines, one after the other)
                                     ─► StepBars on, StepBars off, GapPlot, summary (view.py)

The saved example paints first; a run starts when the reader moves the budget, edits the document
or presses Run. It takes a few seconds on a CPU: a progress line says which run, step and stage it is at
(view.progress_text), the chunked half is shown as soon as it is done, a newer input cancels the run in
flight (between steps), and leaving the page cancels it too.
"""
from __future__ import annotations

import panel as pn
import param

from widgets.common import Widget, esc, example, html_pane, measured, register
from widgets.common.timing import median_ms
from widgets.chunked_prefill.compute import BUDGETS, MAX_DOC_TOKENS, compare
from widgets.chunked_prefill.view import GapPlot, StepBars, legend_html, progress_text, summary_html

CHATS = ("Write a haiku about the sea.", "Name three prime numbers.", "What colour is the sky at dusk?")
DEFAULT_BUDGET = 64
MAX_DOC_CHARS = 3000
EMPTY_DOC = "The long prompt is empty: paste a document first."
DEFAULT_DOC = (
    "The lighthouse on the northern cape was built in 1871, after three ships were lost on the reef in a single "
    "winter. Its first keeper, a former sailmaker, kept a log of every vessel that passed, the weather at dawn "
    "and dusk, and the oil burned each night. The log fills eleven volumes. It records storms that kept the "
    "supply boat away for six weeks, a summer when the fog never lifted before noon, and the night in 1903 when "
    "the lens cracked and the keeper's daughter kept a lantern burning in the gallery until morning. In 1932 the "
    "oil lamp gave way to electric light, and in 1967 the last keeper left; since then the light has run on its "
    "own, checked twice a year by an engineer who arrives by helicopter. The keepers' cottage is now a small "
    "museum. Visitors can read the logs, climb the hundred and twelve steps to the lamp room, and look out over "
    "the reef, which at low tide still shows the ribs of one of the wrecks that started it all. Local volunteers "
    "run the museum from April to October and restore a page of the old logs each winter."
)


@example
def chunked_prefill_example(llm) -> dict:
    return compare(llm, list(CHATS), DEFAULT_DOC, DEFAULT_BUDGET)


@register
class ChunkedPrefillWidget(Widget):
    css = "cp"
    live_text = ("{model} on {device}: move the budget, edit the document or press Run to serve them in "
                 "private engines")
    own_thread = True
    budget = param.Integer(default=DEFAULT_BUDGET, doc="the token budget the slider starts at (one of BUDGETS)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._chats = [self.reader_sentence(CHATS[0]), *CHATS[1:]]
        self._doc = pn.widgets.TextAreaInput(label=f"The long prompt (up to {MAX_DOC_TOKENS} tokens are used)",
                                             value=DEFAULT_DOC, rows=4, max_length=MAX_DOC_CHARS,
                                             sizing_mode="stretch_width", css_classes=["cp-doc"])
        self._budget = pn.widgets.DiscreteSlider(label="Token budget per step (max_num_batched_tokens)",
                                                 options=list(BUDGETS), value=self.budget if self.budget in BUDGETS
                                                 else DEFAULT_BUDGET, sizing_mode="stretch_width",
                                                 css_classes=["cp-budget"])
        # Not a Run/Stop button: a run is a few seconds, and a newer input already cancels the one in flight.
        self._run = pn.widgets.Button(label="Run", color="primary", disabled=True, width=100, css_classes=["cp-run"])
        self._run.on_click(lambda e: self._submit())
        self._budget.param.watch(lambda e: self._submit(debounce_ms=250), "value")
        self._doc.param.watch(lambda e: self._submit(debounce_ms=400), "value")
        self._summary = html_pane("", ["cp-summary-pane"])
        self._bars = StepBars.pair("chunked prefill on", "chunked prefill off")     # one pair of axes
        self._gaps = GapPlot()
        chats = ", ".join(f"“{esc(c)}”" for c in self._chats)
        self.layout = pn.Column(
            self.title("<b>Live demo · chunked prefill</b> — a long prompt arrives while three chats are decoding: "
                       "does it get one huge step, or budget-sized slices that the chats ride along with?"),
            self.gate.pane, self._doc, pn.FlexBox(self._budget, self._run, flex_wrap="wrap", align_items="flex-end"),
            html_pane(f'<p class="w-small cp-chats">The chats: {chats}.</p>'), self.notes, self._summary,
            html_pane(legend_html()), pn.pane.Bokeh(self._bars["on"].fig, sizing_mode="stretch_width"),
            pn.pane.Bokeh(self._bars["off"].fig, sizing_mode="stretch_width"),
            pn.pane.Bokeh(self._gaps.fig, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", css_classes=["cp-widget"])
        if self.example is not None:
            self._paint(self.example.data, self.example.label, now=True)
        self.gate.start()

    def on_live(self, llm) -> None:
        self._run.disabled = False

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)
        self._run.disabled = busy or not self.gate.live

    def _submit(self, debounce_ms: int = 0) -> None:
        if not self.gate.live:
            return
        prompt = self.read_prompt(self._doc.value, MAX_DOC_CHARS, empty=EMPTY_DOC)
        if prompt is None:
            return
        doc, note = prompt
        llm, budget = self.gate.llm, int(self._budget.value)
        label = measured(llm.device_name)

        painted: set[str] = set()                        # the runs this job's charts show so far

        def progress(data):
            # Every step posts where the run is (a run is several seconds on a CPU: ux review #4); the
            # charts repaint only when a run is complete, and until then keep the previous result.
            runs = {m for m in ("on", "off") if m in data}
            if runs and runs != painted:
                painted.clear()
                painted.update(runs)
                self._paint(data, label)
            self.say(note, progress=progress_text(data.get("progress")))

        def done(data):
            self._paint(data, label)
            self.say(note, f"Only the document's first {MAX_DOC_TOKENS} tokens are used." if data["cut"] else None)
        self.say(note, progress="Starting the two runs…")
        self.jobs.submit(lambda job: compare(llm, self._chats, doc, budget, check=job.check, post=job.post),
                         on_done=done, on_progress=progress,
                         on_error=lambda m: (self.say(note), self.gate.error(m)), debounce_ms=debounce_ms)

    def _paint(self, data: dict, label: str, now: bool = False) -> None:
        self._summary.object = summary_html(data, label)

        def draw():                                       # Bokeh models: under the document lock
            on, off = data.get("on"), data.get("off")
            self._bars["on"].show(on, f"chunked prefill on · budget {data['budget']:,}")
            self._bars["off"].show(off, f"chunked prefill off · budget {off['budget']:,}" if off else
                                   "chunked prefill off · running…")
            self._gaps.show(data, label)
        draw() if now else pn.state.execute(draw, schedule=True)


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds: one comparison at the default budget (the scenario with chunking, then
    without, each in a fresh private engine), what a budget move costs before the view repaints."""
    return {"compare_on_and_off": median_ms(lambda: compare(llm, list(CHATS), DEFAULT_DOC, DEFAULT_BUDGET),
                                            repeat=repeat, warmup=0)}

