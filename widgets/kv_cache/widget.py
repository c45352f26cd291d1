"""`kv-cache` (chapter 12): prefill the reader's prompt in a private engine, then decode one token per
press of Step (or → / n with the widget focused) and watch the cache fill.

Each step shows what the engine did (compute.py reads it back from the private engine): the tokens
and the block and slot each one's K/V landed in (view.py), the new token's K and V —
30 layers × 3 KV heads × 64 numbers each, the bytes this step added — the bytes held, and the step
timed against recomputing the whole sequence. Steps run as background jobs; presses made while one
runs are queued (a few at most), so a held key never piles up work. A step is seconds on a busy CPU:
the notes say which step and half (decode, then the recomputation) is running and how many are queued.
"""
from __future__ import annotations

from statistics import median

import numpy as np
import panel as pn
import param

from widgets.common import PALETTE, Widget, example, html_pane, is_dark, measured, register
from widgets.common import style_figure, themed_figure
from widgets.common.text import clip
from widgets.kv_cache.compute import MAX_PROMPT_TOKENS, MAX_STEPS, KVStepper
from widgets.common.load import busy_requests
from widgets.kv_cache.view import blocks_html, bytes_html, step_progress_text, timing_html, view_dict

DEFAULT_PROMPT = ("Once upon a time, in a small village by the sea, there lived an old fisherman who told the same "
                  "story to every child who would listen.")
MAX_CHARS = 300
MAX_QUEUED = 4
KEYS = "ArrowRight n N"
IMAGE_X = (-0.5, 201.5)                            # K drawn at columns 0–191, V at 202–393
DIVERGING = ["#0072B2", "#3A8CC1", "#74A9CF", "#A6C4DD", "#D5DEE8", "#EDEDED", "#F3DDB8", "#F0C27D", "#E9A444",
             "#E69F00", "#C47F00"]                 # Okabe–Ito blue → grey → orange: readable with CVD
DIVERGING_DARK = ["#56B4E9", "#4A9BC9", "#3E82A8", "#336988", "#2C4A5E", "#2A2F35", "#5E4A2C", "#8A6630",
                  "#B58233", "#E69F00", "#F5B83D"]   # the same hues around the dark page's own grey


@example
def kv_cache_example(llm) -> dict:
    stepper = KVStepper(llm, DEFAULT_PROMPT)
    views = [view_dict(stepper.step()) for _ in range(4)]        # the prefill and three decode steps
    stepper.close()
    for v in views[:-1]:
        v["new_k"] = v["new_v"] = []                             # only the newest step's K/V are drawn
    for v in views[-1:]:                                         # one line of text per layer keeps the file small
        v["new_k"] = [" ".join(f"{x:.2f}" for x in row) for row in v["new_k"]]
        v["new_v"] = [" ".join(f"{x:.2f}" for x in row) for row in v["new_v"]]
    return {"prompt": DEFAULT_PROMPT, "views": views}


def kv_rows(rows) -> np.ndarray:
    """[layers, kv_heads * head_dim] from a live view (numbers) or the saved example (text rows)."""
    return np.array([[float(x) for x in r.split()] if isinstance(r, str) else r for r in rows], dtype=float)


