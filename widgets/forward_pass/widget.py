"""`forward-pass` (chapters 8 and 9): follow one token of your sentence through SmolLM2.

    view "block" (chapter 8)                       view "model" (chapter 9)
    [x][RMSNorm][attention][+][RMSNorm][MLP][+]     [emb][1][2] … [30]        ← → step, click to jump
    stage: shape [n, 576], formula, what changed    after block l: the top next tokens (logit lens)
    the token's 576 numbers at this stage           p(final prediction) after each layer
    ‖stream‖ after each layer (all 30)              ‖stream‖ after each layer; the lens table

Everything comes from one `llm.inspect(text)` (widgets/forward_trace.py): the block's stages are
rebuilt from what it recorded with the model's own layers, and the logit lens applies the model's
final RMSNorm and LM head to the stream after each layer; after the last layer that is exactly the
model's prediction. The page shows the saved example until the model is loaded.
"""
from __future__ import annotations

import time

import panel as pn

from widgets.common import (SENTENCE_SOURCE, EngineGate, JobRunner, clip, esc, example, html_pane, is_dark,
                            label_html, load_example, measured, reader_sentence, register, show_token)
from widgets.common.stepper import Stepper
from widgets.common.text import clamp
from widgets.forward_figures import (answer_data, answer_figure, norms_data, norms_figure, strip_data,
                                     strip_figure)
from widgets.forward_trace import STAGE_TITLES, lens_data, residual_norms, stages_data

MAX_CHARS, MAX_TOKENS = 400, 64
DEFAULT_TEXT = "The capital of France is"
DEFAULT_BLOCK = 1
STAGE_CHIPS = ["x", "1 RMSNorm", "2 attention", "3 add", "4 RMSNorm", "5 MLP", "6 add"]   # chapter 8's steps


def pass_data(llm, text: str, ins, block: int, token: int) -> dict:
    """Everything the page paints, JSON-able (the saved example has this form)."""
    return {"text": text, "tokens": ins.tokens, "token_ids": ins.token_ids, "block": block,
            "token": token, "norms": residual_norms(ins), "stages": stages_data(llm, ins, block - 1, token),
            "lens": lens_data(llm, ins, token)}


@example("forward-pass")
def forward_pass_example(llm) -> dict:
    ins = llm.inspect(DEFAULT_TEXT, MAX_TOKENS)
    return pass_data(llm, DEFAULT_TEXT, ins, DEFAULT_BLOCK, len(ins.token_ids) - 1)


