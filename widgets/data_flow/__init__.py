"""`data-flow` (chapter 13): where one decode step's bytes live on a GPU, and how long each rung takes.

Pick a model, a batch and a context (and H100 SXM or H200): the diagram shows the step's weights, KV
reads, KV writes and activations climbing HBM → L2 → shared memory → registers, each rung with its
capacity, bandwidth and modelled time (bytes ÷ bandwidth, traffic.py), and NVLink, PCIe, host memory
and the network card beside HBM. Beside the model, what an H200 recorded (recorded.py).

Everything here is arithmetic, so it updates at once on the event loop and works before the engine is
loaded. The engine supplies the shapes: the models are its ModelConfig records, and once it is live
the SmolLM2 entry is the loaded model's own config (a unit test checks the two agree).
"""
from __future__ import annotations

import statistics
import time

import panel as pn

from widgets.common import EngineGate, esc, example, html_pane, label_html, modelled, register
from widgets.modelled.hardware import GPUS, MODELS
from widgets.common.text import clamp
from widgets.common.theme import stylesheets
from widgets.data_flow.diagram import DataFlowDiagram, diagram_data, fmt_time
from widgets.data_flow.recorded import beside
from widgets.data_flow.traffic import decode_step_flow

NAME = "data-flow"
WIDGET_MODELS = ["SmolLM2-135M", "Llama-3-8B", "Llama-3-70B"]
GPU_CHOICES = ["H100 SXM", "H200"]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
CONTEXTS = [128, 256, 512, 1024, 2048, 4096, 8192]        # the three models' context limit is 8,192
DEFAULTS = {"model": "Llama-3-8B", "gpu": "H100 SXM", "batch": 8, "context": 2048}


def compute(models: dict, model: str, gpu: str, batch: int, context: int, with_recorded: bool = True) -> dict:
    """Everything the widget shows for one choice: the diagram's data, the summary and the recorded list."""
    flow = decode_step_flow(models[model], GPUS[gpu], batch, context)
    figures = beside(batch, context, GPUS["H200"].bandwidth) if with_recorded else []
    return {"diagram": diagram_data(flow, figures), "summary": summary_html(flow),
            "beside": beside_html(figures)}


def summary_html(flow) -> str:
    hbm, worst = flow.level("hbm"), flow.bottleneck()
    if flow.gpus is None:
        fit = (f"<p class='w-note'>Weights and cache need {flow.resident_bytes * 8 / 1e9:.0f} GB: more than "
               f"8 GPUs hold. Lower the batch or the context.</p>")
    elif flow.gpus > 1:
        fit = (f"<p class='df-fit'>Too big for one {esc(flow.gpu.name)}: split over {flow.gpus} GPUs "
               f"(tensor parallelism, chapter 19), each holding {flow.resident_bytes / 1e9:.1f} GB and reading its "
               f"share; they exchange {flow.side[0].step_bytes / 1e6:.3g} MB over NVLink per step "
               f"({fmt_time(flow.allreduce_time_s)}).</p>")
    else:
        fit = ""
    return (f"<p class='df-summary'>HBM moves {hbm.total_bytes() / 1e9:.3g} GB in {fmt_time(hbm.time_s())}; "
            f"the arithmetic alone would take {fmt_time(flow.flops_time_s)} at the bf16 peak. "
            f"{'The arithmetic' if flow.compute_bound() else esc(worst.name)} sets the pace: about "
            f"{fmt_time(flow.step_time_s())} a step, "
            f"{flow.tokens_per_s():,.0f} tokens/s for the batch. {label_html(modelled('bytes ÷ bandwidth'))}</p>"
            + fit)


def beside_html(figures) -> str:
    items = []
    for f in figures:
        tag = label_html(f.label) if f.present else '<span class="w-label">not recorded yet</span>'
        detail = f" — {_code(f.detail)}" if f.detail else ""
        items.append(f"<li data-figure='{f.key}'><b>{esc(f.what)}:</b> {esc(f.value)}{detail} {tag}</li>")
    return ("<div class='df-beside'><p class='w-small'>Recorded on a real GPU, beside the model:</p><ul>"
            + "".join(items) + "</ul></div>")


def _code(text: str) -> str:
    """Escaped, with `backticked` commands as <code>."""
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(esc(text).split("`")))


@example(NAME)
def data_flow_example(llm) -> dict:
    """The loaded model's step at the default batch and context (modelled parts only: recorded files
    change when a GPU benchmark is rerun, and must not make this example stale)."""
    out = compute({"server": llm.config}, **dict(DEFAULTS, model="server"), with_recorded=False)
    return {"diagram": out["diagram"], "summary": out["summary"]}


