"""`mlp-activations` (chapter 7): inside one MLP, for one token of your sentence.

    [Numbers] [Code]   ┌ your sentence ┐   layer [──●──]   token [␣is ▾]   neuron [730 ▾]
    576 → gate 1536 → SiLU → × up 1536 → 1536 products → down → 576        (the token's own numbers)
    ┌ every neuron: gate (x) vs up (y), ┐  ┌ the 12 strongest neurons: gate, SiLU(gate), up, product ┐
    └ colour = product; tap one         ┘  └ (a table)                                              ┘
    ┌ the chosen neuron on every token of the sentence (bars) ┐  "fires most on ‘␣is’ 2.96, …"

Numbers: `llm.inspect` (one pass per sentence, shared with the attention widget through
widgets/inspection.py); gate and up recovered with the layer's weights (widgets/mlp_data.py).
"""
from __future__ import annotations

import numpy as np
import panel as pn

from engine import ModelConfig
from widgets.common import (SENTENCE_SOURCE, EngineGate, JobRunner, clip, esc, example, html_pane, is_dark,
                            label_html, load_example, measured, reader_sentence, register, show_token)
from widgets.common.timing import timed
from widgets.inspection import MAX_CHARS, forget, inspection
from widgets.mlp_data import neuron_profile, path_json, strongest_tokens, swiglu_path
from widgets.mlp_plots import MLPPlots

DEFAULT = {"text": "The capital of France is", "layer": 20}
SAMPLES = {"Numbers": "In 1989, 3 of the 12 jurors voted 7 to 5.",
           "Code": "for i in range(10):\n    print(i * 2)"}


def compute(llm, text: str, layer: int, token: int | None, neuron: int | None) -> tuple[dict, str | None, float]:
    """(the widget's data, the token-limit note, seconds of the forward pass). ``token`` None = the
    last token; ``neuron`` None = the strongest neuron of the chosen token."""
    ins, note, took = inspection(llm, text)
    T = len(ins.tokens)
    token = T - 1 if token is None else min(max(int(token), 0), T - 1)
    path = swiglu_path(llm, ins, layer, token)
    neuron = path.top(1)[0] if neuron is None else int(neuron)
    d = path_json(path, list(ins.tokens), neuron_profile(ins, layer, neuron), neuron)
    d["silu"] = path.silu.tolist()
    return d, note, took


@example("mlp-activations")
def mlp_example(llm) -> dict:
    return compute(llm, DEFAULT["text"], DEFAULT["layer"], None, None)[0]


