"""`mlp-activations` (chapter 7): inside one MLP, for one token of your sentence.

    [Numbers] [Code]   ┌ your sentence ┐   layer [──●──]   token [␣is ▾]   neuron [730 ▾]
    576 → gate 1536 → SiLU → × up 1536 → 1536 products → down → 576        (the token's own numbers)
    ┌ every neuron: gate (x) vs up (y), ┐  ┌ the 12 strongest neurons: gate, SiLU(gate), up, product ┐
    └ colour = product; tap one         ┘  └ (a table)                                              ┘
    ┌ the chosen neuron on every token of the sentence (bars) ┐  "fires most on ‘␣is’ 2.96, …"

Numbers: `llm.inspect`'s gate, up and product of every neuron (one pass per sentence, shared with the
other widgets that look inside the model through `widgets.common.cache.inspection`; compute.py);
view.py draws them.
"""
from __future__ import annotations

import numpy as np
import panel as pn
import param

from engine import ModelConfig
from widgets.common import SENTENCE_SOURCE, Widget, clip, example, html_pane, is_dark, measured
from widgets.common import register, show_token
from widgets.common.cache import MAX_CHARS, forget
from widgets.common.timing import timed
from widgets.mlp_activations.compute import compute
from widgets.mlp_activations.view import MLPPlots, caption_html, flow_html, profile_html, table_html

DEFAULT = {"text": "The capital of France is", "layer": 20}
SAMPLES = {"Numbers": "In 1989, 3 of the 12 jurors voted 7 to 5.",
           "Code": "for i in range(10):\n    print(i * 2)"}


@example
def mlp_example(llm) -> dict:
    return compute(llm, DEFAULT["text"], DEFAULT["layer"], None, None)[0]


