"""`sampler` (chapter 10): the model's real next-token distribution, reshaped by the engine's sampler.

    prompt ─► the model's logits for the next token (inspect, last row)            once per prompt
    temperature · top-k · top-p · min-p ─► sampling_probs (the engine's function)   on every slider move
    draws N with a seed ─► counts beside the probabilities
    [Write both continuations] ─► greedy and sampled replies from the shared engine (llm.generate)

The chart shows the 20 most likely tokens and one bar for all the others: the hollow bar is the
model's own probability (temperature 1, no filter), the solid bar what the engine samples from with
these settings, the diamond the share of the N draws that landed there. widgets/next_token.py does
the arithmetic; this module only paints.
"""
from __future__ import annotations

import time

import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool

from engine import SamplingParams
from widgets.common import (PALETTE, SENTENCE_SOURCE, EngineGate, JobRunner, clip, esc, example, html_pane,
                            is_dark, label_html, load_example, measured, reader_sentence, register, show_token,
                            themed_figure)
from widgets.common.text import clamp
from widgets.common.theme import ink
from widgets.next_token import TOP, Shaped, continuations, next_token_logits, shape

MAX_CHARS, MAX_TOKENS, CONTINUE_TOKENS = 400, 128, 24
DEFAULT_PROMPT = "The capital of France is"
PRESETS = {"one obvious next word": "The capital of France is", "many good next words": "My favourite colour is",
           "a story": "Once upon a time, there was a"}
DRAWS = [100, 1000, 10000]
MAX_SEED = 2**31 - 1


def _shaped_dict(s: Shaped) -> dict:
    return {f: getattr(s, f) for f in Shaped.__slots__}


@example("sampler")
def sampler_example(llm) -> dict:
    _ids, logits = next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)
    params = SamplingParams(seed=0)
    conts = continuations(llm, DEFAULT_PROMPT, params, CONTINUE_TOKENS)
    return {"prompt": DEFAULT_PROMPT, "settings": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0},
            "shaped": _shaped_dict(shape(llm, logits, params, 1000, 0)),
            "continuations": {k: [[i, llm.tokenizer.decode([i])] for i in v] for k, v in conts.items()}}


