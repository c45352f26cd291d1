"""`attention-heatmap` (chapters 4 and 5): where each token of your sentence looks, head by head.

    ::: widget attention-heatmap {"setup": "single", "text": "The capital of France is"}      chapter 4
    ::: widget attention-heatmap {"setup": "heads", "text": "The keys that she left on the table are"}

    ┌ your sentence (≤ 64 tokens) ───────────────┐
    layer [──●──]  head [8 ▾]  (softmax weights | scaled scores)  query token [──●]
    ┌ heatmap: rows = queries, columns = keys ┐   hover a row: the sentence below is shaded by
    └ upper triangle empty: the causal mask   ┘   the weights that query gives each earlier token
    the sentence, shaded                           "heads" adds: the layer's 9 heads in 3 GQA groups
                                                   (tap one to show it above), and KV bytes per token

Numbers come from `llm.inspect`, one pass per sentence kept per server (`widgets.common.cache.inspection`);
changing layer, head, view or query only reslices it (compute.py), and view.py draws it.
"""
from __future__ import annotations

import panel as pn
import param

from widgets.attention_heatmap.compute import LayerView, layer_view
from widgets.attention_heatmap.view import HeadGrid, HeadHeatmap, cells, kv_table_html, strip_html, value_range
from widgets.common import (SENTENCE_SOURCE, Widget, clip, esc, example, html_pane, is_dark, label_html, measured,
                            register)
from widgets.common.cache import MAX_CHARS, MAX_TOKENS, forget, inspection
from widgets.common.timing import timed

SETUPS = {"single": {"text": "The capital of France is", "layer": 13, "head": 8},
          "heads": {"text": "The keys that she left on the table are", "layer": 13, "head": 8}}
MODES = {"softmax weights": "probs", "scaled scores q·k/√d": "scores"}


@example
def attention_example(llm) -> dict:
    """Each setup's default sentence and layer, all heads (the chapters' first paint)."""
    out = {}
    for name, s in SETUPS.items():
        ins = inspection(llm, s["text"])[0]
        out[name] = layer_view(ins, s["layer"]).to_json()
    return out