class DataFlowWidget(pn.viewable.Viewer):
    def __init__(self, engine, model: str = DEFAULTS["model"], gpu: str = DEFAULTS["gpu"],
                 batch: int = DEFAULTS["batch"], context: int = DEFAULTS["context"], **params):
        super().__init__(**params)
        self._models = dict(MODELS)
        notes = []
        if model not in WIDGET_MODELS:
            notes.append(f"No model called “{model}”; showing {DEFAULTS['model']}.")
            model = DEFAULTS["model"]
        gpu = gpu if gpu in GPU_CHOICES else DEFAULTS["gpu"]
        batch, note_b = clamp(batch, BATCHES[0], BATCHES[-1], "Batch")
        context, note_c = clamp(context, CONTEXTS[0], CONTEXTS[-1], "Context")
        batch = min(BATCHES, key=lambda b: abs(b - batch))
        context = min(CONTEXTS, key=lambda c: abs(c - context))
        notes += [n for n in (note_b, note_c) if n]
        self._model = pn.widgets.Select(label="Model", options=WIDGET_MODELS, value=model, width=170,
                                        css_classes=["df-model"])
        self._gpu = pn.widgets.RadioButtonGroup(label="GPU", options=GPU_CHOICES, value=gpu,
                                                css_classes=["df-gpu"], align="end")
        self._batch = pn.widgets.DiscreteSlider(label="Batch", options=BATCHES, value=batch, width=170,
                                                css_classes=["df-batch"])
        self._context = pn.widgets.DiscreteSlider(label="Context (tokens)", options=CONTEXTS, value=context,
                                                  width=190, css_classes=["df-context"])
        first = compute(self._models, model, gpu, batch, context)
        self.diagram = DataFlowDiagram(data=first["diagram"], stylesheets=stylesheets(),
                                       sizing_mode="stretch_width", css_classes=["df-diagram"])
        self._caption = html_pane(self._caption_html(first), ["df-caption-pane"])
        self._summary = html_pane(first["summary"], ["df-summary-pane"])
        self._beside = html_pane(first["beside"], ["df-beside-pane"])
        self._notes = html_pane("".join(f"<p class='w-note'>{esc(n)}</p>" for n in notes), ["df-notes"])
        self.gate = EngineGate(engine, self._live, live_text="the models are the engine's ModelConfig records, "
                               "SmolLM2's the one loaded on {device}; every time shown is modelled")
        for w in (self._model, self._gpu, self._batch, self._context):
            w.param.watch(self._changed, "value")
        title = html_pane("<p class='w-title'><b>Where the bytes go · one decode step</b> — pick a model, a "
                          "batch and a context; hover, tap or Tab to a level for its numbers.</p>")
        controls = pn.FlexBox(self._model, self._gpu, self._batch, self._context, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, controls, self._notes, self._caption, self.diagram,
                                 self._summary, self._beside, sizing_mode="stretch_width",
                                 css_classes=["df-widget"])
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _live(self, llm) -> None:
        self._models["SmolLM2-135M"] = llm.config
        if self._model.value == "SmolLM2-135M":
            self._changed()

    def _changed(self, *_event) -> None:
        try:
            out = compute(self._models, self._model.value, self._gpu.value, int(self._batch.value),
                          int(self._context.value))
        except (KeyError, ValueError) as exc:          # a value the controls should never send
            self.gate.error(f"{type(exc).__name__}: {exc}")
            return
        self.diagram.data = out["diagram"]
        self._caption.object = self._caption_html(out)
        self._summary.object = out["summary"]
        self._beside.object = out["beside"]

    @staticmethod
    def _caption_html(out: dict) -> str:
        return f"<p class='df-caption' aria-live='polite'>{esc(out['diagram']['caption'])}</p>"


def bench(llm) -> dict:
    """Server milliseconds per update: the arithmetic, sentences and recorded look-ups of one choice."""
    models = dict(MODELS, **{"SmolLM2-135M": llm.config})
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for model in WIDGET_MODELS:
            compute(models, model, "H100 SXM", 64, 4096)
        runs.append((time.perf_counter() - t0) * 1e3 / len(WIDGET_MODELS))
    return {"data-flow update ms": round(statistics.median(runs), 3)}


@register(NAME)
def make_data_flow(engine, **args):
    return DataFlowWidget(engine, **args)
