"""`speculative-decoding` (chapter 18): draft, then verify — in the real engine, and in a simulator.

engine      the reader's prompt runs in a private speculative engine (compute.py) with the proposer and
            k they pick: each step shows the drafted tokens, kept (✓) or rejected (✗), the ones never
            judged, and the target's bonus (★) or correction (↺), with p and q on hover; beside them the
            engine's own acceptance a and tokens per pass against (1 − a^(k+1)) / (1 − a).
simulator   an acceptance probability, k and a draft cost c; one round at a time or a thousand at once
            (simulator.py), against the same curve and the modelled speed-up.

The engine steps on a JobRunner thread of its own (the page never blocks); a new prompt or setting
drops the old engine, and leaving the page aborts the request and frees its KV blocks.
"""
from __future__ import annotations

import panel as pn
import param

from engine import load_recorded
from widgets.common import Widget, clamp, clip, example, html_pane, measured, modelled, register
from widgets.speculative_decoding.compute import (MAX_K, MAX_TOKENS, METHODS, SpecStepper, StepView, TokenView,
                                                  run_all)
from widgets.speculative_decoding.simulator import Simulator
from widgets.speculative_decoding.view import (curve_figure, draw_curve, engine_stats_html, legend_html,
                                               recorded_html, reply_html, round_html, sim_stats_html, steps_html)

DEFAULT_SENTENCE = "The quick brown fox jumps over the lazy dog."
MAX_CHARS = 600
SAMPLING = {"greedy": 0.0, "sampled (T = 0.8)": 0.8}
DEFAULTS = {"method": "ngram", "k": 4, "num_layers": 15, "sampling": "greedy", "max_tokens": 48}
EMPTY_PROMPT = "The prompt is empty: type something to repeat or continue."


def default_prompt(sentence: str) -> str:
    """A task that copies most of the reader's sentence and changes a little: lookup has something to find,
    and something to get wrong."""
    return f"Rewrite this sentence in the past tense: {sentence}"


@example
def spec_example(llm) -> dict:
    views, summary = run_all(llm, default_prompt(DEFAULT_SENTENCE), DEFAULTS["max_tokens"], method="ngram", k=4)
    summary["verify_ms"] = summary["propose_ms"] = None          # times differ run to run: the saved file keeps none
    return {"prompt": default_prompt(DEFAULT_SENTENCE), "summary": summary,
            "views": [{"step": v.step, "kind": v.kind, "num_drafts": v.num_drafts, "num_accepted": v.num_accepted,
                       "step_ms": 0.0, "propose_ms": 0.0, "prompt_tokens": v.prompt_tokens,
                       "tokens": [[t.token_id, t.text, t.status, t.p, t.q] for t in v.tokens]} for v in views]}


def saved_views(data: dict) -> list[StepView]:
    return [StepView(v["step"], v["kind"], [TokenView(*t) for t in v["tokens"]], v["num_drafts"], v["num_accepted"],
                     v["step_ms"], v["propose_ms"], v["prompt_tokens"]) for v in data["views"]]


def bench(llm) -> dict:
    """Server milliseconds per update: one engine step (n-gram, k = 4), and a thousand simulated rounds."""
    import statistics
    import time
    stepper = SpecStepper(llm, default_prompt(DEFAULT_SENTENCE), method="ngram", k=4, max_tokens=24)
    times = []
    try:
        while True:
            t = time.perf_counter()
            if stepper.step() is None:
                break
            times.append(1000 * (time.perf_counter() - t))
    finally:
        stepper.close()
    sim, t = Simulator(), time.perf_counter()
    sim.run(0.8, 4, 1000)
    return {"engine_step_ms": round(statistics.median(times), 2),
            "simulate_1000_rounds_ms": round(1000 * (time.perf_counter() - t), 2)}


