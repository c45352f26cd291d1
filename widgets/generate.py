"""`generate`: type a prompt and watch the shared engine write the reply one token at a time.

Each generated token costs one forward pass of the model: the first pass reads the whole prompt
(prefill), every later pass feeds just the newest token (decode). The counter shows that count as
it happens, with the measured time of each pass on the engine's device.

Threading: the engine's ``stream()`` is a blocking iterator, so it runs in a worker thread that puts
events on a queue; a periodic callback on the session's event loop drains the queue into the page.
The page never waits on the model, and the worker stops (closing the stream, which frees the
engine for other readers) if the reader leaves mid-generation.
"""
from __future__ import annotations

import html
import queue
import threading
import time
from dataclasses import dataclass

import panel as pn

MAX_PROMPT_CHARS = 400

_CSS = """
.gen-out { font-family: var(--ex-mono, ui-monospace, monospace); white-space: pre-wrap; line-height: 1.6;
  font-size: .95rem;
  min-height: 3.2em; padding: .6em .8em; border: 1px solid var(--panel-border-color, #ccc); border-radius: 6px;
  background: var(--panel-surface-color, #f7f7f7); color: var(--panel-on-surface-color, #222); margin: 0; }
.gen-out .prompt { opacity: .65; }
.gen-out .tok { border-radius: 3px; padding: 0 1px; background: rgba(0, 114, 181, .13); }
.gen-out .tok:nth-child(odd) { background: rgba(230, 126, 34, .18); }
.gen-out .placeholder { opacity: .6; font-style: italic; }
.gen-stats { font-size: .88rem; color: var(--panel-on-background-color, #333); margin: 0; }
.gen-stats b { font-variant-numeric: tabular-nums; }
.gen-status { font-size: .88rem; margin: 0; }
.gen-title { margin: 0; font-size: .95rem; line-height: 1.45; color: var(--panel-on-background-color, #333); }
.gen-status.failed { color: #c0392b; }
"""


@dataclass(slots=True)
class _Event:
    """What the worker thread hands to the page: a token, the end, or an error."""
    kind: str                    # "token" | "done" | "error"
    delta: str = ""
    token_id: int = -1
    at_s: float = 0.0            # time.perf_counter() when the token arrived
    reason: str | None = None
    error: str = ""


