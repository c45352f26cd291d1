"""`tokenizer` (chapter 2): type text and see how SmolLM2's and GPT-2's tokenizers cut it, side by side.

    [English prose] [Technical text] [Python code]        samples: chars/token differs by kind of text
    ┌ your text (≤ 20,000 characters) ───────────────┐    carried to later chapters in the URL
    └────────────────────────────────────────────────┘
    ☐ token ids   ☐ whitespace
    ┌ SmolLM2-135M-Instruct ─────┐ ┌ GPT-2 ────────────────────┐
    │ 7 tokens · 30 characters   │ │ 7 tokens · 30 characters  │   recomputed as you type (debounced)
    │ [What][␣is][␣the]…         │ │ [What][␣is][␣the]…        │   hover a piece: its id lights up
    │ 1780 314 260 …             │ │ 2061 318 262 …            │   (the id row, when shown)
    └────────────────────────────┘ └───────────────────────────┘

Both tokenizers are the engine's own (compute.py); view.py draws the columns. The page shows the
saved example until the model is loaded.
"""
from __future__ import annotations

import time

import panel as pn
import param

from widgets.common import (SENTENCE_SOURCE, Widget, cached, clip, esc, example, html_pane, measured,
                            register)
from widgets.common.timing import timed
from widgets.tokenizer.compute import (SAMPLES, TOKENIZERS, Tokenized, sample_stats, saved_tokenized, text_of,
                                       tokenize, tokenize_all)
from widgets.tokenizer.view import columns_html, length_html, render, samples_html

LIMIT = 20_000
DEFAULT_TEXT = "What is the capital of France?"


@example
def tokenizer_example(llm) -> dict:
    return {"text": DEFAULT_TEXT,
            "tokenizers": [{"name": tk.name, "vocab_size": tk.vocab_size, "ids": tk.ids,
                            "segments": [[s.start, s.end, s.ids, s.first] for s in tk.segments]}
                           for tk in tokenize_all(llm, DEFAULT_TEXT)],
            "samples": sample_stats(llm)}


