"""`attention-heatmap` (chapters 4 and 5): where each token of your sentence looks, head by head.

    ::: widget attention-heatmap {"setup": "single", "text": "The capital of France is"}      chapter 4
    ::: widget attention-heatmap {"setup": "heads", "text": "The keys that she left on the table are"}

    ┌ your sentence (≤ 64 tokens) ───────────────┐
    layer [──●──]  head [8 ▾]  (softmax weights | scaled scores)  query token [──●]
    ┌ heatmap: rows = queries, columns = keys ┐   hover a row: the sentence below is shaded by
    └ upper triangle empty: the causal mask   ┘   the weights that query gives each earlier token
    the sentence, shaded                           "heads" adds: the layer's 9 heads in 3 GQA groups
                                                   (tap one to show it above), and KV bytes per token

Numbers come from `llm.inspect` (widgets/inspection.py), one pass per sentence; changing layer,
head, view or query only reslices it.
"""
from __future__ import annotations

import panel as pn

from widgets.attention_data import LayerView, cells, kv_bytes_rows, layer_view, strip_html, value_range
from widgets.attention_plots import HeadGrid, HeadHeatmap
from widgets.common import (SENTENCE_SOURCE, EngineGate, JobRunner, clip, esc, example, html_pane, is_dark,
                            label_html, load_example, measured, modelled, reader_sentence, register)
from widgets.common.timing import timed
from widgets.inspection import MAX_CHARS, MAX_TOKENS, forget, inspection

SETUPS = {"single": {"text": "The capital of France is", "layer": 13, "head": 8},
          "heads": {"text": "The keys that she left on the table are", "layer": 13, "head": 8}}
MODES = {"softmax weights": "probs", "scaled scores q·k/√d": "scores"}


@example("attention-heatmap")
def attention_example(llm) -> dict:
    """Each setup's default sentence and layer, all heads (the chapters' first paint)."""
    out = {}
    for name, s in SETUPS.items():
        ins = inspection(llm, s["text"])[0]
        out[name] = layer_view(ins, s["layer"]).to_json()
    return out