class SamplerWidget(pn.viewable.Viewer):
    def __init__(self, engine, prompt: str = DEFAULT_PROMPT, **params):
        super().__init__(**params)
        dark = is_dark()
        self._kept_colour = PALETTE[5] if dark else PALETTE[0]   # the deep blue is too dim on a dark page
        self._saved = load_example("sampler")
        self._logits, self._logits_for = None, None   # the next-token logits, and the prompt they are for
        self._prompt, note = clip(reader_sentence(prompt), MAX_CHARS)
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
        self._notes = html_pane(self._notes_html([note]), ["smp-notes"])
        self._summary = html_pane("", ["smp-summary"])
        self._fig, self._src = self._figure(dark)
        self._go = pn.widgets.Button(label="Write both continuations", color="primary", disabled=True,
                                     css_classes=["smp-go"], width=230)
        self._go.on_click(lambda e: self._continue())
        self._conts = html_pane("", ["smp-conts"])
        self.gate = EngineGate(engine, self._live, example=self._saved,
                               live_text="the next-token distribution of {model} on {device}, shaped as you move a slider")
        self._runner = JobRunner(on_busy=self.gate.set_busy, name="sampler")
        self._writer = JobRunner(on_busy=self._writing, own_thread=True, name="sampler-continue")
        self._box.param.watch(self._on_prompt, ["value", "value_input"])
        for w in (self._temp, self._top_k, self._top_p, self._min_p, self._n, self._seed):
            w.param.watch(lambda e: self._reshape(), "value")
        title = html_pane('<p class="w-title"><b>Live demo · the sampler</b> — SmolLM2’s real next-token '
                          "distribution for your prompt. Move a slider: the engine’s own sampler reshapes it, and "
                          f"N seeded draws land beside it. Hollow bar: the model’s probability; solid bar: what the "
                          "sampler draws from; ◆: the share of the draws.</p>")
        knobs = pn.FlexBox(self._temp, self._top_k, self._top_p, self._min_p, self._n, self._seed, flex_wrap="wrap",
                           sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, pn.FlexBox(*presets, flex_wrap="wrap"), self._box, self._notes,
                                 knobs, self._summary, pn.pane.Bokeh(self._fig, sizing_mode="stretch_width"),
                                 self._go, self._conts, sizing_mode="stretch_width", css_classes=["smp-widget"])
        self._paint_saved()
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.on_session_destroyed(lambda _ctx: setattr(self, "_logits", None))
        self.gate.start()

    def __panel__(self):
        return self._layout

    # -- figure ---------------------------------------------------------------------------------
    @staticmethod
    def _figure(dark: bool):
        fig = themed_figure(dark=dark, height=520, y_range=FactorRange(), x_axis_label="probability",
                            min_border_left=10)
        src = ColumnDataSource(dict(label=[], model=[], shaped=[], drawn=[], count=[], n=[], token=[], id=[], logit=[],
                                    fate=[], color=[], reach=[], cut=[]))
        fig.hbar(y="label", right="model", height=0.8, source=src, fill_alpha=0, line_color=ink(dark)["muted"],
                 line_width=1.2)
        fig.hbar(y="label", right="shaped", height=0.55, source=src, color="color")
        fig.scatter(x="drawn", y="label", source=src, marker="diamond", size=11, color=PALETTE[1],
                    line_color=ink(dark)["text"], line_width=0.6)
        fig.text(x="reach", y="label", text="cut", source=src, text_font_size="11px", text_baseline="middle",
                 text_color=ink(dark)["muted"])          # "✗ top-k" beside a row the filters removed
        # One invisible bar per row, as long as the longest mark in it: hovering anywhere on a row's
        # marks shows that row's one tooltip (the three marks overlap, three tooltips would stack).
        hit = fig.hbar(y="label", right="reach", height=0.95, source=src, fill_alpha=0, line_alpha=0)
        fig.add_tools(HoverTool(renderers=[hit], tooltips=[
            ("token", "@token (id @id)"), ("logit", "@logit{0.00}"), ("model's probability", "@model{0.00%}"),
            ("sampler draws from", "@shaped{0.00%}"), ("drawn", "@count of @n (@drawn{0.0%})"), ("", "@fate")]))
        fig.ygrid.grid_line_color = None
        fig.yaxis.major_label_text_font_size = "12px"
        fig.css_classes = ["smp-chart"]          # for tests: a Bokeh pane drops its own classes
        return fig, src

    def _paint(self, s: dict, settings: dict, label: str) -> None:
        labels = [f"{r + 1}. {show_token(t)}" for r, t in enumerate(s["texts"])] + ["all others"]
        n = s["n"]
        counts = s["counts"] + [s["rest_count"]]
        fates = [f"cut by {c}" if c in ("top-k", "top-p", "min-p") else
                 ("rounds to 0 at this temperature" if c == "≈0" else ("greedy keeps only the top token" if c else "kept"))
                 for c in s["cut"]] + [f"{s['vocab'] - TOP:,} tokens together"]
        shaped = s["p_shaped"] + [s["rest_shaped"]]
        self._fig.y_range.factors = labels[::-1]          # most likely at the top
        self._src.data = dict(label=labels, model=s["p_model"] + [s["rest_model"]], shaped=shaped,
                              drawn=[c / n for c in counts], count=counts, token=[show_token(t) for t in s["texts"]] + ["others"],
                              id=[str(i) for i in s["ids"]] + ["–"], logit=s["logits"] + [float("nan")], fate=fates,
                              color=[self._kept_colour] * len(labels), n=[f"{n:,}"] * len(labels),
                              reach=[max(a, b, c / n) + 0.01 for a, b, c in zip(s["p_model"] + [s["rest_model"]], shaped, counts)],
                              cut=[f"✗ {c}" if c in ("top-k", "top-p", "min-p") else "" for c in s["cut"]]
                              + ["✗ all cut" if s["rest_shaped"] == 0 and s["rest_model"] > 0 else ""])
        self._summary.object = self._summary_html(s, settings, label)

    def _summary_html(self, s: dict, settings: dict, label: str) -> str:
        greedy = settings["temperature"] == 0
        kept = [f"{show_token(t)}" for t, p in zip(s["texts"], s["p_shaped"]) if p > 0]
        first = esc(show_token(self._decode(s, s["first_draw"])))
        unfiltered = settings["top_k"] == 0 and settings["top_p"] >= 1 and settings["min_p"] == 0
        mode = ("Temperature 0 is greedy: the sampler puts all the probability on the top token."
                if greedy else f"{s['survivors']:,} of {s['vocab']:,} tokens can be drawn"
                + (" (the others' chances are too small to register in 32-bit floats)" if unfiltered else "")
                + f"; of the top {TOP}, {len(kept)} survive the filters.")
        return (f'<p class="smp-line">{esc(mode)} The other {s["vocab"] - TOP:,} tokens hold '
                f"<b>{s['rest_shaped']:.1%}</b> of what is drawn (the model gives them {s['rest_model']:.1%}). "
                f"Draw #1 of {s['n']:,} with seed {s['seed']}: “{first}”. {label_html(label)}</p>")

    @staticmethod
    def _decode(s: dict, token_id: int) -> str:
        return s["texts"][s["ids"].index(token_id)] if token_id in s["ids"] else f"token {token_id}"

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

    def _live(self, _llm) -> None:
        self._go.disabled = False
        self._on_prompt()

    def _on_prompt(self, *events) -> None:
        """Keystrokes (value_input) and set values (value); both may arrive in one message."""
        if events:
            prompt, note = clip(events[-1].new or "", MAX_CHARS)
            if prompt == self._prompt and self._logits_for == prompt:
                return
            self._prompt = prompt
            self._notes.object = self._notes_html([note])
        if not self.gate.live:
            return
        if not self._prompt.strip():
            self._notes.object = self._notes_html(["Type a prompt first: the model needs something to continue."])
            return
        prompt = self._prompt
        stale = self._saved is None or prompt != self._saved.data["prompt"]
        if events or stale:             # the continuations shown belong to another prompt
            self._writer.cancel()
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
        self._runner.submit(lambda job: self._work(job, llm, prompt, logits, settings), self._show,
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
        s = _shaped_dict(shape(llm, logits, params, n, seed))
        settings = {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
                    "min_p": params.min_p}
        return logits, prompt, s, settings, notes, measured(llm.device_name, time.perf_counter() - t0)

    def _show(self, out) -> None:
        self._logits, self._logits_for, s, settings, notes, label = out
        self._notes.object = self._notes_html(notes)
        self._paint(s, settings, label)

    def _continue(self) -> None:
        if not self.gate.live or not self._prompt.strip():
            return
        if self._writer.busy:
            self._writer.cancel()
            return
        llm, prompt = self.gate.llm, self._prompt
        params, _n, _seed, _notes = self._settings()

        def work(job):
            t0 = time.perf_counter()
            out = continuations(llm, prompt, params, CONTINUE_TOKENS)
            return ({k: [[i, llm.tokenizer.decode([i])] for i in v] for k, v in out.items()}, params,
                    measured(llm.device_name, time.perf_counter() - t0))
        self._writer.submit(work, lambda out: setattr(self._conts, "object", self._conts_html(*out)),
                            on_error=self.gate.error)

    def _writing(self, busy: bool) -> None:
        self._go.label = "Stop" if busy else "Write both continuations"
        self._go.color = "warning" if busy else "primary"
        if busy:
            self._conts.object = '<p class="placeholder">The shared engine is writing both continuations…</p>'

    def _paint_saved(self) -> None:
        if self._saved is None:
            self._summary.object = '<p class="placeholder">The distribution appears once the model is loaded.</p>'
            return
        d = self._saved.data
        self._paint(d["shaped"], d["settings"], self._saved.label)
        if self._prompt != d["prompt"]:
            self._summary.object = (f'<p class="w-small">Showing the saved example “{esc(d["prompt"])}”; your '
                                    "prompt follows once the model is loaded.</p>" + self._summary.object)
        self._conts.object = self._conts_html(d["continuations"], SamplingParams(seed=0), self._saved.label)

    @staticmethod
    def _conts_html(conts: dict, params: SamplingParams, label: str) -> str:
        how = {"greedy": "greedy (temperature 0)",
               "sampled": f"sampled: temperature {params.temperature:g}, top-k {params.top_k}, top-p "
                          f"{params.top_p:g}, min-p {params.min_p:g}, seed {params.seed}"}
        cols = "".join(f'<div class="smp-cont" data-kind="{k}"><p class="w-small">{esc(how[k])}</p><p class="smp-text">'
                       + "".join(f'<span class="tok" title="token id {i}">{esc(t)}</span>' for i, t in conts[k])
                       + "</p></div>" for k in ("greedy", "sampled"))
        return f'<div class="smp-conts-row">{cols}</div><p class="w-small">{CONTINUE_TOKENS} tokens each · {label_html(label)}</p>'

    @staticmethod
    def _notes_html(notes) -> str:
        return "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes if n)


def bench(llm) -> dict:
    """Server ms per update: a new prompt (logits + shaping + draws), a slider move (the engine's shaping,
    the filter blame, N draws), and the two continuations (the shared engine writing 2 × 24 tokens)."""
    from widgets.common.timing import median_ms
    _ids, logits = next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)
    filtered = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.05, seed=0)
    return {"new prompt": median_ms(lambda: shape(llm, next_token_logits(llm, DEFAULT_PROMPT, MAX_TOKENS)[1],
                                                   SamplingParams(), 1000, 0)),
            "slider move (1,000 draws)": median_ms(lambda: shape(llm, logits, filtered, 1000, 0)),
            "slider move (10,000 draws)": median_ms(lambda: shape(llm, logits, filtered, 10_000, 0)),
            f"both continuations ({CONTINUE_TOKENS} tokens each)": median_ms(
                lambda: continuations(llm, DEFAULT_PROMPT, filtered, CONTINUE_TOKENS), repeat=2, warmup=0)}


@register("sampler")
def make_sampler(engine, **args) -> SamplerWidget:
    """Factory for ``::: widget sampler {"prompt": ...}``."""
    return SamplerWidget(engine, **args)