@register
class TokenizerWidget(Widget):
    css = "tk"
    live_text = "tokenized by the engine on {device} as you type"
    text = param.String(default=DEFAULT_TEXT, doc="the text the chapter starts with (the example: the reader's sentence once chosen)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._text, note = clip(self.reader_sentence(self.text), LIMIT)
        self._results: list[Tokenized] = []
        self._label = ""
        self._box = pn.widgets.TextAreaInput(
            label="Your text", value=self._text, max_length=LIMIT, rows=3, auto_grow=True, max_rows=12,
            sizing_mode="stretch_width", css_classes=["tk-input", SENTENCE_SOURCE])
        self._buttons = [pn.widgets.Button(label=kind, css_classes=["tk-sample"], variant="outline",
                                           margin=(4, 6, 4, 0)) for kind in SAMPLES]
        for button in self._buttons:
            button.on_click(lambda e, kind=button.label: self._use_sample(kind))
        self._show_ids = pn.widgets.Checkbox(label="Show token ids", value=False, css_classes=["tk-show-ids"])
        self._show_ws = pn.widgets.Checkbox(label="Show whitespace", value=False, css_classes=["tk-show-ws"])
        self._show_ids.param.watch(self._toggle_ids, "value")
        self._show_ws.param.watch(lambda e: self._paint(), "value")
        self._length = html_pane("", ["tk-length-pane"])
        self._show_length(note)
        self._cols = html_pane("", ["tk-cols-pane"])
        self._samples = html_pane("", ["tk-samples-pane"])
        self._box.param.watch(self._on_text, ["value", "value_input"])
        toggles = pn.FlexBox(self._show_ids, self._show_ws, flex_wrap="wrap", sizing_mode="stretch_width")
        self.layout = pn.Column(
            self.title("<b>Tokenizer playground</b> — type or paste any text and see how two real tokenizers "
                       "cut it. Try a sample: the characters per token change with the kind of text."),
            self.gate.pane, pn.FlexBox(*self._buttons, flex_wrap="wrap"), self._box, self._length, self.notes,
            toggles, self._cols, self._samples, sizing_mode="stretch_width", css_classes=["tk-widget"])
        self._paint_saved()
        self.gate.start()

    def on_live(self, llm) -> None:
        self._update(samples=True)

    # -- events -----------------------------------------------------------------------------------
    def _on_text(self, *events) -> None:
        # "value" and "value_input" may change in one message: one update, from the newest value
        text, note = clip(events[-1].new or "", LIMIT)
        if text == self._text and self._results:
            return                     # value catching up with value_input on blur: nothing new
        self._text = text
        self._show_length(note)
        self._update(debounce_ms=15)      # tokenizing 2,000 characters takes ~11 ms: a longer wait only adds lag

    def _use_sample(self, kind: str) -> None:
        self._box.value = SAMPLES[kind]                  # fires _on_text

    def _toggle_ids(self, event) -> None:
        classes = [c for c in self._cols.css_classes if c != "show-ids"]
        self._cols.css_classes = classes + ["show-ids"] if event.new else classes

    def _update(self, debounce_ms: int = 0, samples: bool = False) -> None:
        if not self.gate.live:
            return
        llm, text = self.gate.llm, self._text

        def work(job):
            t0 = time.perf_counter()
            results = tokenize_all(llm, text)
            label = measured(llm.device_name, time.perf_counter() - t0)
            # The sample table is the same for every reader: counted once per server.
            stats = cached(llm, "tokenizer-samples", (), lambda: sample_stats(llm)) if samples else None
            return results, label, stats
        self.jobs.submit(work, self._show, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show(self, out) -> None:
        self._results, self._label, stats = out
        self._paint()
        if stats is not None:
            self._samples.object = samples_html(stats, measured(self.gate.llm.device_name))

    # -- painting ---------------------------------------------------------------------------------
    def _paint_saved(self) -> None:
        if self.example is None:
            self._cols.object = '<p class="placeholder">Tokens appear here once the model is loaded.</p>'
            return
        d = self.example.data
        self._results = [saved_tokenized(t, d["text"]) for t in d["tokenizers"]]
        self._label = self.example.label
        yours = ""
        if self._text != d["text"]:
            yours = (f'<p class="w-small">Showing the saved example “{esc(d["text"])}”; your text follows '
                     "once the model is loaded.</p>")
        self._paint(prefix=yours)
        self._samples.object = samples_html(d["samples"], self.example.label)

    def _paint(self, prefix: str = "") -> None:
        if self._results:
            self._cols.object = columns_html(self._results, self._show_ws.value, self._label, prefix)

    def _show_length(self, note: str | None) -> None:
        self._length.object = length_html(self._text, LIMIT)
        if not note and len(self._text) >= LIMIT:
            note = f"You have reached the limit of {LIMIT:,} characters."
        self.say(note)


def bench(llm, repeat: int = 30, chars: int = 2000) -> dict:
    """Server milliseconds per keystroke (median, p90 of ``repeat`` after two warm-up runs): ``chars``
    characters of prose, technical text and code through each tokenizer — encode, place the spans,
    render the HTML — and through both, as one update does (target: under 50 ms)."""
    text = text_of(chars)
    out: dict = {}
    for key in TOKENIZERS:
        tok = llm.tokenizers.get(key)
        timing = timed(lambda: render(tokenize(tok, text), key, False), repeat, warmup=2)
        out[tok.name] = {**timing, "runs": repeat, "characters": len(text), "tokens": len(tok.encode(text).ids)}
    both = timed(lambda: [render(tokenize(llm.tokenizers.get(k), text), k, False) for k in TOKENIZERS], repeat,
                 warmup=2)
    out["both, as one update"] = {**both, "runs": repeat, "characters": len(text)}
    return {"tokenizer": out}
