"""`sampler` (chapter 10): the model's real next-token distribution, reshaped by the engine's sampler.

    prompt ─► the model's logits for the next token (inspect, last row)            once per prompt
    temperature · top-k · top-p · min-p ─► sampling_probs (the engine's function)   on every slider move
    draws N with a seed ─► counts beside the probabilities
    [Write both continuations] ─► greedy and sampled replies from the shared engine (llm.generate)

The chart shows the 20 most likely tokens and one bar for all the others: the hollow bar is the
model's own probability (temperature 1, no filter), the solid bar what the engine samples from with
these settings, the diamond the share of the N draws that landed there. compute.py does the
arithmetic, view.py draws it; this module holds the controls and the jobs.

Two kinds of work run side by side: the shaping (quick, on every slider move; the status line follows
it) and the continuations (the shared engine writing, seconds; the button reads Stop meanwhile). A
slider moved while the engine writes must not stop the writing, so the shaping has a job runner of its
own beside the widget's ``self.jobs``.
"""
from __future__ import annotations

import time

import panel as pn
import param

from engine import SamplingParams
from widgets.common import SENTENCE_SOURCE, JobRunner, Widget, clip, example, html_pane, is_dark, measured
from widgets.common import register
from widgets.common.text import clamp
from widgets.sampler.compute import CONTINUE_TOKENS, continuations, next_token_logits, shape, shaped_dict, written
from widgets.sampler.view import (WRITING, chart_data, chart_rows, conts_html, kept_colour, sampler_figure,
                                  saved_note_html, summary_html)

MAX_CHARS, MAX_TOKENS = 400, 128
DEFAULT_PROMPT = "The capital of France is"
PRESETS = {"one obvious next word": "The capital of France is", "many good next words": "My favourite colour is",
           "a story": "Once upon a time, there was a"}
DRAWS = [100, 1000, 10000]
MAX_SEED = 2**31 - 1
EMPTY = "Type a prompt first: the model needs something to continue."


@example
def sampler_example(llm) -> dict:
    _ids, logits = next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)
    params = SamplingParams(seed=0)
    return {"prompt": DEFAULT_PROMPT, "settings": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
            "shaped": shaped_dict(shape(llm, logits, params, 1000, 0)),
            "continuations": written(llm, DEFAULT_PROMPT, params, CONTINUE_TOKENS)}