@register
class KVCacheWidget(Widget):
    css = "kv"
    live_text = "{model} on {device}, in a private engine of its own"
    own_thread = True
    prompt = param.String(default=DEFAULT_PROMPT, doc="the prompt the chapter prefills (the example: the reader's sentence once chosen)")

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        text, note = clip(self.reader_sentence(self.prompt), MAX_CHARS)
        self._box = pn.widgets.TextAreaInput(label="Your prompt", value=text, rows=2, max_length=MAX_CHARS,
                                             sizing_mode="stretch_width", css_classes=["kv-prompt"])
        self._prefill = pn.widgets.Button(label="Prefill", color="default", disabled=True, width=110,
                                          css_classes=["kv-prefill"])
        self._step = pn.widgets.Button(label="Step ▸", color="primary", disabled=True, width=110,
                                       css_classes=["kv-step"])
        self._prefill.on_click(lambda e: self._start())
        self._step.on_click(lambda e: self._request_step())
        self.say(note)
        self._blocks = html_pane("", ["kv-blocks"])
        self._bytes = html_pane("", ["kv-bytes"])
        self._time = html_pane("", ["kv-time"])
        self._kv_fig, self._kv_src = self._kv_figure()
        self._t_fig, self._t_src = self._time_figure()
        self._t_pane = pn.pane.Bokeh(self._t_fig, sizing_mode="stretch_width", visible=False)
        self._stepper, self._views, self._wanted, self._clip_note = None, [], 0, None
        self._kept: tuple = (None,)                     # the notes a step's progress line sits under
        self.on_page_close(self._close_stepper)
        stage = html_pane(f'<div class="kv-stage" tabindex="0" data-keys="{KEYS}" data-press=".kv-step" '
                          'aria-label="KV-cache stepper: press the right arrow or n to decode one token">'
                          "<b>Step</b> decodes one token: press the button, or <kbd>→</kbd> / <kbd>n</kbd> "
                          "while the widget has focus.</div>", ["kv-stage-pane"])
        self.layout = pn.Column(
            self.title("<b>Live demo · the KV cache, one step at a time</b> — prefill your prompt, then decode "
                       "token by token: each step adds one token's K and V to one slot of one block."),
            self.gate.pane, self._box, pn.FlexBox(self._prefill, self._step, flex_wrap="wrap"), stage,
            self.notes, self._blocks, self._bytes,
            html_pane('<p class="w-small">The newest token\'s K and V, as stored in its slot: one row per layer, '
                      "64 numbers per KV head. Hover for the value.</p>"),
            pn.pane.Bokeh(self._kv_fig, sizing_mode="stretch_width"), self._time,
            self._t_pane,
            sizing_mode="stretch_width", css_classes=["kv-widget"])
        if self.example is not None and self.example.data["prompt"] == text:
            self._paint(self.example.data["views"], self.example.label, now=True)
        self.gate.start()

    def on_live(self, llm) -> None:
        self._start()

    def on_busy(self, busy: bool) -> None:
        self.gate.set_busy(busy)

    # -- figures ----------------------------------------------------------------------------------
    def _kv_figure(self):
        """Two images, K then V, each [layers, kv_heads × head_dim], each on its own colour scale."""
        from bokeh.models import ColumnDataSource, CustomJSHover, FixedTicker, HoverTool, LinearColorMapper
        dark = is_dark()
        palette = DIVERGING_DARK if dark else DIVERGING
        fig = themed_figure(dark=dark, height=260, x_range=(-0.5, 395.5), y_range=(29.5, -0.5),
                            x_axis_label="K (left) and V (right): 64 numbers per KV head", y_axis_label="layer")
        srcs, self._mappers, imgs = [], [], []
        for x in IMAGE_X:
            src = ColumnDataSource(data={"image": [], "x": [], "name": []})
            mapper = LinearColorMapper(palette=palette, low=-1, high=1)
            imgs.append(fig.image("image", x="x", y=-0.5, dw=192, dh=30, source=src, color_mapper=mapper))
            srcs.append(src)
            self._mappers.append(mapper)
        head = CustomJSHover(code="const x = Math.round(value); const c = x < 202 ? x : x - 202; "
                                  "return (x < 202 ? 'K' : 'V') + ', KV head ' + Math.floor(c / 64) + "
                                  "', number ' + (c % 64);")
        fig.add_tools(HoverTool(renderers=imgs, tooltips=[("", "@name"), ("layer", "$y{0}"), ("", "$x{custom}"),
                                                          ("value", "@image{0.000}")], formatters={"$x": head}))
        fig.xaxis.ticker = FixedTicker(ticks=[32, 96, 160, 234, 298, 362])
        fig.xaxis.major_label_overrides = {32: "K 0", 96: "K 1", 160: "K 2", 234: "V 0", 298: "V 1", 362: "V 2"}
        fig.yaxis.ticker = FixedTicker(ticks=[0, 5, 10, 15, 20, 25, 29])
        fig.grid.visible = False
        return fig, srcs

    def _time_figure(self):
        from bokeh.models import BasicTicker, ColumnDataSource, HoverTool
        src = ColumnDataSource(data={"n": [], "cached": [], "again": [], "tip": []})
        fig = themed_figure(dark=is_dark(), height=200, x_axis_label="tokens in the sequence",
                            y_axis_label="ms per token")
        fig.line("n", "again", source=src, color=PALETTE[3], line_width=2, legend_label="recompute everything")
        fig.line("n", "cached", source=src, color=PALETTE[0], line_width=2, legend_label="with the KV cache")
        marks = [fig.scatter("n", "again", source=src, color=PALETTE[3], size=7, marker="square"),
                 fig.scatter("n", "cached", source=src, color=PALETTE[0], size=7)]
        fig.add_tools(HoverTool(renderers=marks, tooltips="@tip"))
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "8pt"
        fig.y_range.start = 0
        fig.xaxis.ticker = BasicTicker(min_interval=1, num_minor_ticks=0)   # whole tokens only
        style_figure(fig, is_dark())                                 # again: the legend exists only now
        return fig, src

    # -- engine and jobs --------------------------------------------------------------------------
    def _start(self) -> None:
        """A fresh private engine with the prompt prefilled (also when the engine first goes live)."""
        if not self.gate.live:
            return
        prompt = self.read_prompt(self._box.value, MAX_CHARS)
        if prompt is None:
            return
        text, self._clip_note = prompt
        self.say(self._clip_note)
        llm = self.gate.llm
        self._close_stepper()
        self._wanted = 1

        def work(job):
            stepper = KVStepper(llm, text)
            stepper.step()
            return stepper
        # seconds on a busy CPU (two private engines made, then the prompt's forward pass): say what runs
        self.say(self._clip_note, progress="Prefilling your prompt in a fresh private engine…")
        self.jobs.submit(work, on_done=self._started,
                         on_error=lambda m: (self.say(self._clip_note), self.gate.error(m)))

    def _started(self, stepper: KVStepper) -> None:
        self._stepper = stepper
        self._kept = (self._clip_note, f"Only the prompt's first {MAX_PROMPT_TOKENS} tokens are used (the limit "
                                       f"is {MAX_PROMPT_TOKENS})." if stepper.cut else None)
        self.say(*self._kept)
        self._prefill.disabled = self._step.disabled = False
        self._paint([view_dict(v) for v in stepper.views], measured(stepper.llm.device_name))

    def _request_step(self) -> None:
        stepper = self._stepper
        if stepper is None or not self.gate.live:
            return
        if stepper.done:
            self.say(f"That is {MAX_STEPS} decode steps, the most this demo runs: press Prefill to start again.")
            return
        self._wanted = min(self._wanted + 1, len(stepper.views) + MAX_QUEUED, MAX_STEPS + 1)
        if not self.jobs.busy:
            self._run_steps(stepper)

    def _run_steps(self, stepper: KVStepper) -> None:
        label = measured(stepper.llm.device_name)

        def work(job):
            views = None
            while len(stepper.views) < self._wanted and not stepper.done:
                job.check()
                n = len(stepper.views)
                where = {"step": n, "tokens": len(stepper.views[-1].token_ids),
                         "queued": max(0, self._wanted - n - 1), "others": busy_requests(stepper.llm)}
                # each post carries the views so far (None: unchanged) and where the step in flight is
                job.post({"views": views, "progress": {**where, "stage": "decode"}})
                stepper.step(progress=lambda stage: job.post({"views": views, "progress": {**where, "stage": stage}}))
                views = [view_dict(v) for v in stepper.views]
                job.post({"views": views, "progress": None})
            return [view_dict(v) for v in stepper.views]

        def progress(posted):
            if posted["views"] is not None and posted["views"] is not self._views:
                self._paint(posted["views"], label)
            self.say(*self._kept, progress=step_progress_text(posted["progress"]))

        def done(views):
            self._paint(views, label)
            self.say(*self._kept)
            if stepper is self._stepper and len(stepper.views) < self._wanted and not stepper.done:
                self._run_steps(stepper)               # presses that came while the last job was finishing
        self.jobs.submit(work, on_done=done, on_progress=progress,
                         on_error=lambda m: (self.say(*self._kept), self.gate.error(m)))

    def _close_stepper(self) -> None:
        stepper, self._stepper = self._stepper, None
        if stepper is not None:
            stepper.close()

    # -- view ---------------------------------------------------------------------------------------
    def _paint(self, views: list[dict], label: str, now: bool = False) -> None:
        self._views = views
        v = views[-1]
        cfg = self.gate.llm.config if self.gate.llm is not None else _smollm2()
        self._blocks.object = blocks_html(v)
        self._bytes.object = bytes_html(v, cfg)
        self._time.object = timing_html(views, label)

        def draw():                                          # Bokeh models: under the document lock
            if v["new_k"]:
                name = f"“{v['pieces'][-1]}” (position {v['num_cached'] - 1})"
                for src, mapper, rows, x in zip(self._kv_src, self._mappers, (v["new_k"], v["new_v"]), IMAGE_X):
                    image = kv_rows(rows)                                  # [layers, kv_heads * head_dim]
                    top = float(np.quantile(np.abs(image), 0.98)) or 1.0    # a few outliers stay saturated
                    mapper.low, mapper.high = -top, top
                    src.data = {"image": [image], "x": [x], "name": [name]}
            decodes = [d for d in views if d["kind"] == "decode"]
            self._t_src.data = {
                "n": [d["num_cached"] for d in decodes], "cached": [d["forward_ms"] for d in decodes],
                "again": [d["recompute_ms"] for d in decodes],
                "tip": [f"{d['num_cached']} tokens: {d['forward_ms']:,.0f} ms with the cache, "
                        f"{d['recompute_ms']:,.0f} ms recomputing · {label}" for d in decodes]}
            self._t_pane.visible = bool(decodes)
        draw() if now else pn.state.execute(draw, schedule=True)


def _smollm2():
    from widgets.modelled.hardware import MODELS
    return MODELS["SmolLM2-135M"]


def bench(llm, repeat: int = 3) -> dict:
    """Server milliseconds (median of `repeat`): a new private engine with the default 30-token prompt
    prefilled, then one decode step with its recomputation beside it."""
    import time
    runs = {"prefill_ms": [], "step_with_recompute_ms": []}
    for _ in range(repeat):
        stepper = KVStepper(llm, DEFAULT_PROMPT)
        t = time.perf_counter()
        stepper.step()
        runs["prefill_ms"].append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        stepper.step()
        runs["step_with_recompute_ms"].append((time.perf_counter() - t) * 1e3)
        stepper.close()
    return {k: round(median(v), 1) for k, v in runs.items()}