class ForwardPassWidget(pn.viewable.Viewer):
    def __init__(self, engine, view: str = "block", text: str = DEFAULT_TEXT, block: int = DEFAULT_BLOCK, **params):
        super().__init__(**params)
        if view not in ("block", "model"):
            raise ValueError(f"view must be 'block' or 'model', not {view!r}")
        self._view = view
        self._dark = dark = is_dark()
        self._saved = load_example("forward-pass")
        self._data = self._saved.data if self._saved else None
        self._label = self._saved.label if self._saved else ""
        self._ins = None                                   # this session's Inspection, once live
        self._text, note = clip(reader_sentence(text), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Your sentence", value=self._text, max_length=MAX_CHARS, rows=2,
                                             sizing_mode="stretch_width", css_classes=["fp-input", SENTENCE_SOURCE])
        self._notes = html_pane(self._notes_html([note]), ["fp-notes"])
        self._token = pn.widgets.Select(label="Follow token", options={}, disabled=True, width=220,
                                        css_classes=["fp-token"])
        block, _ = clamp(block, 1, 30, "Block")            # a directive's number, clamped
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
        self.gate = EngineGate(engine, self._live, example=self._saved,
                               live_text="computed by {model} on {device} as you change the sentence")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="forward-pass")
        self._box.param.watch(self._on_text, ["value", "value_input"])
        self._painting = False                             # True while the page sets a control itself
        self._token.param.watch(lambda e: self._recompute(), "value")
        self._block.param.watch(lambda e: self._recompute(), "value_throttled")
        self._stepper.param.watch(lambda e: self._paint_step(), "value")
        self._layout = pn.Column(*self._sections(), sizing_mode="stretch_width", css_classes=["fp-widget"])
        self._paint()
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.on_session_destroyed(lambda _ctx: setattr(self, "_ins", None))   # free the tensors
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _sections(self) -> list:
        def bokeh(fig, cls: str):
            fig.css_classes = [cls]               # on the figure itself: a Bokeh pane drops its own classes
            return pn.pane.Bokeh(fig, sizing_mode="stretch_width")
        if self._view == "block":
            title = ("<b>Live demo · one block, step by step</b> — pick a token and a block, then walk through "
                     "the block with ← → (or click a step). Between steps the shape stays [n, 576].")
            controls = pn.FlexBox(self._token, self._block, flex_wrap="wrap", sizing_mode="stretch_width")
            return [html_pane(f'<p class="w-title">{title}</p>'), self.gate.pane, self._box, self._notes, controls,
                    self._stepper, self._detail, bokeh(self._strip_fig, "fp-strip"),
                    html_pane('<p class="w-small">The followed token’s stream after every layer: each block '
                              "adds to it (dashed line: the block you are looking at).</p>"), bokeh(self._norms_fig, "fp-norms")]
        title = ("<b>Live demo · the whole model, layer by layer</b> — step through the 30 blocks with ← → and "
                 "read, after each one, what the model would predict if it stopped there (the logit lens).")
        return [html_pane(f'<p class="w-title">{title}</p>'), self.gate.pane, self._box, self._notes, self._token,
                self._stepper, self._detail, bokeh(self._answer_fig, "fp-answer"), self._table,
                html_pane('<p class="w-small">Length of every token’s stream after each layer.</p>'),
                bokeh(self._norms_fig, "fp-norms")]

    # -- events and jobs ------------------------------------------------------------------------
    def _live(self, _llm) -> None:
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
            self._notes.object = self._notes_html([note])
        if not self.gate.live:
            return
        if not self._text.strip():
            self._notes.object = self._notes_html(["Type a sentence first: there is nothing to follow."])
            return
        self._submit_text(debounce_ms=250)

    def _submit_text(self, debounce_ms: int = 0) -> None:
        llm, text, block = self.gate.llm, self._text, self._block.value

        def work(job):
            t0 = time.perf_counter()
            n_all = len(llm.tokenizer.encode(text).ids)
            ins = llm.inspect(text, MAX_TOKENS)
            job.check()
            data = pass_data(llm, text, ins, block, len(ins.token_ids) - 1)
            return ins, data, n_all, time.perf_counter() - t0
        self._runner.submit(work, self._show_new_text, on_error=self.gate.error, debounce_ms=debounce_ms)

    def _show_new_text(self, out) -> None:
        self._ins, data, n_all, took = out
        note = (f"Only the first {MAX_TOKENS} tokens are used (your text has {n_all}; the limit is {MAX_TOKENS})."
                if n_all > MAX_TOKENS else None)
        self._notes.object = self._notes_html([note])
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
        self._runner.submit(work, lambda out: self._show(*out), on_error=self.gate.error)

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
            self._detail.object = self._stage_html(d, stage, step)
        else:
            self._norms_mark.location = self._answer_mark.location = step
            self._detail.object = self._layer_html(d, step)
            self._table.object = self._table_html(d, step)

    def _yours(self) -> str:
        d = self._data
        if self.gate.live or self._text == d["text"]:
            return ""
        return (f'<p class="w-small">Showing the saved example “{esc(d["text"])}”; your sentence follows once '
                "the model is loaded.</p>")

    def _stage_html(self, d: dict, stage: dict, step: int) -> str:
        tok = esc(show_token(d["tokens"][d["token"]]))
        shapes = "".join(f'<li><code>{esc(name)}</code> <span class="fp-shape">[{", ".join(map(str, shape))}]</span></li>'
                         for name, shape in stage["shapes"])
        facts = "".join(f"<tr><th scope=\"row\">{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in stage["facts"])
        lens = d["lens"][d["block"]]["top"][0]
        after = ""
        if stage["key"] == "add2":
            after = (f'<p class="w-small">Read through the final norm and LM head now, the stream would predict '
                     f'“{esc(show_token(lens[1]))}” ({lens[2]:.0%}); chapter 9 follows this through all 30 blocks.</p>')
        return (f'{self._yours()}<div class="fp-stage" data-stage="{esc(stage["key"])}">'
                f'<p class="fp-head"><b>{"Input" if step == 0 else f"Step {step} of 6"} · {esc(stage["title"])}</b> in block {d["block"]}, token '
                f'{d["token"]} “{tok}” · <code>{esc(stage["formula"])}</code></p>'
                f'<div class="fp-cols"><ul class="fp-shapes" aria-label="tensor shapes">{shapes}</ul>'
                f'<table class="fp-facts">{facts}</table></div>{after}'
                f'<p class="w-small">Bars: this token’s {len(stage["vector"])} numbers after this stage · '
                f'{label_html(self._label)}</p></div>')

    def _layer_html(self, d: dict, layer: int) -> str:
        row = d["lens"][layer]
        bars = "".join(f'<li><span class="fp-tok">{esc(show_token(text))}</span><meter min="0" max="1" '
                       f'value="{p:.4f}"></meter><span class="fp-p">{p:.1%}</span></li>'
                       for _i, text, p in row["top"])
        where = "the embedding (before any block)" if layer == 0 else f"block {layer}"
        last = len(d["lens"]) - 1
        final = (" This is the model’s real prediction: the logits the sampler draws from (chapter 10)."
                 if layer == last else f" The final prediction “{esc(show_token(d['lens'][last]['top'][0][1]))}” "
                 f"has {row['answer_p']:.1%} here (rank {row['answer_rank']}).")
        return (f'{self._yours()}<div class="fp-layer" data-layer="{layer}"><p class="fp-head"><b>After {where}</b>: '
                f"what token {d['token']} “{esc(show_token(d['tokens'][d['token']]))}” would predict next.{final}</p>"
                f'<ol class="fp-top">{bars}</ol><p class="w-small">Final RMSNorm + LM head applied to the stream '
                f"[n, 576] → [n, 49152], softmax · {label_html(self._label)}</p></div>")

    @staticmethod
    def _table_html(d: dict, current: int) -> str:
        rows = []
        for r in reversed(d["lens"]):                  # the prediction on top: the stream flows upward
            cells = "".join(f"<td>{esc(show_token(text))} <span class=\"w-small\">{p:.0%}</span></td>"
                            for _i, text, p in r["top"][:3])
            on = ' class="on"' if r["layer"] == current else ""
            name = "emb" if r["layer"] == 0 else str(r["layer"])
            rows.append(f'<tr{on}><th scope="row">{name}</th>{cells}</tr>')
        return ('<div class="fp-lens-box"><table class="fp-lens-table"><caption>Logit lens: the top 3 next tokens '
                "after each layer; the top row is the model’s prediction</caption><thead><tr><th>layer</th>"
                f'<th>1st</th><th>2nd</th><th>3rd</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    @staticmethod
    def _notes_html(notes) -> str:
        return "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)


def bench(llm) -> dict:
    """Server ms per update: a new sentence (inspect + one block's stages + the logit lens), a new token
    (stages + lens on the kept inspection), a new block (its stages alone)."""
    from widgets.common.timing import median_ms
    short, long = DEFAULT_TEXT, " ".join(["The capital of France is Paris, and the capital of Italy is Rome."] * 5)
    ins = llm.inspect(short, MAX_TOKENS)
    n = len(ins.token_ids)
    n_long = min(len(llm.tokenizer.encode(long).ids), MAX_TOKENS)
    return {f"new sentence ({n} tokens)": median_ms(lambda: pass_data(llm, short, llm.inspect(short, MAX_TOKENS), 1, n - 1)),
            f"new sentence ({n_long} tokens)": median_ms(lambda: pass_data(llm, long, llm.inspect(long, MAX_TOKENS), 1, n_long - 1), repeat=3),
            "new token (stages + logit lens)": median_ms(lambda: pass_data(llm, short, ins, 15, 1)),
            "new block (stages)": median_ms(lambda: stages_data(llm, ins, 14, n - 1))}   # a step: no server work


@register("forward-pass")
def make_forward_pass(engine, **args) -> ForwardPassWidget:
    """Factory for ``::: widget forward-pass {"view": "block" | "model"}``."""
    return ForwardPassWidget(engine, **args)