@register
class SamplerWidget(Widget):
    css = "smp"
    live_text = "the next-token distribution of {model} on {device}, shaped as you move a slider"
    own_thread = True                    # self.jobs writes the continuations: a generation, seconds long
    prompt = param.String(default=DEFAULT_PROMPT, doc="the prompt (the example: the reader's sentence once chosen)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        dark = is_dark()
        self._kept_colour = kept_colour(dark)
        self._logits, self._logits_for = None, None   # the next-token logits, and the prompt they are for
        self._prompt, note = clip(self.reader_sentence(self.prompt), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Prompt", value=self._prompt, max_length=MAX_CHARS, rows=2,
                                             sizing_mode="stretch_width", css_classes=["smp-input", SENTENCE_SOURCE])
        presets = [pn.widgets.Button(label=k, variant="outline", css_classes=["smp-preset"], margin=(4, 6, 4, 0))
                   for k in PRESETS]
        for b in presets:
            b.on_click(lambda e, k=b.label: setattr(self._box, "value", PRESETS[k]))
        slider = dict(width=210, margin=(4, 14, 4, 0))
        self._temp = pn.widgets.FloatSlider(label="Temperature (0 = greedy)", start=0, end=2, step=0.05, value=1.0,
                                            css_classes=["smp-temp"], **slider)
        self._top_k = pn.widgets.IntSlider(label="Top-k (0 = off)", start=0, end=50, value=0, css_classes=["smp-topk"], **slider)
        self._top_p = pn.widgets.FloatSlider(label="Top-p (1 = off)", start=0.05, end=1, step=0.05, value=1.0,
                                             css_classes=["smp-topp"], **slider)
        self._min_p = pn.widgets.FloatSlider(label="Min-p (0 = off)", start=0, end=0.5, step=0.01, value=0.0,
                                             css_classes=["smp-minp"], **slider)
        self._n = pn.widgets.Select(label="Draws", options=DRAWS, value=1000, width=100, css_classes=["smp-n"])
        self._seed = pn.widgets.IntInput(label="Seed", value=0, width=120, css_classes=["smp-seed"])
        self.say(note)
        self._summary = html_pane("", ["smp-summary"])
        self._fig, self._src = sampler_figure(dark)
        self._go = self.run_button("Write both continuations", self._continue, css_classes=["smp-go"], width=230)
        self._conts = html_pane("", ["smp-conts"])
        self._shaper = JobRunner(on_busy=self.gate.set_busy, name="sampler-shape")
        self.on_page_close(self._shaper.close)
        self._box.param.watch(self._on_prompt, ["value", "value_input"])
        for w in (self._temp, self._top_k, self._top_p, self._min_p, self._n, self._seed):
            w.param.watch(lambda e: self._reshape(), "value")
        title = self.title("<b>Live demo · the sampler</b> — SmolLM2’s real next-token distribution for your "
                           "prompt. Move a slider: the engine’s own sampler reshapes it, and N seeded draws land "
                           "beside it. Hollow bar: the model’s probability; solid bar: what the sampler draws "
                           "from; ◆: the share of the draws.")
        knobs = pn.FlexBox(self._temp, self._top_k, self._top_p, self._min_p, self._n, self._seed, flex_wrap="wrap",
                           sizing_mode="stretch_width")
        self.layout = pn.Column(title, self.gate.pane, pn.FlexBox(*presets, flex_wrap="wrap"), self._box, self.notes,
                                knobs, self._summary, pn.pane.Bokeh(self._fig, sizing_mode="stretch_width"),
                                self._go, self._conts, sizing_mode="stretch_width", css_classes=["smp-widget"])
        self._paint_saved()
        self.on_page_close(lambda: setattr(self, "_logits", None))
        self.gate.start()

    def on_busy(self, busy: bool) -> None:
        """The continuations' job: the button reads Stop while the engine writes; the status line stays
        with the shaping (``self._shaper``)."""
        super().on_busy(busy)
        self.gate.set_busy(self._shaper.busy)
        if busy:
            self._conts.object = WRITING

    def _paint(self, s: dict, settings: dict, label: str) -> None:
        self._fig.y_range.factors = chart_rows(s)[::-1]          # most likely at the top
        self._src.data = chart_data(s, self._kept_colour)
        self._summary.object = summary_html(s, settings, label)

    # -- events and jobs ------------------------------------------------------------------------
    def _settings(self) -> tuple[SamplingParams, int, int, list[str]]:
        notes = []
        seed, note = clamp(self._seed.value, 0, MAX_SEED, "Seed")
        notes.append(note)
        n = self._n.value if self._n.value in DRAWS else 1000
        params = SamplingParams(temperature=float(min(max(self._temp.value, 0.0), 2.0)),
                                top_k=int(min(max(self._top_k.value, 0), 50)),
                                top_p=float(min(max(self._top_p.value, 0.05), 1.0)),
                                min_p=float(min(max(self._min_p.value, 0.0), 0.5)), seed=seed, max_tokens=CONTINUE_TOKENS)
        return params, n, seed, notes

    def on_live(self, _llm) -> None:
        self._go.disabled = False
        self._on_prompt()

    def _on_prompt(self, *events) -> None:
        """Keystrokes (value_input) and set values (value); both may arrive in one message."""
        if events:
            prompt, note = clip(events[-1].new or "", MAX_CHARS)
            if prompt == self._prompt and self._logits_for == prompt:
                return
            self._prompt = prompt
            self.say(note)
        if not self.gate.live or self.read_prompt(self._prompt, MAX_CHARS, empty=EMPTY) is None:
            return
        prompt = self._prompt
        stale = self.example is None or prompt != self.example.data["prompt"]
        if events or stale:             # the continuations shown belong to another prompt
            self.jobs.cancel()
            self._conts.object = ""
        self._submit(debounce_ms=250)

    def _reshape(self) -> None:
        if self._logits is not None and self._prompt.strip():
            self._submit(debounce_ms=30)

    def _submit(self, debounce_ms: int) -> None:
        """One job per change: the prompt's logits unless the kept ones are this prompt's (a slider move
        while a new prompt's job waits supersedes that job, so it must do its work too), then the shaping."""
        llm, prompt = self.gate.llm, self._prompt
        logits = self._logits if self._logits_for == prompt else None
        settings = self._settings()               # read here, on the session's loop, not in the worker
        self._shaper.submit(lambda job: self._work(job, llm, prompt, logits, settings), self._show,
                            on_error=self.gate.error, debounce_ms=debounce_ms)

    @staticmethod
    def _work(job, llm, prompt: str, logits, settings):
        """Off the event loop: the prompt's logits (when it changed), then the engine's shaping and the draws."""
        params, n, seed, notes = settings
        t0 = time.perf_counter()
        if logits is None:
            n_all = len(llm.tokenizer.encode(prompt).ids)
            if n_all > MAX_TOKENS:
                raise ValueError(f"the prompt has {n_all} tokens; the limit is {MAX_TOKENS}")
            logits = next_token_logits(llm, prompt, MAX_TOKENS)[1]
            job.check()
        s = shaped_dict(shape(llm, logits, params, n, seed))
        settings = {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
                    "min_p": params.min_p}
        return logits, prompt, s, settings, notes, measured(llm.device_name, time.perf_counter() - t0)

    def _show(self, out) -> None:
        self._logits, self._logits_for, s, settings, notes, label = out
        self.say(*notes)
        self._paint(s, settings, label)

    def _continue(self) -> None:
        """Write pressed (a press while the engine writes is Stop: the base's ``stop()``)."""
        if not self.gate.live or not self._prompt.strip():
            return
        llm, prompt = self.gate.llm, self._prompt
        params, _n, _seed, _notes = self._settings()

        def work(job):
            t0 = time.perf_counter()
            out = written(llm, prompt, params, CONTINUE_TOKENS)
            return out, params, measured(llm.device_name, time.perf_counter() - t0)
        self.jobs.submit(work, lambda out: setattr(self._conts, "object", conts_html(*out)), on_error=self.gate.error)

    def _paint_saved(self) -> None:
        if self.example is None:
            self._summary.object = '<p class="placeholder">The distribution appears once the model is loaded.</p>'
            return
        d = self.example.data
        self._paint(d["shaped"], d["settings"], self.example.label)
        if self._prompt != d["prompt"]:
            self._summary.object = saved_note_html(d["prompt"]) + self._summary.object
        self._conts.object = conts_html(d["continuations"], SamplingParams(seed=0), self.example.label)


def bench(llm) -> dict:
    """Server ms per update: a new prompt (logits + shaping + draws), a slider move (the engine's shaping,
    the filter blame, N draws), and the two continuations (the shared engine writing 2 × 24 tokens)."""
    from widgets.common.cache import forget
    from widgets.common.timing import median_ms
    _ids, logits = next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)
    filtered = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, seed=0)

    def new_prompt():                   # a prompt no reader has inspected yet: the pass itself is timed
        forget(llm)
        return shape(llm, next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)[1], SamplingParams(), 1000, 0)
    return {"new prompt": median_ms(new_prompt),
            "slider move (1,000 draws)": median_ms(lambda: shape(llm, logits, filtered, 1000, 0)),
            "slider move (10,000 draws)": median_ms(lambda: shape(llm, logits, filtered, 10_000, 0)),
            f"both continuations ({CONTINUE_TOKENS} tokens each)": median_ms(
                lambda: continuations(llm, DEFAULT_PROMPT, filtered, CONTINUE_TOKENS), repeat=2, warmup=0)}