@register
class SpecDecodeWidget(Widget):
    css = "sd"
    live_text = "{model} on {device}, in a private engine of its own"
    own_thread = True
    sentence = param.String(default=DEFAULT_SENTENCE, doc="the sentence the prompt rewrites (the example: the reader's once chosen)")
    mode = param.String(default="engine", doc='"engine" or "simulator": the mode shown first')

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        prompt, note = clip(default_prompt(self.reader_sentence(self.sentence)), MAX_CHARS)
        self._mode = pn.widgets.RadioButtonGroup(name="Mode", options=["engine", "simulator"],
                                                 value=self.mode if self.mode in ("engine", "simulator") else "engine",
                                                 css_classes=["sd-mode"])
        # -- engine mode
        self._prompt = pn.widgets.TextAreaInput(label="Prompt", value=prompt, rows=2, max_length=MAX_CHARS,
                                                sizing_mode="stretch_width", css_classes=["sd-prompt"])
        self._method = pn.widgets.Select(label="Proposer", options={v: k for k, v in METHODS.items()},
                                         value=DEFAULTS["method"], width=290, css_classes=["sd-method"])
        self._k = pn.widgets.IntSlider(name="Drafts per step k", start=1, end=MAX_K, value=DEFAULTS["k"], width=170,
                                       css_classes=["sd-k"])
        self._layers = pn.widgets.IntSlider(name="Draft layers L (of 30)", start=1, end=29,
                                            value=DEFAULTS["num_layers"], width=190, visible=False,
                                            css_classes=["sd-layers"])
        self._sampling = pn.widgets.RadioButtonGroup(options=list(SAMPLING), value=DEFAULTS["sampling"],
                                                     css_classes=["sd-sampling"], align="end")
        self._step_button = pn.widgets.Button(label="Step ▸", button_type="primary", disabled=True, width=100,
                                              css_classes=["sd-step-button"], align="end")
        self._run_button = self.run_button("Run to the end", lambda: self._go(MAX_TOKENS + 2), color="default", width=140,
                                           css_classes=["sd-run-button"], align="end")
        self._step_button.on_click(lambda e: self._go(1))
        self.say(note)
        self._steps = html_pane("", ["sd-steps-pane"])
        self._reply = html_pane("", ["sd-reply-pane"])
        self._stats = html_pane("", ["sd-stats-pane"])
        self._e_fig, self._e_curve, self._e_point = curve_figure("measured by the engine")
        # -- simulator mode
        self._a = pn.widgets.FloatSlider(name="Acceptance a", start=0.05, end=0.99, step=0.01, value=0.8, width=180,
                                         css_classes=["sd-a-slider"])
        self._sim_k = pn.widgets.IntSlider(name="Drafts k", start=1, end=12, value=4, width=160, css_classes=["sd-sim-k"])
        self._cost = pn.widgets.FloatSlider(name="Draft cost c", start=0.0, end=0.5, step=0.01, value=0.05, width=160,
                                            css_classes=["sd-cost"])
        self._one = pn.widgets.Button(label="1 round", button_type="primary", width=100, css_classes=["sd-one"], align="end")
        self._many = pn.widgets.Button(label="1,000 rounds", width=120, css_classes=["sd-many"], align="end")
        self._reset = pn.widgets.Button(label="Reset", width=80, css_classes=["sd-reset"], align="end")
        self._sim = Simulator(seed=0, a=0.8, k=4)
        self._one.on_click(lambda e: self._simulate(1))
        self._many.on_click(lambda e: self._simulate(1000))
        self._reset.on_click(lambda e: self._simulate(0, reset=True))
        self._round = html_pane("", ["sd-round-pane"])
        self._sim_stats = html_pane("", ["sd-sim-stats"])
        self._s_fig, self._s_curve, self._s_point = curve_figure("simulated", speedup=True)
        for w in (self._a, self._sim_k, self._cost):
            w.param.watch(lambda e: self._simulate(0), "value")
        # -- wiring
        self._stepper: SpecStepper | None = None
        self._views: list[StepView] = []
        self._stale = True                                  # settings changed: the next Step starts over
        self._stop = False
        for w in (self._prompt, self._method, self._k, self._layers, self._sampling):
            w.param.watch(self._settings_changed, "value")
        self._method.param.watch(lambda e: setattr(self._layers, "visible", e.new == "early_exit"), "value")
        self.on_page_close(self._close)
        title = self.title("<b>Speculative decoding · draft, then verify</b> — in the engine, a proposer guesses k "
                           "tokens and the model checks them all in one pass; in the simulator, each guess survives "
                           "with probability a.")
        engine_box = pn.Column(
            self._prompt,
            pn.FlexBox(self._method, self._k, self._layers, self._sampling, flex_wrap="wrap", align_items="flex-end",
                       sizing_mode="stretch_width"),
            pn.FlexBox(self._step_button, self._run_button, flex_wrap="wrap", sizing_mode="stretch_width"),
            self.notes, html_pane(legend_html()), self._steps, self._reply, self._stats,
            pn.pane.Bokeh(self._e_fig, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", css_classes=["sd-engine"])
        sim_box = pn.Column(
            pn.FlexBox(self._a, self._sim_k, self._cost, self._one, self._many, self._reset, flex_wrap="wrap",
                       align_items="flex-end", sizing_mode="stretch_width"),
            self._round, self._sim_stats, pn.pane.Bokeh(self._s_fig, sizing_mode="stretch_width"),
            sizing_mode="stretch_width", css_classes=["sd-sim"])
        self._boxes = {"engine": engine_box, "simulator": sim_box}
        self._mode.param.watch(lambda e: self._show_mode(), "value")
        # the recorded GPU run, whichever mode is shown: the engine mode measures this server's CPU
        recorded = html_pane(recorded_html(load_recorded("spec")), ["sd-recorded-pane"])
        self.layout = pn.Column(title, self.gate.pane, self._mode, engine_box, sim_box, recorded,
                                sizing_mode="stretch_width", css_classes=["sd-widget"])
        self._show_mode()
        self._show_saved()
        self._simulate(0)
        self.gate.start()

    # -- engine mode -------------------------------------------------------------------------------
    def on_live(self, llm) -> None:
        self._step_button.disabled = self._run_button.disabled = False
        if llm.source is None:                             # random weights: no file to draft with
            self._method.options = {v: k for k, v in METHODS.items() if k != "draft_model"}
        self._layers.end = llm.config.num_layers - 1
        self._layers.name = f"Draft layers L (of {llm.config.num_layers})"

    def _settings_changed(self, _event=None) -> None:
        self._stale = True
        self._stop = True
        self.jobs.cancel()

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)                              # the status line; Run to the end reads Stop
        self._step_button.disabled = busy or not self.gate.live

    def stop(self) -> None:
        """Stop pressed: the run ends after the step in flight, and the steps taken so far stay shown."""
        self._stop = True

    def _go(self, steps: int) -> None:
        if self.jobs.busy or not self.gate.live:
            return
        llm = self.gate.llm
        prompt = self.read_prompt(self._prompt.value, MAX_CHARS, empty=EMPTY_PROMPT)
        if prompt is None:
            return
        text, note = prompt
        k, k_note = clamp(self._k.value, 1, MAX_K, "k")
        self.say(note, k_note)
        settings = dict(method=self._method.value, k=k, num_layers=int(self._layers.value),
                        temperature=SAMPLING[self._sampling.value], max_tokens=DEFAULTS["max_tokens"])
        fresh = self._stale or self._stepper is None or self._stepper.done
        self._stale, self._stop = False, False

        def work(job):
            if fresh:
                self._close()
                self._stepper, self._views = SpecStepper(llm, text, **settings), []
            stepper = self._stepper
            for _ in range(steps):
                if job.cancelled or self._stop:
                    break
                view = stepper.step()
                if view is None:
                    break
                self._views.append(view)
                job.post((list(self._views), stepper.summary(), stepper.done))
            return list(self._views), stepper.summary(), stepper.done

        self.jobs.submit(work, on_done=lambda r: self._show(*r, llm=llm),
                         on_progress=lambda r: self._show(*r, llm=llm), on_error=self.gate.error)

    def _show(self, views: list[StepView], summary: dict, done: bool = False, llm=None, label: str | None = None) -> None:
        label = label or measured(llm.device_name)
        self._steps.object = steps_html(views, label, "Press Step to prefill the prompt and take the first step.", done)
        self._reply.object = reply_html(views)
        self._stats.object = engine_stats_html(summary, label)
        draw_curve(self._e_curve, self._e_point, summary.get("k", self._k.value), summary.get("a"),
                   summary.get("tokens_per_verify_pass"), label)

    def _show_saved(self) -> None:
        if self.example is None:
            self._show([], {"k": self._k.value}, label=modelled())
            return
        self._show(saved_views(self.example.data), self.example.data["summary"], True, label=self.example.label)

    def _close(self) -> None:
        if self._stepper is not None:
            self._stepper.close()                          # aborts the request: its KV blocks are freed
            self._stepper = None

    # -- simulator mode -----------------------------------------------------------------------------
    def _simulate(self, rounds: int, reset: bool = False) -> None:
        a, k, c = float(self._a.value), int(self._sim_k.value), float(self._cost.value)
        if reset:
            self._sim.reset(a, k)
        last = self._sim.run(a, k, rounds)
        label = modelled("each draft kept with probability a, independently")
        self._round.object = round_html(last, k)
        self._sim_stats.object = sim_stats_html(self._sim, c, label)
        draw_curve(self._s_curve, self._s_point, k, a if self._sim.rounds else None,
                   self._sim.tokens_per_pass, "simulated", cost=c)

    # -- layout -------------------------------------------------------------------------------------
    def _show_mode(self) -> None:
        for name, box in self._boxes.items():
            box.visible = name == self._mode.value
