"""`parallelism` (chapter 19): the reader's prompt split over CPU processes for real.

Pick tensor or pipeline parallelism and a size: the page shows at once how that split places SmolLM2
(every matrix's slices per rank, or each stage's layers). Run starts the processes on this server
(LLM(tensor_parallel_size=3): this process is rank 0 and spawns the others, gloo between them),
generates greedily, ends them, and shows the two texts (split and one process: the same), each step's
all-reduces (calls, bytes = tokens × hidden × 4, time) or the pipeline's timeline with its bubble, all
read from the engine's step trace (compute.py, drawn by view.py). Beside it, Llama-3-70B over 8 GPUs,
NVLink against PCIe (modelled.py).

One run per server at a time (widgets/common/sharing.py: PARALLEL_RUNS): a second reader is told their place in line. The run is a
job on its own thread; leaving the page cancels it and its processes are ended.
"""
from __future__ import annotations

import time

import panel as pn
import param

from widgets.common import Widget, example, html_pane, measured, register
from widgets.common.text import clamp, clip
from widgets.common.sharing import PARALLEL_RUNS
from widgets.parallelism.compute import (MAX_NEW_TOKENS, MODES, check_size, config_of, layout_for, recorded_runs,
                                         run_split, sizes_for)
from widgets.parallelism.modelled import SCENARIOS, pipeline, tensor_parallel
from widgets.parallelism.view import (NO_LAYOUT, NO_RUN, modelled_html, progress_html, recorded_line, split_html,
                                      step_choices, steps_html, texts_html)

MAX_PROMPT_CHARS = 300
DEFAULT_PROMPT = "What is the capital of France?"
EXAMPLE_TOKENS = 12
DEFAULT_SIZE = {"tp": 3, "pp": 3}