class GenerateWidget(pn.viewable.Viewer):
    def __init__(self, engine, prompt: str = "What is the capital of France?", max_tokens: int = 32,
                 chat: bool = True, **params):
        super().__init__(**params)
        self._engine = engine
        self._chat = bool(chat)
        self._queue: queue.Queue[_Event] = queue.Queue()
        self._cancel = threading.Event()
        self._poll = None
        self._tokens: list[tuple[int, str]] = []     # (token id, the text it completed)
        self._t_start = 0.0
        self._t_last = 0.0
        self._first_s: float | None = None
        self._prompt_tokens = 0

        self._prompt = pn.widgets.TextAreaInput(
            label="Prompt", value=prompt[:MAX_PROMPT_CHARS], max_length=MAX_PROMPT_CHARS, rows=2,
            sizing_mode="stretch_width", css_classes=["gen-prompt"])
        # How many tokens at most: each one is one more forward pass, so readers can count along.
        self._max_tokens = pn.widgets.IntInput(label="Max new tokens", value=int(max_tokens), start=1, end=128,
                                               width=130, css_classes=["gen-max-tokens"])
        self._button = pn.widgets.Button(label="Generate", color="primary", disabled=True,
                                         css_classes=["gen-button"], width=140, align="end")
        self._status = pn.pane.HTML("", stylesheets=[_CSS], css_classes=["gen-status-pane"],
                                    width=280, margin=(5, 10, 11, 10), styles={"flex": "1 1 240px"})
        self._output = pn.pane.HTML(self._output_html(), stylesheets=[_CSS], css_classes=["gen-output"],
                                    sizing_mode="stretch_width")
        self._stats = pn.pane.HTML(self._stats_html(), stylesheets=[_CSS], css_classes=["gen-counter"],
                                   sizing_mode="stretch_width")
        self._button.on_click(self._on_click)
        title = pn.pane.HTML(
            '<p class="gen-title"><b>Live demo · generate</b> — type a prompt, press Generate, and watch '
            "the model write its reply one token at a time. Each token costs one forward pass.</p>",
            stylesheets=[_CSS], sizing_mode="stretch_width")
        self._layout = pn.Column(
            title, self._prompt, pn.FlexBox(self._max_tokens, self._button, self._status, flex_wrap="wrap", align_items="flex-end",
                       sizing_mode="stretch_width"),
            self._output, self._stats, sizing_mode="stretch_width", css_classes=["gen-widget"])
        self._show_engine_state()
        if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
            pn.state.onload(self._on_load)
            pn.state.on_session_destroyed(lambda ctx: self._cancel.set())

    def __panel__(self):
        return self._layout

    # -- engine start-up -----------------------------------------------------------------------
    def _on_load(self) -> None:
        self._engine.start()
        if not self._show_engine_state():
            self._poll = pn.state.add_periodic_callback(self._wait_for_engine, period=250)

    def _wait_for_engine(self) -> None:
        if self._show_engine_state() and self._poll is not None:
            self._poll.stop()
            self._poll = None

    def _show_engine_state(self) -> bool:
        """Reflect the shared engine's status in the widget; True once loading has ended."""
        snap = self._engine.snapshot()
        status = snap.status.value
        if status == "ready":
            note = " (random weights: the text is noise, the mechanics are real)" if snap.random_weights else ""
            self._status.object = f'<p class="gen-status">Model ready, {html.escape(snap.detail)}{note}.</p>'
            self._button.disabled = False
            return True
        if status == "failed":
            self._status.object = ('<p class="gen-status failed">The model could not be loaded: '
                                   f"{html.escape(snap.detail)}</p>")
            return True
        self._status.object = ('<p class="gen-status" role="status">Loading the model… (the first start '
                               "downloads and unpacks about 100 MB; progress is on the server console)</p>")
        return False

    # -- one generation ------------------------------------------------------------------------
    def _on_click(self, _event) -> None:
        prompt = (self._prompt.value or "").strip()[:MAX_PROMPT_CHARS]
        if not prompt or self._poll is not None:
            return
        llm = self._engine.llm
        from engine import SamplingParams   # the engine is loaded by now, so this import is free
        params = SamplingParams(temperature=0.0, max_tokens=int(self._max_tokens.value or 1))
        self._prompt_tokens = len(llm.tokenizer.encode(llm.format_prompt(prompt, self._chat)).ids)
        self._tokens, self._first_s = [], None
        self._t_start = self._t_last = time.perf_counter()
        self._button.disabled = self._max_tokens.disabled = True
        self._button.label = "Generating…"
        self._output.object = self._output_html(prompt)
        self._stats.object = self._stats_html()
        threading.Thread(target=self._worker, args=(llm, prompt, params), daemon=True,
                         name="generate-widget").start()
        self._poll = pn.state.add_periodic_callback(self._drain, period=80)

    def _worker(self, llm, prompt: str, params) -> None:
        stream = None
        try:
            stream = llm.stream(prompt, params, chat=self._chat)
            for ev in stream:
                if self._cancel.is_set():
                    break
                self._queue.put(_Event("token", ev.text_delta, ev.token_id, time.perf_counter()))
                if ev.finished:
                    self._queue.put(_Event("done", reason=ev.finish_reason))
                    return
            self._queue.put(_Event("done", reason="abort" if self._cancel.is_set() else None))
        except Exception as exc:     # surfaced in the widget, not swallowed
            self._queue.put(_Event("error", error=f"{type(exc).__name__}: {exc}"))
        finally:
            if stream is not None:
                stream.close()       # releases the engine for the next request even if we left early

    def _drain(self) -> None:
        finished, reason, error = False, None, ""
        while True:
            try:
                ev = self._queue.get_nowait()
            except queue.Empty:
                break
            if ev.kind == "token":
                self._tokens.append((ev.token_id, ev.delta))
                self._first_s = self._first_s if self._first_s is not None else ev.at_s - self._t_start
                self._t_last = ev.at_s
            else:
                finished, reason, error = True, ev.reason, ev.error
        self._output.object = self._output_html(self._prompt.value, error)
        self._stats.object = self._stats_html(reason if finished else None)
        if finished and self._poll is not None:
            self._poll.stop()
            self._poll = None
            self._button.label = "Generate"
            self._button.disabled = self._max_tokens.disabled = False

    # -- HTML (every piece of user or model text is escaped) ----------------------------------
    def _output_html(self, prompt: str | None = None, error: str = "") -> str:
        if prompt is None:
            return ('<div class="gen-out" aria-live="polite"><span class="placeholder">'
                    "Press Generate: the reply appears here one token at a time.</span></div>")
        # Hovering a token shows its id: the number the model actually produced.
        toks = "".join(f'<span class="tok" title="token id {tid}">{html.escape(t)}</span>'
                       for tid, t in self._tokens)
        err = f'<br><span class="placeholder">Stopped: {html.escape(error)}</span>' if error else ""
        return f'<div class="gen-out" aria-live="polite">{toks}{err}</div>'

    def _stats_html(self, reason: str | None = None) -> str:
        n = len(self._tokens)
        parts = [f'Forward passes: <b class="gen-passes">{n}</b>']
        if n:
            parts.append(f"1 prefill over {self._prompt_tokens} prompt tokens, {n - 1} decode of 1 token each")
            device = html.escape(str(self._engine.llm.device))
            parts.append(f"first token after {1000 * (self._first_s or 0):.0f} ms")
            if n > 1:
                per = (self._t_last - self._t_start - (self._first_s or 0)) / (n - 1)
                parts.append(f"{1000 * per:.0f} ms per decode pass")
            parts.append(f"measured on {device}")
        if reason:
            parts.append({"stop": "stopped: end of reply", "length": "stopped: token limit",
                          "abort": "stopped early"}.get(reason, f"stopped: {html.escape(reason)}"))
        return '<p class="gen-stats">' + " · ".join(parts) + "</p>"


def make_generate(engine, **args) -> GenerateWidget:
    """Factory for the ``::: widget generate {"prompt": ...}`` directive."""
    return GenerateWidget(engine, **args)