class MLPActivations(pn.viewable.Viewer):
    def __init__(self, engine, text: str | None = None, layer: int | None = None, **params):
        super().__init__(**params)
        self._saved = load_example("mlp-activations")
        self._text, note = clip(reader_sentence(text or DEFAULT["text"]), MAX_CHARS)
        self._data: dict | None = None
        self._label = ""
        self._box = pn.widgets.TextAreaInput(label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2,
                                             auto_grow=True, max_rows=5, sizing_mode="stretch_width",
                                             css_classes=["mlp-input", SENTENCE_SOURCE])
        self._samples = [pn.widgets.Button(label=f"{k} sample", variant="outline", css_classes=["mlp-sample"],
                                           margin=(4, 6, 4, 0)) for k in SAMPLES]
        for button, kind in zip(self._samples, SAMPLES):
            button.on_click(lambda e, kind=kind: setattr(self._box, "value", SAMPLES[kind]))
        self._layer = pn.widgets.IntSlider(label="Layer", start=0, end=ModelConfig().num_layers - 1, value=int(layer if layer is not None
                                           else DEFAULT["layer"]), width=180, css_classes=["mlp-layer"])
        self._token = pn.widgets.Select(label="Token", options={}, width=170, css_classes=["mlp-token"])
        self._neuron = pn.widgets.Select(label="Neuron", options={}, width=190, css_classes=["mlp-neuron"])
        self._notes = html_pane(self._notes_html([note]), ["mlp-notes"])
        self._flow = html_pane("", ["mlp-flow"])
        self._table = html_pane("", ["mlp-table-pane"])
        self._profile_text = html_pane("", ["mlp-profile"])
        self._caption = html_pane("", ["mlp-caption"])
        self._plots = MLPPlots(is_dark(), on_neuron=self._pick_neuron, on_token=self._pick_token)
        self.gate = EngineGate(engine, lambda llm: self._update(), example=self._saved,
                               live_text="MLP of {model} on {device}, recomputed as you type")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="mlp")
        self._quiet = False                              # set while the widget itself moves its selectors
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._layer.param.watch(lambda e: self._update(keep_neuron=False), "value")
        self._token.param.watch(lambda e: self._quiet or self._update(keep_neuron=False), "value")
        self._neuron.param.watch(lambda e: self._quiet or self._update(), "value")
        title = html_pane('<p class="w-title"><b>Inside one MLP</b> — pick a layer and a token of your sentence: '
                          "see its 1,536 gate and up values, which neurons the SiLU gate lets through, and, for "
                          "one neuron, which tokens of the sentence drive it hardest. Tap a dot or a bar to "
                          "choose.</p>")
        controls = pn.FlexBox(self._layer, self._token, self._neuron, flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, pn.FlexBox(*self._samples, flex_wrap="wrap"), self._box,
                                 self._notes, controls, self._flow, self._plots.scatter_pane, self._table,
                                 self._plots.profile_pane, self._profile_text, self._caption,
                                 sizing_mode="stretch_width", css_classes=["mlp-widget"])
        if self._saved is not None:
            self._show((self._saved.data, None, self._saved.label))
        self.gate.start()

    def __panel__(self):
        return self._layout

    # -- events ---------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:              # value and value_input may change in one message
        text, note = clip(events[-1].new or "", MAX_CHARS)
        if text == self._text and self._data is not None and self.gate.live:
            return
        self._text = text
        self._notes.object = self._notes_html([note])
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
        llm, text, layer = self.gate.llm, self._text, self._layer.value
        token = None if new_text else self._token.value
        neuron = self._neuron.value if keep_neuron and not new_text else None

        def work(job):
            d, note, took = compute(llm, text, layer, token, neuron)
            return d, note, measured(llm.device_name, took) + " (one forward pass)"
        self._runner.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    # -- painting -------------------------------------------------------------------------------
    def _show(self, out) -> None:
        d, note, label = out
        self._data, self._label = d, label
        if note is not None or self.gate.live:
            self._notes.object = self._notes_html([note])
        self._set_options(self._token, {f"{i}: {show_token(t)}": i for i, t in enumerate(d["tokens"])}, d["token"])
        self._set_options(self._neuron, self._neuron_options(d), d["neuron"])
        for control in (self._layer, self._token, self._neuron):
            control.disabled = not self.gate.live        # the saved example holds one layer and token
        tok = esc(show_token(d["tokens"][d["token"]]))
        gate, silu, up, prod = (np.asarray(d[k]) for k in ("gate", "silu", "up", "product"))
        opened = int((gate > 0).sum())
        self._flow.object = (
            f'<p class="mlp-flow-line">‘<b>{tok}</b>’ in layer {d["layer"]}: 576 numbers → RMSNorm → '
            f'<span class="mlp-g">W<sub>gate</sub></span> and <span class="mlp-u">W<sub>up</sub></span> (576 → 1,536 '
            f"each) → SiLU(gate) × up = 1,536 products → W<sub>down</sub> (1,536 → 576) → added to the token's "
            f"hidden state.</p><p class=\"w-small\">The gate is open (gate &gt; 0) for {opened:,} of the {len(gate):,} "
            f"features; SiLU squashes the other {len(gate) - opened:,} towards 0. {int((np.abs(prod) < 0.01).sum()):,} "
            "products are within 0.01 of 0.</p>")
        self._plots.show(d, gate, up, prod)
        self._table.object = self._table_html(d, gate, silu, up, prod)
        profile = np.asarray(d["profile"])
        best = ", ".join(f"‘{esc(show_token(d['tokens'][i]))}’ {profile[i]:+.2f}" for i in strongest_tokens(profile))
        self._profile_text.object = (f'<p class="mlp-profile-line">Neuron <b>{d["neuron"]}</b> of layer '
                                     f'{d["layer"]} responds most strongly to {best}.</p>')
        self._caption.object = (f'<p class="w-small">Products are <code>inspect</code>\'s MLP activations; gate '
                                f"and up are recovered from them with the layer's weights. {label_html(label)}</p>")

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

    @staticmethod
    def _table_html(d, gate, silu, up, prod) -> str:
        rows = "".join(
            f'<tr class="{"mlp-chosen" if n == d["neuron"] else ""}"><th scope="row">{n}</th>'
            f"<td>{gate[n]:+.2f}</td><td>{silu[n]:+.2f}</td><td>{up[n]:+.2f}</td><td><b>{prod[n]:+.2f}</b></td></tr>"
            for n in d["top"])
        return (f'<table class="mlp-table"><caption>The {len(d["top"])} neurons with the largest |product| for '
                "this token</caption><thead><tr><th>neuron</th><th>gate</th><th>SiLU(gate)</th><th>up</th>"
                f"<th>product</th></tr></thead><tbody>{rows}</tbody></table>")

    @staticmethod
    def _notes_html(notes) -> str:
        return "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)


@register("mlp-activations")
def make_mlp_activations(engine, **args) -> MLPActivations:
    """Factory for ``::: widget mlp-activations {"text": ..., "layer": ...}``."""
    return MLPActivations(engine, **args)


def bench(llm, repeats: int = 7) -> dict:
    """Server milliseconds per update (median, p90): a new 64-token sentence (forward pass, SwiGLU
    path, neuron profile, both figures), and another layer, token or neuron on the same sentence."""
    text = " ".join(f"item {i} costs {3 * i + 1} euros," for i in range(16))
    plots = MLPPlots(False, on_neuron=lambda n: None, on_token=lambda t: None)

    def update(layer, token, neuron, fresh):
        if fresh:
            forget()
        d = compute(llm, text, layer, token, neuron)[0]
        plots.show(d, *(np.asarray(d[k]) for k in ("gate", "up", "product")))

    return {"mlp_activations": {
        "new_sentence_64_tokens": timed(lambda: update(20, None, None, True), repeats),
        "new_layer_token_or_neuron": timed(lambda: update(7, 30, 100, False), repeats),
        "device": llm.device_name}}