@register
class ParallelismWidget(Widget):
    css = "pz"
    live_text = "{model}; Run starts the processes on this server ({device})"
    own_thread = True
    prompt = param.String(default=DEFAULT_PROMPT, doc="the prompt both splits generate from (the example: the reader's once chosen)")
    mode = param.String(default="tp", doc='"tp" or "pp": the split shown first')

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        mode = self.mode if self.mode in MODES else "tp"
        self._runs = dict(self.example.data["runs"]) if self.example else {}
        self._labels = {m: self.example.label for m in self._runs} if self.example else {}
        text, note = clip(self.reader_sentence(self.prompt), MAX_PROMPT_CHARS)
        self._prompt = pn.widgets.TextAreaInput(name="Prompt", value=text, max_length=MAX_PROMPT_CHARS, rows=2,
                                                sizing_mode="stretch_width", css_classes=["pz-prompt"])
        self._mode = pn.widgets.RadioButtonGroup(name="Split", options={v: k for k, v in MODES.items()}, value=mode,
                                                 button_type="default", css_classes=["pz-mode"])
        self._size = pn.widgets.Select(name="Size", options=sizes_for(mode), value=DEFAULT_SIZE[mode], width=90,
                                       css_classes=["pz-size"])
        self._tokens = pn.widgets.IntInput(name="New tokens", value=EXAMPLE_TOKENS, width=110, css_classes=["pz-tokens"])
        self._button = self.run_button("Run", self._on_run, width=170, align="end")
        self._step = pn.widgets.Select(name="Step", options={}, visible=False, sizing_mode="stretch_width",
                                       css_classes=["pz-step"])
        self._scenario = pn.widgets.RadioButtonGroup(name="Scenario", options=list(SCENARIOS),
                                                     value="prefill, 2,000 tokens", css_classes=["pz-scenario"])
        self.say(note)
        self._progress = html_pane("", ["pz-progress"])
        self._split = html_pane("", ["pz-split-pane"])
        self._texts = html_pane("", ["pz-texts-pane"])
        self._steps = html_pane("", ["pz-steps-pane"])
        self._model = html_pane("", ["pz-model-pane"])
        self._mode.param.watch(self._on_mode, "value")
        self._size.param.watch(lambda e: self._refresh_split(), "value")
        self._step.param.watch(lambda e: self._refresh_steps(), "value")
        self._scenario.param.watch(lambda e: self._refresh_model(), "value")
        title = self.title("<b>Live demo · parallelism</b> — split SmolLM2 over processes on this server and run "
                           "your prompt: see how each matrix (or each layer) is placed, what crosses between the "
                           "processes at every step, and that the text does not change.")
        controls = pn.FlexBox(self._mode, self._size, self._tokens, self._button, flex_wrap="wrap",
                              align_items="flex-end", sizing_mode="stretch_width")
        h = lambda text: html_pane(f"<h3 class='pz-h'>{text}</h3>")
        self.layout = pn.Column(
            title, self.gate.pane, self._prompt, controls, self.notes, self._progress,
            h("1 · How the model is split"), self._split,
            h("2 · The text: split and one process"), self._texts,
            h("3 · What crossed between the processes, step by step"), self._step, self._steps,
            h("4 · At scale: Llama-3-70B on 8 GPUs (modelled)"), self._scenario, self._model,
            sizing_mode="stretch_width", css_classes=["pz-widget"])
        self._refresh_split()
        self._refresh_results()
        self._refresh_model()
        self.gate.start()

    # -- state -----------------------------------------------------------------------------------
    @property
    def cfg(self):
        return config_of(self.gate.llm)

    def on_live(self, _llm) -> None:
        self._refresh_split()

    def _on_mode(self, event) -> None:
        self._size.options = sizes_for(event.new)
        self._size.value = DEFAULT_SIZE[event.new]
        self._refresh_split()
        self._refresh_results()

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)                        # the status line; the Run button reads Stop
        self._mode.disabled = self._size.disabled = self._tokens.disabled = busy
        if not busy:
            self._progress.object = ""
            self._refresh_split()                    # and the Run button names its processes again

    def _run_label(self) -> str:
        mode, size = self._mode.value, self._size.value
        return f"Run on {size} processes" if check_size(self.cfg, mode, size) is None else "Run"

    # -- views -----------------------------------------------------------------------------------
    def _refresh_split(self) -> None:
        mode, size = self._mode.value, int(self._size.value)
        why = check_size(self.cfg, mode, size)
        self._button.disabled = why is not None or not self.gate.live or self.jobs.busy
        if not self.jobs.busy:
            self._button.label = self._run_label()
        self.say(why)
        try:
            layout = layout_for(self.cfg, mode, size)
        except ValueError:
            self._split.object = NO_LAYOUT
            return
        self._split.object = split_html(layout, self.cfg, mode)

    def _refresh_results(self) -> None:
        run = self._runs.get(self._mode.value)
        if run is None:
            self._texts.object = NO_RUN
            self._steps.object = ""
            self._step.visible = False
            return
        label = self._labels[self._mode.value]
        self._texts.object = texts_html(run, label)
        if run["mode"] == "pp":
            choices = step_choices(run)
            self._step.options = choices
            self._step.value = 0
            self._step.visible = True
        else:
            self._step.visible = False
        self._refresh_steps()

    def _refresh_steps(self) -> None:
        run = self._runs.get(self._mode.value)
        if run is not None:
            self._steps.object = steps_html(run, self._labels[self._mode.value], int(self._step.value or 0))

    def _refresh_model(self) -> None:
        self._model.object = modelled_html(tensor_parallel(self._scenario.value), pipeline(self._scenario.value),
                                           recorded_line(recorded_runs()))

    # -- the run ---------------------------------------------------------------------------------
    def _on_run(self) -> None:
        if not self.gate.live:
            return
        tokens, tokens_note = clamp(self._tokens.value, 1, MAX_NEW_TOKENS, "New tokens")
        if tokens_note:
            self._tokens.value = tokens
        prompt = self.read_prompt(self._prompt.value, MAX_PROMPT_CHARS)
        if prompt is None:
            return
        prompt, prompt_note = prompt
        self.say(prompt_note, tokens_note)
        mode, size, llm = self._mode.value, int(self._size.value), self.gate.llm

        def work(job):
            with PARALLEL_RUNS.seat(job.check, on_place=lambda place: job.post(
                    f"Another reader's split is running on this server; yours starts when it ends "
                    f"({place} ahead of you).")):
                started = time.perf_counter()
                run = run_split(llm, prompt, mode, size, tokens, progress=job.post, cancelled=lambda: job.cancelled)
                return None if run is None else (run, time.perf_counter() - started)
        self._progress.object = progress_html("Waiting for the server…")
        self.jobs.submit(work, on_done=self._show_run, on_progress=lambda m: setattr(
            self._progress, "object", progress_html(m)), on_error=self.gate.error)

    def _show_run(self, result) -> None:
        if result is None:
            return
        run, took = result
        self._runs[run["mode"]] = run
        self._labels[run["mode"]] = measured(run["device"], took)
        if self._mode.value != run["mode"]:
            self._mode.value = run["mode"]
        self._refresh_results()


@example
def parallelism_example(llm) -> dict:
    """Both splits on the default prompt: tp=3 and pp=3, computed for real on CPU processes."""
    return {"runs": {mode: run_split(llm, DEFAULT_PROMPT, mode, DEFAULT_SIZE[mode], EXAMPLE_TOKENS)
                     for mode in ("tp", "pp")}}


def bench(llm) -> dict:
    """Server time per update: the split view and the modelled view (ms), and one tp=3 run of 4 tokens
    (ms too, though seconds long: spawning three processes and loading a shard in each dominate)."""
    from widgets.common.timing import median_ms
    w = {}
    for mode, size in (("tp", 3), ("pp", 3)):
        layout = layout_for(llm.config, mode, size)
        w[f"split_view_{mode}"] = median_ms(lambda: split_html(layout, llm.config, mode))
    w["modelled_view"] = median_ms(lambda: modelled_html(
        tensor_parallel("prefill, 2,000 tokens"), pipeline("prefill, 2,000 tokens"), recorded_line(recorded_runs())))
    w["run_tp3_4_tokens"] = median_ms(lambda: run_split(llm, DEFAULT_PROMPT, "tp", 3, 4), repeat=1, warmup=0)
    return w
