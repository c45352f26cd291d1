"""`prefill-decode` (chapter 11): the reader's sentence prefilled at several lengths on this server,
TTFT and inter-token latency measured for each, beside the modelled decode roofline (roofline.py).

    the sentence ─► token ids, repeated to 16, 64, 128 … tokens ─► the shared engine, 8 new tokens
                    (each run starts with a fresh number, so       │
                     the prefix cache cannot skip the prefill)      ▼
                                            TTFT = submit → first token;  ITL = median gap after it

It runs on the shared engine (compute.py), so another reader's requests may share its steps (the table,
view.py, says so). One background job on a thread of its own; each length's point is posted as it lands;
Stop (or leaving the page) aborts the request in flight and frees its blocks.
"""
from __future__ import annotations

import time
from statistics import median

import panel as pn
import param

from widgets.common import Widget, clip, example, html_pane, measured, register
from widgets.prefill_decode.compute import DEFAULT_SENTENCE, ladder, measure, recorded_prefill_rows
from widgets.prefill_decode.roofline import GPU_CHOICES, MODEL_CHOICES, RooflinePanel
from widgets.prefill_decode.view import latency_figure, measured_data, recorded_data, table_html

LONGEST = {"128 tokens": 128, "256 tokens": 256, "512 tokens": 512, "1,024 tokens": 1024}
MAX_CHARS = 400


@example
def prefill_decode_example(llm) -> dict:
    return {"sentence": DEFAULT_SENTENCE, "points": measure(llm, DEFAULT_SENTENCE, ladder(512))}


@register
class PrefillDecodeWidget(Widget):
    css = "pd"
    live_text = "{model} on {device}; press Measure to time your prompt"
    own_thread = True
    sentence = param.String(default=DEFAULT_SENTENCE, doc="the prompt repeated to each length (the reader's "
                                                          "sentence once chosen)")
    model = param.Selector(default="Llama-3-8B", objects=MODEL_CHOICES, doc="the roofline's first model")
    gpu = param.Selector(default="H100 SXM", objects=GPU_CHOICES, doc="the roofline's first GPU")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        text, note = clip(self.reader_sentence(self.sentence), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Your prompt (repeated to each length)", value=text, rows=2,
                                             max_length=MAX_CHARS, sizing_mode="stretch_width",
                                             css_classes=["pd-prompt"])
        self._longest = pn.widgets.Select(label="Longest prompt", options=list(LONGEST), value="512 tokens",
                                          width=140, css_classes=["pd-longest"])
        self._button = self.run_button("Measure", self._measure, width=120, align="end",
                                       css_classes=["pd-measure"])
        self.say(note)
        self._table = html_pane("", ["pd-table"])
        self._rec = recorded_prefill_rows()          # the engine's H200 rows, drawn only when recorded
        fig, self._src = latency_figure(with_recorded=bool(self._rec[0]))
        for key, data in recorded_data(self._rec[0], self._rec[1]).items():
            self._src[key].data = data
        self.roofline = RooflinePanel(model=self.model, gpu=self.gpu)
        measured_part = pn.Column(
            self.title("<b>Measured here</b> — your prompt at several lengths: the wait for the first token "
                       "(TTFT) grows with the prompt; the gap between later tokens (ITL) does not."),
            self._box, pn.FlexBox(self._longest, self._button, flex_wrap="wrap", align_items="flex-end"),
            self.notes, pn.pane.Bokeh(fig, sizing_mode="stretch_width"), self._table,
            sizing_mode="stretch_width", css_classes=["pd-measured"])
        modelled_part = pn.Column(
            self.title("<b>Modelled on a datacenter GPU</b> — decode tokens per second as the batch grows: "
                       "nearly free until the ridge, flat after it."),
            self.roofline, sizing_mode="stretch_width", margin=(18, 0, 0, 0))
        self.layout = pn.Column(
            self.title("<b>Live demo · prefill vs decode</b>"), self.gate.pane,
            measured_part, modelled_part,  # stacked: the chapter's column is too narrow for two plots abreast
            sizing_mode="stretch_width", css_classes=["pd-widget"])
        if self.example is not None and self.example.data["sentence"] == text:
            self._show(self.example.data["points"], self.example.label, self.example.device, now=True)
        else:
            self._show([], "", "", now=True)
        self.gate.start()

    # -- engine and jobs ------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        self._button.disabled = False

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)
        self._longest.disabled = busy

    def stop(self) -> None:
        self.jobs.cancel()                 # the job's check() raises; its stream aborts the request
        self.say("Stopped: the points so far stay.")

    def _measure(self) -> None:
        if not self.gate.live:
            return
        prompt = self.read_prompt(self._box.value, MAX_CHARS)
        if prompt is None:
            return
        text, note = prompt
        llm, lengths = self.gate.llm, ladder(LONGEST[self._longest.value])
        device = llm.device_name
        label = measured(device)
        self.say(note, progress=f"Measuring {len(lengths)} prompt lengths…")
        self._show([], label, device)

        def progress(points):
            self._show(points, label, device)
            left = lengths[len(points):]
            self.say(note, progress=f"Measured {len(points)} of {len(lengths)}; now {left[0]:,} tokens…"
                     if left else "")

        def done(points):
            self._show(points, label, device)
            self.say(note)
        self.jobs.submit(lambda job: measure(llm, text, lengths, check=job.check, post=job.post),
                         on_done=done, on_progress=progress, on_error=self.gate.error)

    # -- view -----------------------------------------------------------------------------------
    def _show(self, points: list[dict], label: str, device: str, now: bool = False) -> None:
        def draw():                        # Bokeh models change only with the document lock held
            for key, data in measured_data(points, label).items():
                self._src[key].data = data
        draw() if now else pn.state.execute(draw, schedule=True)   # in a session: next tick, document locked
        self._table.object = table_html(points, label, device, self._rec)


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
