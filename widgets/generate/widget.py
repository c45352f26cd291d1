"""`generate` (chapters 1, 21): type a prompt and watch the shared engine write the reply one token at a time.

Each token costs one forward pass; the counter under the reply reads the engine's step trace for this
request (compute.py), and view.py draws both.

Streaming runs as one background job on a thread of its own (it waits on the engine loop between
tokens); partial replies are posted to the page as they come. Stop ends the stream early and keeps
what came so far (the engine aborts the request and frees its KV blocks); leaving the page does the same.
"""
from __future__ import annotations

import threading

import panel as pn
import param

from widgets.common import Widget, example, html_pane, register
from widgets.common.sharing import reader_of
from widgets.common.text import clamp, clip
from widgets.generate.compute import Reply, reply_record, run_generation, saved_reply
from widgets.generate.view import PLACEHOLDER, output_html, stats_html

MAX_PROMPT_CHARS = 400
MAX_NEW_TOKENS = 128
DEFAULT_PROMPT = "What is the capital of France?"


def chapter_prompts() -> list[str]:
    """The prompts chapters give this widget (their replies are the saved first examples)."""
    import json
    import re
    from pathlib import Path
    pattern = re.compile(r"^:::\s*widget\s+generate\s*(\{.*\})?\s*$")
    prompts = []
    for path in sorted((Path(__file__).resolve().parents[2] / "content").glob("*.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = pattern.match(line.strip())
            if m:
                prompts.append(json.loads(m[1] or "{}").get("prompt", DEFAULT_PROMPT))
    return prompts


@example
def generate_example(llm) -> dict:
    return {prompt: reply_record(run_generation(llm, prompt, 32, chat=True)) for prompt in chapter_prompts()}


@register
class GenerateWidget(Widget):
    css = "gen"
    live_text = "{model} on {device}; press Generate"
    own_thread = True                 # a reply waits on the engine loop between tokens
    empty_prompt = "The prompt is empty: type a question or a sentence first."
    prompt = param.String(default=DEFAULT_PROMPT, doc="the prompt in the box (a saved reply paints first)")
    max_tokens = param.Integer(default=32, doc="new tokens at most (the reader may change it, 1–128)")
    chat = param.Boolean(default=True, doc="wrap the prompt in the model's chat template")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._stop = threading.Event()
        saved = self.example.data.get(self.prompt) if self.example is not None else None
        self._saved = saved_reply(saved) if saved is not None else None
        if self._saved is None:                # the status line offers no saved example it would not show
            self.gate.example = None
        prompt, prompt_note = clip(self.prompt, MAX_PROMPT_CHARS)
        self._prompt = pn.widgets.TextAreaInput(
            label="Prompt", value=prompt, max_length=MAX_PROMPT_CHARS, rows=2, sizing_mode="stretch_width",
            css_classes=["gen-prompt"])
        # No start/end on the input: the browser would clamp silently; we clamp and say so.
        self._max_tokens = pn.widgets.IntInput(label="Max new tokens", value=int(self.max_tokens), width=130,
                                               css_classes=["gen-max-tokens"])
        self._button = self.run_button("Generate", self._generate, css_classes=["gen-button"], width=140,
                                       align="end")
        self.say(prompt_note)
        self._output = html_pane("", ["gen-output"])
        self._stats = html_pane("", ["gen-counter"])
        self._reader = reader_of(pn.state.curdoc)
        controls = pn.FlexBox(self._max_tokens, self._button, flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")
        self.layout = pn.Column(
            self.title("<b>Live demo · generate</b> — type a prompt, press Generate, and watch the model write "
                       "its reply one token at a time. Each token costs one forward pass."),
            self.gate.pane, self._prompt, controls, self.notes, self._output, self._stats,
            sizing_mode="stretch_width", css_classes=["gen-widget"])
        self._show_saved()
        self.gate.start()

    # -- engine and jobs ------------------------------------------------------------------------
    def on_live(self, _llm) -> None:
        self._button.disabled = False

    def on_busy(self, busy: bool) -> None:
        super().on_busy(busy)
        self._max_tokens.disabled = busy

    def stop(self) -> None:
        """Stop: end the stream, keep what came so far (the job ends with the partial reply)."""
        self._stop.set()

    def _generate(self) -> None:
        if not self.gate.live:
            return
        max_tokens, tokens_note = clamp(self._max_tokens.value, 1, MAX_NEW_TOKENS, "Max new tokens")
        if tokens_note:
            self._max_tokens.value = max_tokens
        prompt = self.read_prompt(self._prompt.value, MAX_PROMPT_CHARS)
        if prompt is None:
            return
        prompt, prompt_note = prompt
        self.say(prompt_note, tokens_note)
        self._stop.clear()
        llm = self.gate.llm
        self._show(Reply(), llm)
        self.jobs.submit(
            lambda job: run_generation(llm, prompt, max_tokens, self.chat,
                                       should_stop=lambda: self._stop.is_set() or job.cancelled, post=job.post,
                                       reader=self._reader, on_cancel=job.on_cancel),
            on_done=lambda r: self._show(r, llm), on_progress=lambda r: self._show(r, llm),
            on_error=self.gate.error)

    def _show(self, reply: Reply, llm) -> None:
        self._output.object = output_html(reply)
        self._stats.object = stats_html(reply, llm)

    def _show_saved(self) -> None:
        if self._saved is None:
            self._output.object = PLACEHOLDER
            return
        self._output.object = output_html(self._saved)
        self._stats.object = stats_html(self._saved, None, label=self.example.label)
