"""`forward-pass` (chapters 8 and 9): follow one token of your sentence through SmolLM2.

    view "block" (chapter 8)                       view "model" (chapter 9)
    [x][RMSNorm][attention][+][RMSNorm][MLP][+]     [emb][1][2] … [30]        ← → step, click to jump
    stage: shape [n, 576], formula, what changed    after block l: the top next tokens (logit lens)
    the token's 576 numbers at this stage           p(final prediction) after each layer
    ‖stream‖ after each layer (all 30)              ‖stream‖ after each layer; the lens table

Everything comes from one `llm.inspect(text)`, kept per server (compute.py): the block's stages are
what it recorded as the model ran each block, and the logit lens applies the model's final RMSNorm
and LM head to the stream after each layer; after the last layer that is exactly the model's
prediction. view.py draws it. The page shows the saved example until the model is loaded.
"""
from __future__ import annotations

import time

import panel as pn
import param

from widgets.common import SENTENCE_SOURCE, Widget, clip, example, html_pane, is_dark, measured
from widgets.common import register, show_token
from widgets.common.cache import inspection
from widgets.common.stepper import Stepper
from widgets.common.text import clamp
from widgets.forward_pass.compute import STAGE_TITLES, pass_data, stages_data
from widgets.forward_pass.view import (answer_data, answer_figure, layer_html, lens_table_html, norms_data,
                                       norms_figure, saved_note_html, stage_html, strip_data, strip_figure)

MAX_CHARS, MAX_TOKENS = 400, 64
DEFAULT_TEXT = "The capital of France is"
DEFAULT_BLOCK = 1
STAGE_CHIPS = ["x", "1 RMSNorm", "2 attention", "3 add", "4 RMSNorm", "5 MLP", "6 add"]   # chapter 8's steps
EMPTY = "Type a sentence first: there is nothing to follow."


@example
def forward_pass_example(llm) -> dict:
    ins = inspection(llm, DEFAULT_TEXT, MAX_TOKENS)[0]
    return pass_data(llm, DEFAULT_TEXT, ins, DEFAULT_BLOCK, len(ins.token_ids) - 1)


