"""`generate`: type a prompt and watch the shared engine write the reply one token at a time.

Each token costs one forward pass. The counter does not assume "1 prefill + N−1 decodes": it reads
the engine's step trace for this request (widgets/common/passes.py), so it says when part of the
prompt came from the prefix cache, when a long prompt was prefilled in chunks, when the request was
preempted, and whether other readers' requests shared its passes. Times are the steps' wall times as
the engine measured them.

Streaming runs as one background job on a thread of its own (it waits on the engine loop between
tokens); partial replies are posted to the page as they come. Stop ends the stream early (the engine
aborts the request and frees its KV blocks); leaving the page does the same.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import panel as pn

from widgets.common import (EngineGate, JobRunner, RequestPasses, describe, esc, html_pane, label_html,
                            load_example, measured, register, request_passes)
from widgets.common.examples import example
from widgets.common.sharing import SEATS, Reader, Refused, reader_of
from widgets.common.text import clamp, clip

MAX_PROMPT_CHARS = 400
MAX_NEW_TOKENS = 128
POST_EVERY_S = 0.1            # partial replies at most ten times a second


@dataclass(slots=True)
class Reply:
    tokens: list[tuple[int, str]] = field(default_factory=list)   # (token id, the text it completed)
    passes: RequestPasses = field(default_factory=RequestPasses)
    reason: str | None = None                                     # set once the reply has ended
    queued: int | None = None                                     # waiting for a seat: place in the queue


def run_generation(llm, prompt: str, max_tokens: int, chat: bool, should_stop=lambda: False,
                   post=lambda reply: None, reader: Reader | None = None, on_cancel=None) -> Reply:
    """Stream one greedy reply; the pass counter comes from the engine's trace for this request.
    The reader's share comes first (widgets/common/sharing.py): at most a few generations per page,
    and a server-wide seat, waiting in line (its place posted) when every seat is taken."""
    reader = reader or Reader()
    try:
        with reader.generation(should_stop, on_place=lambda place: post(Reply(queued=place))):
            return _stream_reply(llm, prompt, max_tokens, chat, should_stop, post, reader, on_cancel)
    except Refused:
        if should_stop():
            return Reply(reason="abort")     # stopped (or left) while waiting in line
        raise


def _stream_reply(llm, prompt, max_tokens, chat, should_stop, post, reader: Reader, on_cancel) -> Reply:
    from engine import SamplingParams
    start = llm.num_steps()
    reply, request_id, last_post = Reply(), None, 0.0
    stream = llm.stream(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens), chat=chat)
    try:
        for ev in stream:
            if request_id is None:
                request_id = ev.request_id
                reader.requests.add(request_id)          # the dashboard marks it "yours"
                if on_cancel is not None:                # the reader leaves: abort now, not a token later
                    on_cancel(lambda rid=request_id: llm.abort(rid))
            reply.tokens.append((ev.token_id, ev.text_delta))
            if ev.finished:
                reply.reason = ev.finish_reason
                break
            if should_stop():
                reply.reason = "abort"
                break
            if time.monotonic() - last_post >= POST_EVERY_S:
                last_post = time.monotonic()
                reply.passes = request_passes(llm.trace_since(start), request_id)
                post(Reply(list(reply.tokens), reply.passes))
    finally:
        stream.close()             # stopped early: the engine aborts the request and frees its blocks
        reader.requests.discard(request_id)
    if request_id is not None:
        reply.passes = request_passes(llm.trace_since(start), request_id)
    return reply


class GenerateWidget(pn.viewable.Viewer):
    def __init__(self, engine, prompt: str = "What is the capital of France?", max_tokens: int = 32,
                 chat: bool = True, **params):
        super().__init__(**params)
        self._chat = bool(chat)
        self._stop = threading.Event()
        self._saved = _saved_reply(prompt)
        prompt, prompt_note = clip(prompt, MAX_PROMPT_CHARS)
        self._prompt = pn.widgets.TextAreaInput(
            label="Prompt", value=prompt, max_length=MAX_PROMPT_CHARS, rows=2, sizing_mode="stretch_width",
            css_classes=["gen-prompt"])
        # No start/end on the input: the browser would clamp silently; we clamp and say so.
        self._max_tokens = pn.widgets.IntInput(label="Max new tokens", value=int(max_tokens), width=130,
                                               css_classes=["gen-max-tokens"])
        self._button = pn.widgets.Button(label="Generate", color="primary", disabled=True,
                                         css_classes=["gen-button"], width=140, align="end")
        self._button.on_click(self._on_click)
        self._notes = html_pane(self._notes_html([prompt_note]), ["gen-notes-pane"])
        self._output = html_pane("", ["gen-output"])
        self._stats = html_pane("", ["gen-counter"])
        self.gate = EngineGate(engine, self._live, example=self._saved[1] if self._saved else None,
                               live_text="{model} on {device}; press Generate")
        self._runner = JobRunner(on_busy=self._on_busy, own_thread=True, name="generate")
        self._reader = reader_of(pn.state.curdoc)
        title = html_pane(
            '<p class="w-title"><b>Live demo · generate</b> — type a prompt, press Generate, and watch the '
            "model write its reply one token at a time. Each token costs one forward pass.</p>")
        controls = pn.FlexBox(self._max_tokens, self._button, flex_wrap="wrap", align_items="flex-end",
                              sizing_mode="stretch_width")
        self._layout = pn.Column(title, self.gate.pane, self._prompt, controls, self._notes, self._output,
                                 self._stats, sizing_mode="stretch_width", css_classes=["gen-widget"])
        self._show_saved()
        self.gate.start()

    def __panel__(self):
        return self._layout

    # -- engine and jobs ------------------------------------------------------------------------
    def _live(self, _llm) -> None:
        self._button.disabled = False

    def _on_busy(self, busy: bool) -> None:
        self.gate.set_busy(busy)
        self._button.label = "Stop" if busy else "Generate"
        self._button.color = "warning" if busy else "primary"
        self._max_tokens.disabled = busy

    def _on_click(self, _event=None) -> None:
        if self._runner.busy:
            self._stop.set()                 # Stop: end the stream, keep what came so far
            return
        if not self.gate.live:
            return
        prompt = (self._prompt.value or "").strip()
        prompt, prompt_note = clip(prompt, MAX_PROMPT_CHARS)
        max_tokens, tokens_note = clamp(self._max_tokens.value, 1, MAX_NEW_TOKENS, "Max new tokens")
        if tokens_note:
            self._max_tokens.value = max_tokens
        if not prompt:
            self._notes.object = self._notes_html(["The prompt is empty: type a question or a sentence first."])
            return
        self._notes.object = self._notes_html([prompt_note, tokens_note])
        self._stop.clear()
        llm = self.gate.llm
        self._output.object = self._output_html(Reply())
        self._stats.object = self._stats_html(Reply(), llm)
        self._runner.submit(
            lambda job: run_generation(llm, prompt, max_tokens, self._chat,
                                       should_stop=lambda: self._stop.is_set() or job.cancelled, post=job.post,
                                       reader=self._reader, on_cancel=job.on_cancel),
            on_done=lambda r: self._show(r, llm), on_progress=lambda r: self._show(r, llm),
            on_error=self.gate.error)

    def _show(self, reply: Reply, llm) -> None:
        self._output.object = self._output_html(reply)
        self._stats.object = self._stats_html(reply, llm)

    def _show_saved(self) -> None:
        if self._saved is None:
            self._output.object = ('<div class="gen-out" aria-live="polite"><span class="placeholder">'
                                   "Press Generate: the reply appears here one token at a time.</span></div>")
            return
        reply, ex = self._saved
        self._output.object = self._output_html(reply)
        self._stats.object = self._stats_html(reply, None, label=ex.label)

    # -- HTML (every piece of reader or model text is escaped) --------------------------------
    @staticmethod
    def _notes_html(notes) -> str:
        notes = [n for n in notes if n]
        return "".join(f'<p class="w-note">{esc(n)}</p>' for n in notes)

    @staticmethod
    def _output_html(reply: Reply) -> str:
        # Hovering a token shows its id: the number the model actually produced.
        toks = "".join(f'<span class="tok" title="token id {tid}">{esc(t)}</span>' for tid, t in reply.tokens)
        if reply.queued:
            toks = (f'<span class="placeholder gen-queued">Waiting in line: place {reply.queued} (the server '
                    f"streams {SEATS} replies at once; readers share one engine).</span>")
        elif reply.reason is None and not reply.tokens:
            toks = '<span class="placeholder">Waiting for the first token…</span>'
        return f'<div class="gen-out" aria-live="polite">{toks}</div>'

    @staticmethod
    def _stats_html(reply: Reply, llm, label: str | None = None) -> str:
        p = reply.passes
        head = (f'Forward passes: <b class="gen-passes">{p.passes}</b> · tokens generated: '
                f'<b class="gen-tokens">{len(reply.tokens)}</b>')
        lines = [esc(line) for line in describe(p)] if p.passes else []
        times = []
        if p.prefill_passes:
            times.append(f"prefill {1000 * p.prefill_s:.0f} ms")
        if p.decode_median_s is not None:
            times.append(f"{1000 * p.decode_median_s:.0f} ms per decode pass (median of {len(p.decode_s)})")
        if times:
            source = label or measured(llm.device_name) + " by the engine's step trace"
            lines.append(" · ".join(times) + " · " + label_html(source))
        if reply.reason:
            lines.append({"stop": "stopped: end of reply", "length": "stopped: token limit",
                          "abort": "stopped early"}.get(reply.reason, f"stopped: {esc(reply.reason)}"))
        items = "".join(f"<li>{line}</li>" for line in lines)
        return f'<div class="gen-stats"><p>{head}</p><ul>{items}</ul></div>'


def _saved_reply(prompt: str):
    ex = load_example("generate")
    if ex is None or prompt not in ex.data:
        return None
    d = ex.data[prompt]
    passes = RequestPasses(**{k: v for k, v in d["passes"].items() if k in RequestPasses.__slots__})
    return Reply([tuple(t) for t in d["tokens"]], passes, d["reason"]), ex


def chapter_prompts() -> list[str]:
    """The prompts chapters give this widget (their replies are the saved first examples)."""
    import json
    import re
    from pathlib import Path
    pattern = re.compile(r"^:::\s*widget\s+generate\s*(\{.*\})?\s*$")
    prompts = []
    for path in sorted((Path(__file__).resolve().parents[1] / "content").glob("*.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            m = pattern.match(line.strip())
            if m:
                prompts.append(json.loads(m[1] or "{}").get("prompt", "What is the capital of France?"))
    return prompts


@example("generate")
def generate_example(llm) -> dict:
    out = {}
    for prompt in chapter_prompts():
        reply = run_generation(llm, prompt, 32, chat=True)
        p = reply.passes
        out[prompt] = {"tokens": reply.tokens, "reason": reply.reason,
                       "passes": {"passes": p.passes, "prefill_passes": p.prefill_passes,
                                  "decode_passes": p.decode_passes, "chunks": p.chunks,
                                  "cached_prompt_tokens": p.cached_prompt_tokens,
                                  "prefill_s": p.prefill_s, "decode_s": p.decode_s}}
    return out


@register("generate")
def make_generate(engine, **args) -> GenerateWidget:
    """Factory for the ``::: widget generate {"prompt": ...}`` directive."""
    return GenerateWidget(engine, **args)