@register
class AttentionHeatmap(Widget):
    css = "ah"
    live_text = "attention of {model} on {device}, recomputed as you type"
    setup = param.Selector(default="single", objects=list(SETUPS), doc="one head (chapter 4), or every head (5)")
    text = param.String(default=None, allow_None=True, doc="the sentence (the example: the reader's own once chosen); the setup's if None")
    layer = param.Integer(default=None, allow_None=True, doc="the layer shown first; the setup's if None")
    head = param.Integer(default=None, allow_None=True, doc="the head shown first; the setup's if None")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        s, self._setup = SETUPS[self.setup], self.setup
        default = self.text if self.text is not None else s["text"]
        self._text, note = clip(self.reader_sentence(default), MAX_CHARS)
        self._view: LayerView | None = None
        self._label, self._row = "", 0
        dark = is_dark()
        self._box = pn.widgets.TextAreaInput(
            label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2, auto_grow=True, max_rows=5,
            sizing_mode="stretch_width", css_classes=["ah-input", SENTENCE_SOURCE])
        cfg = _default_config()
        # The slider names layers 1 to 30, as chapter 8's blocks and the forward-pass widget do (chapter 4 says
        # so); `layer` and LayerView.layer stay the engine's 0-based index, so the slider shows index + 1.
        self._layer = pn.widgets.IntSlider(label="Layer", start=1, end=cfg.num_layers, width=180,
                                           value=int(self.layer if self.layer is not None else s["layer"]) + 1,
                                           css_classes=["ah-layer"])
        self._head = pn.widgets.Select(label="Head", options=_head_options(cfg), width=150, css_classes=["ah-head"],
                                       value=int(self.head if self.head is not None else s["head"]))
        self._mode = pn.widgets.RadioButtonGroup(options=list(MODES), value="softmax weights",
                                                 css_classes=["ah-mode"], variant="outline", align="end")
        self._query = pn.widgets.IntSlider(label="Query token", start=0, end=1, value=0, css_classes=["ah-query"],
                                           width=180)
        self.say(note)
        self._heat = HeadHeatmap(dark)
        self._strip = html_pane("", ["ah-strip-pane"])
        self._caption = html_pane("", ["ah-caption"])
        self._heat.row_source.on_change("data", lambda attr, old, new: self._on_row(new["row"][0]))
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._layer.param.watch(lambda e: self._update(), "value")
        self._head.param.watch(lambda e: self._paint(), "value")
        self._mode.param.watch(lambda e: self._paint(), "value")
        self._query.param.watch(lambda e: self._on_row(e.new), "value")
        controls = pn.FlexBox(self._layer, self._head, self._query, self._mode, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")
        parts = [self._title(), self.gate.pane, self._box, self.notes, controls,
                 pn.pane.Bokeh(self._heat.figure, sizing_mode="stretch_width", max_width=600),
                 self._strip, self._caption]
        self._grid = self._kv = None
        if self._setup == "heads":
            self._grid = HeadGrid(dark, 9, 3, on_pick=lambda h: setattr(self._head, "value", h))
            self._kv = html_pane("", ["ah-kv"])
            parts += [html_pane('<p class="w-title ah-grid-title">All 9 heads of this layer, one row per '
                                "<b>GQA group</b>: the three query heads of a row search the same keys (one KV "
                                "head). Tap a head to show it above.</p>"),
                      self._grid.layout, self._kv]
        self.layout = pn.Column(*parts, sizing_mode="stretch_width", css_classes=["ah-widget"])
        self._paint_saved()
        self.gate.start()

    def _title(self):
        more = (" Below it, every head of the layer at once." if self._setup == "heads" else "")
        return self.title("<b>Attention heatmap</b> — each row is a token of your sentence looking back at the "
                          "tokens before it (columns). Hover a row, or move the query slider, to see where that "
                          f"token looks.{more}")

    # -- events ---------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:              # value and value_input may change in one message
        text, note = clip(events[-1].new or "", MAX_CHARS)
        if text == self._text and self._view is not None and self.gate.live:
            return
        self._text = text
        self.say(note)
        self._update(debounce_ms=40)       # one pass of ~60 tokens is 0.2-0.4 s here: a longer wait only adds lag

    def on_live(self, llm) -> None:
        cfg = llm.config                                # another model may have other shapes
        self._layer.end = cfg.num_layers
        if len(self._head.options) != cfg.num_heads:
            self._head.param.update(options=_head_options(cfg), value=min(self._head.value, cfg.num_heads - 1))
        self._update()

    def _update(self, debounce_ms: int = 0) -> None:
        if not self.gate.live:
            return
        llm, text, layer = self.gate.llm, self._text, self._layer.value - 1     # the slider counts from 1

        def work(job):
            ins, note, took = inspection(llm, text)
            job.check()
            return layer_view(ins, layer), note, measured(llm.device_name, took) + " (one forward pass)"
        self.jobs.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show(self, out) -> None:
        view, note, label = out
        new_sentence = self._view is None or view.tokens != self._view.tokens
        self._view, self._label = view, label
        self.say(note)
        self._layer.disabled = False
        if new_sentence:
            self._row = view.num_tokens - 1           # the last token: the one predicting what comes next
        self._paint()

    def _on_row(self, row: int) -> None:
        if self._view is None:
            return
        row = min(max(int(row), 0), self._view.num_tokens - 1)
        if row == self._row:
            return
        self._row = row
        self._query.value = row
        self._heat.show_row(row)
        self._strip.object = strip_html(self._view, self._head.value, row)

    # -- painting -------------------------------------------------------------------------------
    def _paint_saved(self) -> None:
        if self.example is None or self._setup not in self.example.data:
            self._strip.object = '<p class="placeholder">The heatmap appears once the model is loaded.</p>'
            return
        view = LayerView.from_json(self.example.data[self._setup])
        self._view, self._label, self._row = view, self.example.label, view.num_tokens - 1
        self._layer.value = view.layer + 1
        self._layer.disabled = True                     # the saved example holds one layer
        yours = "" if "".join(view.tokens) == self._text else (
            f'Showing the saved example “{esc("".join(view.tokens))}”; your sentence follows once the model '
            "is loaded. ")
        self._paint(prefix=yours)

    def _paint(self, prefix: str = "") -> None:
        """Redraw from ``self._view``; ``prefix`` is already-escaped HTML for the caption."""
        view = self._view
        if view is None:
            return
        heads = view.probs.shape[0]
        head, mode = min(self._head.value, heads - 1), MODES[self._mode.value]
        T = view.num_tokens
        self._row = min(self._row, T - 1)
        self._query.param.update(end=max(T - 1, 1), value=self._row, disabled=T < 2)
        low, high = value_range(view, head, mode)
        self._heat.show(view.tokens, cells(view, head, mode), low, high, mode, self._row)
        self._strip.object = strip_html(view, head, self._row)
        what = ("softmax weights: each row sums to 1" if mode == "probs" else
                "scaled scores q·k/√d before the softmax (colour scale from the lowest to the highest shown)")
        self._caption.object = (f'<p class="w-small">{prefix}Layer {view.layer + 1}, head {head} (reads KV '
                                f"head {head // view.kv_group}), {T} tokens: {what}. The empty upper triangle "
                                f"is the causal mask. {label_html(self._label)}</p>")
        if self._grid is not None:
            self._grid.show(view.tokens, [cells(view, h, "probs") for h in range(heads)], head)
            self._kv.object = kv_table_html(self.gate.llm.config if self.gate.live else _default_config(), T)


def _head_options(cfg) -> dict[str, int]:
    group = cfg.num_heads // cfg.num_kv_heads
    return {f"{h} (KV head {h // group})": h for h in range(cfg.num_heads)}


def _default_config():
    from engine import ModelConfig
    return ModelConfig()          # before the model is loaded: the embedded model's shapes


def bench(llm, repeats: int = 7) -> dict:
    """Server milliseconds per update (median and 90th percentile): a new 64-token sentence (one
    inspect pass, the layer's data, the heatmap, the 9 small multiples and the sentence strip), another
    layer on the same sentence (the pass is kept), and another head, view or query row."""
    words = "the quick brown fox jumps over the lazy dog while seven curious cats watch".split()
    text = " ".join(words[i % len(words)] for i in range(80))
    heat, grid = HeadHeatmap(False), HeadGrid(False, llm.config.num_heads, 3, on_pick=lambda h: None)

    def paint(view, head, mode, row):
        heat.show(view.tokens, cells(view, head, mode), *value_range(view, head, mode), mode, row)
        grid.show(view.tokens, [cells(view, h, "probs") for h in range(view.probs.shape[0])], head)
        strip_html(view, head, row)

    def new_sentence():
        forget(llm)
        view = layer_view(inspection(llm, text)[0], 13)
        paint(view, 8, "probs", view.num_tokens - 1)
        return view

    view = new_sentence()
    assert view.num_tokens == MAX_TOKENS
    return {"attention_heatmap": {
        "new_sentence_64_tokens": timed(new_sentence, repeats),
        "new_layer": timed(lambda: paint(layer_view(inspection(llm, text)[0], 3), 8, "probs", 20), repeats),
        "new_head_or_view": timed(lambda: heat.show(view.tokens, cells(view, 4, "scores"),
                                                     *value_range(view, 4, "scores"), "scores", 30), repeats),
        "new_query_row": timed(lambda: strip_html(view, 8, 17), repeats),
        "device": llm.device_name, "target_ms": 300}}