@register
class MLPActivations(Widget):
    css = "mlp"
    live_text = "MLP of {model} on {device}, recomputed as you type"
    text = param.String(default=None, allow_None=True, doc="the sentence (the example: the reader's own once chosen)")
    layer = param.Integer(default=None, allow_None=True, doc="the layer shown first")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._text, note = clip(self.reader_sentence(self.text or DEFAULT["text"]), MAX_CHARS)
        self._data: dict | None = None
        self._label = ""
        self._box = pn.widgets.TextAreaInput(label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2,
                                             auto_grow=True, max_rows=5, sizing_mode="stretch_width",
                                             css_classes=["mlp-input", SENTENCE_SOURCE])
        self._samples = [pn.widgets.Button(label=f"{k} sample", variant="outline", css_classes=["mlp-sample"],
                                           margin=(4, 6, 4, 0)) for k in SAMPLES]
        for button, kind in zip(self._samples, SAMPLES):
            button.on_click(lambda e, kind=kind: setattr(self._box, "value", SAMPLES[kind]))
        first = self.layer if self.layer is not None else DEFAULT["layer"]
        # Layers are named 1 to 30 on screen, as chapter 8's blocks are; `layer`, DEFAULT and compute() keep the
        # engine's 0-based index, so the slider shows index + 1.
        self._layer = pn.widgets.IntSlider(label="Layer", start=1, end=ModelConfig().num_layers, value=int(first) + 1,
                                           width=180, css_classes=["mlp-layer"])
        self._token = pn.widgets.Select(label="Token", options={}, width=170, css_classes=["mlp-token"])
        self._neuron = pn.widgets.Select(label="Neuron", options={}, width=190, css_classes=["mlp-neuron"])
        self.say(note)
        self._flow = html_pane("", ["mlp-flow"])
        self._table = html_pane("", ["mlp-table-pane"])
        self._profile_text = html_pane("", ["mlp-profile"])
        self._caption = html_pane("", ["mlp-caption"])
        self._plots = MLPPlots(is_dark(), on_neuron=self._pick_neuron, on_token=self._pick_token)
        self._quiet = False                              # set while the widget itself moves its selectors
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._layer.param.watch(lambda e: self._update(keep_neuron=False), "value")
        self._token.param.watch(lambda e: self._quiet or self._update(keep_neuron=False), "value")
        self._neuron.param.watch(lambda e: self._quiet or self._update(), "value")
        title = self.title("<b>Inside one MLP</b> — pick a layer and a token of your sentence: see its 1,536 gate "
                           "and up values, which neurons the SiLU gate lets through, and, for one neuron, which "
                           "tokens of the sentence drive it hardest. Tap a dot or a bar to choose.")
        controls = pn.FlexBox(self._layer, self._token, self._neuron, flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")
        self.layout = pn.Column(title, self.gate.pane, pn.FlexBox(*self._samples, flex_wrap="wrap"), self._box,
                                self.notes, controls, self._flow, self._plots.scatter_pane, self._table,
                                self._plots.profile_pane, self._profile_text, self._caption,
                                sizing_mode="stretch_width", css_classes=["mlp-widget"])
        if self.example is not None:
            self._show((self.example.data, None, self.example.label))
        self.gate.start()

    def on_live(self, llm) -> None:
        self._update()

    # -- events ---------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:              # value and value_input may change in one message
        text, note = clip(events[-1].new or "", MAX_CHARS)
        if text == self._text and self._data is not None and self.gate.live:
            return
        self._text = text
        self.say(note)
        self._update(debounce_ms=80, new_text=True)

    def _pick_neuron(self, neuron: int) -> None:
        self._set_options(self._neuron, self._neuron_options(self._data, extra=neuron), neuron)
        self._update()

    def _pick_token(self, token: int) -> None:
        self._set_options(self._token, self._token.options, token)
        self._update(keep_neuron=False)

    def _update(self, debounce_ms: int = 0, keep_neuron: bool = True, new_text: bool = False) -> None:
        if not self.gate.live:
            return
        llm, text, layer = self.gate.llm, self._text, self._layer.value - 1     # the slider counts from 1
        token = None if new_text else self._token.value
        neuron = self._neuron.value if keep_neuron and not new_text else None

        def work(job):
            d, note, took = compute(llm, text, layer, token, neuron)
            return d, note, measured(llm.device_name, took) + " (one forward pass)"
        self.jobs.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    # -- painting -------------------------------------------------------------------------------
    def _show(self, out) -> None:
        d, note, label = out
        self._data, self._label = d, label
        if note is not None or self.gate.live:
            self.say(note)
        self._set_options(self._token, {f"{i}: {show_token(t)}": i for i, t in enumerate(d["tokens"])}, d["token"])
        self._set_options(self._neuron, self._neuron_options(d), d["neuron"])
        for control in (self._layer, self._token, self._neuron):
            control.disabled = not self.gate.live        # the saved example holds one layer and token
        gate, silu, up, prod = (np.asarray(d[k]) for k in ("gate", "silu", "up", "product"))
        self._flow.object = flow_html(d, gate, prod)
        self._plots.show(d, gate, up, prod)
        self._table.object = table_html(d, gate, silu, up, prod)
        self._profile_text.object = profile_html(d)
        self._caption.object = caption_html(label)

    def _set_options(self, select, options: dict, value) -> None:
        self._quiet = True
        try:
            select.param.update(options=options, value=value)
        finally:
            self._quiet = False

    @staticmethod
    def _neuron_options(d, extra: int | None = None) -> dict:
        chosen = d["neuron"] if extra is None else extra
        ids = list(d["top"]) + ([chosen] if chosen not in d["top"] else [])
        prod = d["product"]
        return {f"{n} (product {prod[n]:+.2f})": n for n in ids}


def bench(llm, repeats: int = 7) -> dict:
    """Server milliseconds per update (median, p90): a new 64-token sentence (forward pass, SwiGLU
    path, neuron profile, both figures), and another layer, token or neuron on the same sentence."""
    text = " ".join(f"item {i} costs {3 * i + 1} euros," for i in range(16))
    plots = MLPPlots(False, on_neuron=lambda n: None, on_token=lambda t: None)

    def update(layer, token, neuron, fresh):
        if fresh:
            forget(llm)
        d = compute(llm, text, layer, token, neuron)[0]
        plots.show(d, *(np.asarray(d[k]) for k in ("gate", "up", "product")))

    return {"mlp_activations": {
        "new_sentence_64_tokens": timed(lambda: update(20, None, None, True), repeats),
        "new_layer_token_or_neuron": timed(lambda: update(7, 30, 100, False), repeats),
        "device": llm.device_name}}
