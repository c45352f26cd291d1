"""`data-flow` (chapter 13): where one decode step's bytes live on a GPU, and how long each rung takes.

Pick a model, a batch and a context (and H100 SXM or H200): the diagram shows the step's weights, KV
reads, KV writes and activations climbing HBM → L2 → shared memory → registers, each rung with its
capacity, bandwidth and modelled time (bytes ÷ bandwidth, compute.py), and NVLink, PCIe, host memory
and the network card beside HBM. Beside the model, what an H200 recorded (recorded.py). The diagram is
a custom component (diagram.py, drawn by diagram.js); view.py writes its data and the sentences.

Everything here is arithmetic, so it updates at once on the event loop and works before the engine is
loaded. The engine supplies the shapes: the models are its ModelConfig records, and once it is live
the SmolLM2 entry is the loaded model's own config (a unit test checks the two agree).
"""
from __future__ import annotations

import statistics
import time

import panel as pn
import param

from widgets.common import Widget, example, html_pane, register
from widgets.common.text import clamp
from widgets.common.theme import stylesheets
from widgets.modelled.hardware import MODELS
from widgets.data_flow.diagram import DataFlowDiagram
from widgets.data_flow.view import caption_html, render

WIDGET_MODELS = ["SmolLM2-135M", "Llama-3-8B", "Llama-3-70B"]
GPU_CHOICES = ["H100 SXM", "H200"]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONTEXTS = [128, 256, 512, 1024, 2048, 4096, 8192]        # the three models' context limit is 8,192
DEFAULTS = {"model": "Llama-3-8B", "gpu": "H100 SXM", "batch": 8, "context": 2048}


@example
def data_flow_example(llm) -> dict:
    """The loaded model's step at the default batch and context (modelled parts only: recorded files
    change when a GPU benchmark is rerun, and must not make this example stale)."""
    out = render({"server": llm.config}, **dict(DEFAULTS, model="server"), with_recorded=False)
    return {"diagram": out["diagram"], "summary": out["summary"]}


@register
class DataFlowWidget(Widget):
    css = "df"
    shows_example = False        # the diagram is computed at once from the arithmetic: no saved example stands in
    # the status line says "Modelled: …", not "Live: …": nothing here is computed by the model (the review read
    # "Live" as a claim that these times were measured); only the GPU figures at the bottom are measured
    live_text = ("every time in the diagram is bytes ÷ the GPU's published bandwidth, for the engine's own "
                 "model shapes, SmolLM2's as loaded on {device}; the GPU measurements below say where and when "
                 "they were recorded")
    model = param.String(default=DEFAULTS["model"], doc="one of WIDGET_MODELS")
    gpu = param.String(default=DEFAULTS["gpu"], doc="one of GPU_CHOICES")
    batch = param.Integer(default=DEFAULTS["batch"], doc="clamped to 1–256, then the nearest of BATCHES")
    context = param.Integer(default=DEFAULTS["context"], doc="clamped to 128–8,192, then the nearest of CONTEXTS")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self.gate.live_word = "Modelled"
        self._models = dict(MODELS)
        notes, model = [], self.model
        if model not in WIDGET_MODELS:
            notes.append(f"No model called “{model}”; showing {DEFAULTS['model']}.")
            model = DEFAULTS["model"]
        gpu = self.gpu if self.gpu in GPU_CHOICES else DEFAULTS["gpu"]
        batch, note_b = clamp(self.batch, BATCHES[0], BATCHES[-1], "Batch")
        context, note_c = clamp(self.context, CONTEXTS[0], CONTEXTS[-1], "Context")
        batch = min(BATCHES, key=lambda b: abs(b - batch))
        context = min(CONTEXTS, key=lambda c: abs(c - context))
        self.say(*notes, note_b, note_c)
        self._model = pn.widgets.Select(label="Model", options=WIDGET_MODELS, value=model, width=170,
                                        css_classes=["df-model"])
        self._gpu = pn.widgets.RadioButtonGroup(label="GPU", options=GPU_CHOICES, value=gpu,
                                                css_classes=["df-gpu"], align="end")
        self._batch = pn.widgets.DiscreteSlider(label="Batch", options=BATCHES, value=batch, width=170,
                                                css_classes=["df-batch"])
        self._context = pn.widgets.DiscreteSlider(label="Context (tokens)", options=CONTEXTS, value=context,
                                                  width=190, css_classes=["df-context"])
        first = render(self._models, model, gpu, batch, context)
        self.diagram = DataFlowDiagram(data=first["diagram"], stylesheets=stylesheets(),
                                       sizing_mode="stretch_width", css_classes=["df-diagram"])
        self._caption = html_pane(caption_html(first), ["df-caption-pane"])
        self._summary = html_pane(first["summary"], ["df-summary-pane"])
        self._beside = html_pane(first["beside"], ["df-beside-pane"])
        for w in (self._model, self._gpu, self._batch, self._context):
            w.param.watch(self._changed, "value")
        title = self.title("<b>Where the bytes go · one decode step</b> — pick a model, a batch and a context; "
                           "hover, tap or Tab to a level for its numbers.")
        controls = pn.FlexBox(self._model, self._gpu, self._batch, self._context, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")
        self.layout = pn.Column(title, self.gate.pane, controls, self.notes, self._caption, self.diagram,
                                self._summary, self._beside, sizing_mode="stretch_width",
                                css_classes=["df-widget"])
        self.gate.start()

    def on_live(self, llm) -> None:
        self._models["SmolLM2-135M"] = llm.config
        if self._model.value == "SmolLM2-135M":
            self._changed()

    def _changed(self, *_event) -> None:
        try:
            out = render(self._models, self._model.value, self._gpu.value, int(self._batch.value),
                         int(self._context.value))
        except (KeyError, ValueError) as exc:          # a value the controls should never send
            self.gate.error(f"{type(exc).__name__}: {exc}")
            return
        self.diagram.data = out["diagram"]
        self._caption.object = caption_html(out)
        self._summary.object = out["summary"]
        self._beside.object = out["beside"]


def bench(llm) -> dict:
    """Server milliseconds per update: the arithmetic, sentences and recorded look-ups of one choice."""
    models = dict(MODELS, **{"SmolLM2-135M": llm.config})
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for model in WIDGET_MODELS:
            render(models, model, "H100 SXM", 64, 4096)
        runs.append((time.perf_counter() - t0) * 1e3 / len(WIDGET_MODELS))
    return {"data-flow update ms": round(statistics.median(runs), 3)}