class AttentionHeatmap(pn.viewable.Viewer):
    def __init__(self, engine, setup: str = "single", text: str | None = None, layer: int | None = None,
                 head: int | None = None, **params):
        super().__init__(**params)
        if setup not in SETUPS:
            raise ValueError(f"setup must be one of {sorted(SETUPS)}, not {setup!r}")
        s, self._setup = SETUPS[setup], setup
        self._saved = load_example("attention-heatmap")
        default = text if text is not None else s["text"]
        self._text, note = clip(reader_sentence(default), MAX_CHARS)
        self._view: LayerView | None = None
        self._label, self._row = "", 0
        dark = is_dark()
        self._box = pn.widgets.TextAreaInput(
            label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2, auto_grow=True, max_rows=5,
            sizing_mode="stretch_width", css_classes=["ah-input", SENTENCE_SOURCE])
        cfg = _default_config()
        self._layer = pn.widgets.IntSlider(label="Layer", start=0, end=cfg.num_layers - 1, width=180,
                                           value=int(layer if layer is not None else s["layer"]), css_classes=["ah-layer"])
        self._head = pn.widgets.Select(label="Head", options=_head_options(cfg), width=150, css_classes=["ah-head"],
                                       value=int(head if head is not None else s["head"]))
        self._mode = pn.widgets.RadioButtonGroup(options=list(MODES), value="softmax weights",
                                                 css_classes=["ah-mode"], variant="outline", align="end")
        self._query = pn.widgets.IntSlider(label="Query token", start=0, end=1, value=0, css_classes=["ah-query"],
                                           width=180)
        self._notes = html_pane(self._notes_html([note]), ["ah-notes"])
        self._heat = HeadHeatmap(dark)
        self._strip = html_pane("", ["ah-strip-pane"])
        self._caption = html_pane("", ["ah-caption"])
        self.gate = EngineGate(engine, self._live, example=self._saved,
                               live_text="attention of {model} on {device}, recomputed as you type")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="attention")
        self._heat.row_source.on_change("data", lambda attr, old, new: self._on_row(new["row"][0]))
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._layer.param.watch(lambda e: self._update(), "value")
        self._head.param.watch(lambda e: self._paint(), "value")
        self._mode.param.watch(lambda e: self._paint(), "value")
        self._query.param.watch(lambda e: self._on_row(e.new), "value")
        controls = pn.FlexBox(self._layer, self._head, self._query, self._mode, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")
        parts = [self._title(), self.gate.pane, self._box, self._notes, controls,
                 pn.pane.Bokeh(self._heat.figure, sizing_mode="stretch_width", max_width=600),
                 self._strip, self._caption]
        self._grid = self._kv = None
        if setup == "heads":
            self._grid = HeadGrid(dark, 9, 3, on_pick=lambda h: setattr(self._head, "value", h))
            self._kv = html_pane("", ["ah-kv"])
            parts += [html_pane('<p class="w-title ah-grid-title">All 9 heads of this layer, one row per '
                                "<b>GQA group</b>: the three query heads of a row search the same keys (one KV "
                                "head). Tap a head to show it above.</p>"),
                      self._grid.layout, self._kv]
        self._layout = pn.Column(*parts, sizing_mode="stretch_width", css_classes=["ah-widget"])
        self._paint_saved()
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _title(self):
        more = (" Below it, every head of the layer at once." if self._setup == "heads" else "")
        return html_pane('<p class="w-title"><b>Attention heatmap</b> — each row is a token of your sentence '
                         "looking back at the tokens before it (columns). Hover a row, or move the query "
                         f"slider, to see where that token looks.{more}</p>")

    # -- events ---------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:              # value and value_input may change in one message
        text, note = clip(events[-1].new or "", MAX_CHARS)
        if text == self._text and self._view is not None and self.gate.live:
            return
        self._text = text
        self._notes.object = self._notes_html([note])
        self._update(debounce_ms=80)

    def _live(self, llm) -> None:
        cfg = llm.config                                # another model may have other shapes
        self._layer.end = cfg.num_layers - 1
        if len(self._head.options) != cfg.num_heads:
            self._head.param.update(options=_head_options(cfg), value=min(self._head.value, cfg.num_heads - 1))
        self._update()

    def _update(self, debounce_ms: int = 0) -> None:
        if not self.gate.live:
            return
        llm, text, layer = self.gate.llm, self._text, self._layer.value

        def work(job):
            ins, note, took = inspection(llm, text)
            job.check()
            return layer_view(ins, layer), note, measured(llm.device_name, took) + " (one forward pass)"
        self._runner.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show(self, out) -> None:
        view, note, label = out
        new_sentence = self._view is None or view.tokens != self._view.tokens
        self._view, self._label = view, label
        self._notes.object = self._notes_html([note])
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
        if self._saved is None or self._setup not in self._saved.data:
            self._strip.object = '<p class="placeholder">The heatmap appears once the model is loaded.</p>'
            return
        view = LayerView.from_json(self._saved.data[self._setup])
        self._view, self._label, self._row = view, self._saved.label, view.num_tokens - 1
        self._layer.value = view.layer
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
        self._caption.object = (f'<p class="w-small">{prefix}Layer {view.layer}, head {head} (reads KV '
                                f"head {head // view.kv_group}), {T} tokens: {what}. The empty upper triangle "
                                f"is the causal mask. {label_html(self._label)}</p>")
        if self._grid is not None:
            self._grid.show(view.tokens, [cells(view, h, "probs") for h in range(heads)], head)
            self._kv.object = self._kv_html(T)

    def _kv_html(self, num_tokens: int) -> str:
        cfg = self.gate.llm.config if self.gate.live else _default_config()
        rows = kv_bytes_rows(cfg, num_tokens)
        top = max(r["per_token"] for r in rows)
        body = "".join(
            f'<tr class="{"ah-this" if r["model"] else ""}"><th scope="row">{r["name"]}'
            f'{" · this model" if r["model"] else ""}<br><span class="w-small">{r["kv_heads"]} KV '
            f'head{"s" if r["kv_heads"] > 1 else ""}</span></th>'
            f'<td><meter min="0" max="{top}" value="{r["per_token"]}"></meter> <b>{r["per_token"]:,} B</b>'
            f'<br><span class="w-small">{r["formula"]}</span></td><td>{r["sentence"] / 1024:,.1f} KiB</td></tr>'
            for r in rows)
        return (f'<table class="ah-kv-table"><caption>Keys and values stored per token with {esc(cfg.name)}\'s '
                f"shapes in bf16 (2 × layers × KV heads × head dim × 2 bytes): one KV head per query head "
                f"(MHA), its real {cfg.num_kv_heads} (GQA), or one for all (MQA) · "
                f"{label_html(modelled('arithmetic from the model config'))}</caption><thead><tr><th>scheme</th>"
                f"<th>per token</th><th>your {num_tokens} tokens</th></tr></thead><tbody>{body}</tbody></table>")

    @staticmethod
    def _notes_html(notes) -> str:
        return "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)


def _head_options(cfg) -> dict[str, int]:
    group = cfg.num_heads // cfg.num_kv_heads
    return {f"{h} (KV head {h // group})": h for h in range(cfg.num_heads)}


def _default_config():
    from engine import ModelConfig
    return ModelConfig()          # before the model is loaded: the embedded model's shapes


@register("attention-heatmap")
def make_attention_heatmap(engine, **args) -> AttentionHeatmap:
    """Factory for ``::: widget attention-heatmap {"setup": "single" | "heads", "text": ...}``."""
    return AttentionHeatmap(engine, **args)


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
        forget()
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