@register
class ForwardPassWidget(Widget):
    css = "fp"
    live_text = "computed by {model} on {device} as you change the sentence"
    view = param.Selector(default="block", objects=["block", "model"], doc="one block (chapter 8), or all (9)")
    text = param.String(default=DEFAULT_TEXT, doc="the sentence (the example: the reader's own once chosen)")
    block = param.Integer(default=DEFAULT_BLOCK, doc="the block shown first (clamped to 1–30)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._view = view = self.view
        self._dark = dark = is_dark()
        self._data = self.example.data if self.example else None
        self._label = self.example.label if self.example else ""
        self._ins = None                                   # the Inspection this page follows, once live
        self._text, note = clip(self.reader_sentence(self.text), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2,
                                             sizing_mode="stretch_width", css_classes=["fp-input", SENTENCE_SOURCE])
        self.say(note)
        self._token = pn.widgets.Select(label="Follow token", options={}, disabled=True, width=220,
                                        css_classes=["fp-token"])
        block, _ = clamp(self.block, 1, 30, "Block")       # a directive's number, clamped
        self._block = pn.widgets.IntSlider(label="Block", start=1, end=30, value=block, disabled=True,
                                           width=260, css_classes=["fp-block"])
        if view == "block":
            steps = STAGE_CHIPS
            tips = ["the stream entering the block"] + [f"step {i}: {t}" for i, t in enumerate(STAGE_TITLES[1:], 1)]
            label = "Steps of one block (← → to step)"
        else:
            steps = ["emb"] + [str(i) for i in range(1, 31)]
            tips = ["the embedding, before any block"] + [f"after block {i}" for i in range(1, 31)]
            label = "Layers of the model (← → to step)"
        self._stepper = Stepper(steps=steps, tips=tips, label=label, value=0 if view == "block" else 30,
                                css_classes=["fp-stepper"])
        self._detail = html_pane("", ["fp-detail"])
        self._norms_fig, self._norms_src, self._norms_mark = norms_figure(dark)
        self._strip_fig, self._strip_src = strip_figure(dark)
        self._answer_fig, self._answer_src, self._answer_mark = answer_figure(dark)
        self._table = html_pane("", ["fp-lens"])
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._painting = False                             # True while the page sets a control itself
        self._token.param.watch(lambda e: self._recompute(), "value")
        self._block.param.watch(lambda e: self._recompute(), "value_throttled")
        self._stepper.param.watch(lambda e: self._paint_step(), "value")
        self.layout = pn.Column(*self._sections(), sizing_mode="stretch_width", css_classes=["fp-widget"])
        self._paint()
        self.on_page_close(lambda: setattr(self, "_ins", None))   # the page's hold on the tensors
        self.gate.start()

    def _sections(self) -> list:
        def bokeh(fig, cls: str):
            fig.css_classes = [cls]               # on the figure itself: a Bokeh pane drops its own classes
            return pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        if self._view == "block":
            title = ("<b>Live demo · one block, step by step</b> — pick a token and a block, then walk through "
                     "the block with ← → (or click a step). Between steps the shape stays [n, 576].")
            controls = pn.FlexBox(self._token, self._block, flex_wrap="wrap", sizing_mode="stretch_width")
            return [self.title(title), self.gate.pane, self._box, self.notes, controls,
                    self._stepper, self._detail, bokeh(self._strip_fig, "fp-strip"),
                    html_pane('<p class="w-small">The followed token’s stream after every layer: each block '
                              "adds to it (dashed line: the block you are looking at).</p>"), bokeh(self._norms_fig, "fp-norms")]
        title = ("<b>Live demo · the whole model, layer by layer</b> — step through the 30 blocks with ← → and "
                 "read, after each one, what the model would predict if it stopped there (the logit lens).")
        return [self.title(title), self.gate.pane, self._box, self.notes, self._token,
                self._stepper, self._detail, bokeh(self._answer_fig, "fp-answer"), self._table,
                html_pane('<p class="w-small">Length of every token’s stream after each layer.</p>'),
                bokeh(self._norms_fig, "fp-norms")]

    # -- events and jobs ------------------------------------------------------------------------
    def on_live(self, _llm) -> None:
        self._token.disabled = False
        self._block.disabled = self._view != "block"
        self._on_text()

    def _on_text(self, *events) -> None:
        """Keystrokes (value_input) and set values (value); both may arrive in one message."""
        if events:
            text, note = clip(events[-1].new or "", MAX_CHARS)
            if text == self._text and self._ins is not None:
                return
            self._text = text
            self.say(note)
        if not self.gate.live or self.read_prompt(self._text, MAX_CHARS, empty=EMPTY) is None:
            return
        self._submit_text(debounce_ms=250)

    def _submit_text(self, debounce_ms: int = 0) -> None:
        llm, text, block = self.gate.llm, self._text, self._block.value

        def work(job):
            t0 = time.perf_counter()
            n_all = len(llm.tokenizer.encode(text).ids)
            ins = inspection(llm, text, MAX_TOKENS)[0]
            job.check()
            data = pass_data(llm, text, ins, block, len(ins.token_ids) - 1)
            return ins, data, n_all, time.perf_counter() - t0
        self.jobs.submit(work, self._show_new_text, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show_new_text(self, out) -> None:
        self._ins, data, n_all, took = out
        note = (f"Only the first {MAX_TOKENS} tokens are used (your text has {n_all}; the limit is {MAX_TOKENS})."
                if n_all > MAX_TOKENS else None)
        self.say(note)
        self._show(data, took)

    def _recompute(self) -> None:
        """A new token or block: same inspection, new stages and lens (a few ms to ~0.1 s)."""
        if self._ins is None or self._token.value is None or self._painting:
            return
        if self._data["text"] != self._text:      # a new sentence is still waiting: this job replaces
            self._submit_text()                   # its job, so it must do that work (with the new block)
            return
        llm, ins, text = self.gate.llm, self._ins, self._data["text"]
        token, _ = clamp(self._token.value, 0, len(ins.token_ids) - 1, "Token")
        block, _ = clamp(self._block.value, 1, llm.config.num_layers, "Block")

        def work(job):
            t0 = time.perf_counter()
            return pass_data(llm, text, ins, block, token), time.perf_counter() - t0
        self.jobs.submit(work, lambda out: self._show(*out), on_error=self.gate.error)

    def _show(self, data: dict, took: float) -> None:
        self._data, self._label = data, measured(self.gate.llm.device_name, took)
        self._paint()

    # -- painting -------------------------------------------------------------------------------
    def _paint(self) -> None:
        d = self._data
        if d is None:
            self._detail.object = '<p class="placeholder">The stages appear here once the model is loaded.</p>'
            return
        options = {f"{i}: {show_token(t)}" + (" (last)" if i == len(d["tokens"]) - 1 else ""): i
                   for i, t in enumerate(d["tokens"])}
        self._painting = True
        try:
            if self._token.options != options or self._token.value != d["token"]:
                self._token.param.update(options=options, value=d["token"])
            if self._block.value != d["block"]:
                self._block.value = d["block"]
        finally:
            self._painting = False
        every, one = norms_data(d["tokens"], d["norms"], d["token"])
        self._norms_src["all"].data, self._norms_src["one"].data = every, one
        self._answer_src.data = answer_data(d["lens"])
        self._paint_step()

    def _paint_step(self) -> None:
        d = self._data
        if d is None:
            return
        step = self._stepper.value
        if self._view == "block":
            stage = d["stages"][min(step, len(d["stages"]) - 1)]
            self._strip_src.data = strip_data(stage["vector"], self._dark)
            self._norms_mark.location = d["block"]
            self._detail.object = self._yours() + stage_html(d, stage, step, self._label)
        else:
            self._norms_mark.location = self._answer_mark.location = step
            self._detail.object = self._yours() + layer_html(d, step, self._label)
            self._table.object = lens_table_html(d, step)

    def _yours(self) -> str:
        """Before the model is loaded, a reader's own sentence waits: say the example is another."""
        d = self._data
        return "" if self.gate.live or self._text == d["text"] else saved_note_html(d["text"])


def bench(llm) -> dict:
    """Server ms per update: a new sentence (inspect + one block's stages + the logit lens), a new token
    (stages + lens on the kept inspection), a new block (its stages alone)."""
    from widgets.common.cache import forget
    from widgets.common.timing import median_ms
    short, long = DEFAULT_TEXT, " ".join(["The capital of France is Paris, and the capital of Italy is Rome."] * 5)

    def new(text: str):                 # a sentence no reader has inspected yet: the pass itself is timed
        forget(llm)
        return inspection(llm, text, MAX_TOKENS)[0]
    ins = new(short)
    n = len(ins.token_ids)
    n_long = min(len(llm.tokenizer.encode(long).ids), MAX_TOKENS)
    return {f"new sentence ({n} tokens)": median_ms(lambda: pass_data(llm, short, new(short), 1, n - 1)),
            f"new sentence ({n_long} tokens)": median_ms(lambda: pass_data(llm, long, new(long), 1, n_long - 1), repeat=3),
            "new token (stages + logit lens)": median_ms(lambda: pass_data(llm, short, ins, 15, 1)),
            "new block (stages)": median_ms(lambda: stages_data(llm, ins, 14, n - 1))}   # a step: no server work
