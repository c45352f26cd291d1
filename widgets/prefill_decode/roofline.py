"""The decode roofline (chapter 11, beside the measured prefill-vs-decode panel): tokens per second
against batch size for a chosen model and GPU, modelled by widgets/modelled/hardware.py.

    tokens/s (log)                        compute-bound: each step does batch × FLOPs,
        │                 ┌─────────────  so tokens/s stops growing
        │              ╱  ridge (batch ≈ 317 for Llama-3-8B on an H100)
        │           ╱
        │        ╱     memory-bound: a step reads the weights once for everyone,
        │     ╱        so one more request is one more token almost for free
        └──────────────────────── batch (log)

Where the engine has recorded H200 figures (compute.py reads them) they are drawn beside the model and
labelled recorded: the copy bandwidth the H200 really reached (``kernels``), and decode tokens/s per
batch from the latency benchmark (``latency``) when that file exists; otherwise "not recorded yet".
Pure arithmetic: it updates on the event loop in well under a millisecond per point.
"""
from __future__ import annotations

import math

import panel as pn

from widgets.common import PALETTE, esc, html_pane, is_dark, label_html, modelled, style_figure, themed_figure
from widgets.modelled.hardware import (GPUS, MODELS, decode_step, kv_bytes_per_token, kv_cache_budget,
                                       max_cached_tokens, ridge_batch, ridge_intensity, weight_bytes)
from widgets.prefill_decode.compute import recorded_bandwidth, recorded_latency
from widgets.prefill_decode.view import log_ticks

MODEL_CHOICES = ["SmolLM2-135M", "Llama-3-8B", "Llama-3-70B"]
GPU_CHOICES = ["H100 SXM", "H200", "A100"]
BATCHES = [2**i for i in range(13)]                         # 1 … 4,096: the marked points and the slider
CONTEXTS = {"0 (weights only)": 0, "1,000": 1000, "8,000": 8000}
RECORDED_GPU = "H200"                                        # the GPU the engine's figures were recorded on
RECORDED_MODEL = "SmolLM2-135M"                              # ... with SmolLM2's shapes


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:.2g}"


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s < 0.01 else f"{s * 1e3:.1f} ms"


def roofline(model: str, gpu: str, context: int = 0, bandwidth: float | None = None) -> dict:
    """Everything the plot draws, as plain lists (pure: the unit tests read it)."""
    cfg, g = MODELS[model], GPUS[gpu]
    xs = [10 ** (i / 40 * math.log10(BATCHES[-1])) for i in range(41)]
    curve = [decode_step(cfg, g, b, context, bandwidth=bandwidth) for b in xs]
    fits = max_cached_tokens(cfg, g) // (context + 1)       # requests whose cache fits beside the weights
    points = []
    for b in BATCHES:
        s = decode_step(cfg, g, b, context, bandwidth=bandwidth)
        points.append({"batch": b, "total": s.tokens_per_s, "per_user": s.per_user_tokens_per_s,
                       "time_s": s.time_s, "bound": s.bound, "fits": b <= fits})
    rb = ridge_batch(cfg, g, context)
    return {"model": model, "gpu": gpu, "context": context, "x": xs,
            "total": [s.tokens_per_s for s in curve], "per_user": [s.per_user_tokens_per_s for s in curve],
            "points": points, "ridge_intensity": ridge_intensity(g), "ridge_batch": rb,
            "ridge_tokens_per_s": decode_step(cfg, g, rb, context).tokens_per_s if rb else None,
            "max_batch_in_memory": fits, "weights_fit": kv_cache_budget(cfg, g) > 0}


class RooflinePanel(pn.viewable.Viewer):
    """Model, GPU, batch and context pickers; the modelled curve; the recorded H200 figures beside it."""

    def __init__(self, model: str = "Llama-3-8B", gpu: str = "H100 SXM", batch: int = 64, context: int = 0,
                 **params):
        super().__init__(**params)
        from bokeh.models import BoxAnnotation, ColumnDataSource, FixedTicker, HoverTool, NumeralTickFormatter, Span
        model = model if model in MODEL_CHOICES else "Llama-3-8B"
        gpu = gpu if gpu in GPU_CHOICES else "H100 SXM"
        batch = min(BATCHES, key=lambda b: abs(b - int(batch))) if str(batch).isdigit() else 64
        context_name = next((k for k, v in CONTEXTS.items() if v == context), "0 (weights only)")
        self.model = pn.widgets.Select(label="Model", options=MODEL_CHOICES, value=model, width=150,
                                       css_classes=["rf-model"])
        self.gpu = pn.widgets.Select(label="GPU", options=GPU_CHOICES, value=gpu, width=120, css_classes=["rf-gpu"])
        self.context = pn.widgets.Select(label="Cached tokens per request", options=list(CONTEXTS),
                                         value=context_name, width=190, css_classes=["rf-context"])
        self.batch = pn.widgets.DiscreteSlider(label="Batch size", options=BATCHES, value=batch,
                                               sizing_mode="stretch_width", css_classes=["rf-batch"])
        dark, c = is_dark(), PALETTE
        self._src = {k: ColumnDataSource() for k in ("curve", "points", "ridge", "chosen", "rec_line", "rec_pts")}
        fig = themed_figure(dark=dark, height=300, x_axis_type="log", y_axis_type="log", x_axis_label="batch size",
                            y_axis_label="tokens per second", min_border_right=12)
        fig.line("x", "total", source=self._src["curve"], color=c[0], line_width=2.5, legend_label="all users")
        fig.line("x", "per_user", source=self._src["curve"], color=c[1], line_width=2, line_dash="dashed",
                 legend_label="each user")
        self._ridge_pt = fig.scatter("x", "y", source=self._src["ridge"], color=c[3], size=13, marker="diamond",
                                     legend_label="ridge")
        hovered = [fig.scatter("batch", "total", source=self._src["points"], color=c[0], size=7,
                               fill_color="fill", marker="circle"),
                   fig.scatter("batch", "per_user", source=self._src["points"], color=c[1], size=6, marker="square",
                               fill_color="fill_user"),
                   self._ridge_pt,
                   fig.scatter("batch", "total", source=self._src["chosen"], color=c[2], size=15, marker="circle",
                               fill_alpha=0.35, line_width=2.5, legend_label="your batch")]
        self._rec_line = fig.line("x", "total", source=self._src["rec_line"], color=c[4], line_width=1.5,
                                  line_dash="dotdash", legend_label="at the H200's recorded copy speed")
        self._rec_pts = fig.scatter("batch", "total", source=self._src["rec_pts"], color=c[4], size=10,
                                    marker="star", legend_label="engine on H200 (recorded)")
        hovered.append(self._rec_pts)
        fig.add_tools(HoverTool(renderers=hovered, tooltips="@tip"))
        self._ridge_span = Span(dimension="height", line_color=c[3], line_dash="dotted", line_width=1.5)
        self._full = BoxAnnotation(fill_color="#888888", fill_alpha=0.15, line_alpha=0)
        fig.add_layout(self._ridge_span)
        fig.add_layout(self._full)
        fig.xaxis.ticker = FixedTicker(ticks=[1, 4, 16, 64, 256, 1024, 4096])
        fig.yaxis.ticker = log_ticks((1,))
        fig.xaxis.formatter = fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size = "8pt"
        fig.legend.spacing = 0
        fig.legend.padding = 4
        self._legend_items = list(fig.legend[0].items)      # the ridge and the recorded ones show only when drawn
        style_figure(fig, dark)                             # again: the legend exists only now
        self.figure = fig
        self._rec_notes: list[str] = []
        self._readout = html_pane("", ["rf-readout"])
        for w in (self.model, self.gpu, self.context, self.batch):
            w.param.watch(lambda e: pn.state.execute(self.update, schedule=True), "value")   # under the doc lock
        controls = pn.FlexBox(self.model, self.gpu, self.context, flex_wrap="wrap", sizing_mode="stretch_width")
        self._layout = pn.Column(controls, self.batch, pn.pane.Bokeh(fig, sizing_mode="stretch_width"),
                                 self._readout, sizing_mode="stretch_width", css_classes=["rf-panel"])
        self.update()

    def __panel__(self):
        return self._layout

    def update(self) -> dict:
        d = roofline(self.model.value, self.gpu.value, CONTEXTS[self.context.value])
        n = d["max_batch_in_memory"]
        self._src["curve"].data = {"x": d["x"], "total": d["total"], "per_user": d["per_user"]}
        pts = d["points"]
        tips = [f"batch {p['batch']:,}: {_fmt(p['total'])} tokens/s for all, {_fmt(p['per_user'])} for each user; "
                f"step {_ms(p['time_s'])}, {p['bound']}-bound" + ("" if p["fits"] else "; its KV cache does not fit")
                + " · modelled" for p in pts]
        self._src["points"].data = {"batch": [p["batch"] for p in pts], "total": [p["total"] for p in pts],
                                    "per_user": [p["per_user"] for p in pts], "tip": tips,
                                    "fill": [PALETTE[0] if p["fits"] else "#00000000" for p in pts],
                                    "fill_user": [PALETTE[1] if p["fits"] else "#00000000" for p in pts]}
        rb = d["ridge_batch"]
        if rb is not None and rb <= BATCHES[-1]:
            self._ridge_span.location, self._ridge_span.visible = rb, True
            self._src["ridge"].data = {"x": [rb], "y": [d["ridge_tokens_per_s"]], "tip": [
                f"ridge: batch ≈ {rb:,.0f}, where a step does {d['ridge_intensity']:.0f} FLOPs per byte it reads "
                f"(peak FLOP/s ÷ bandwidth) · modelled"]}
        else:
            self._ridge_span.visible = False
            self._src["ridge"].data = {"x": [], "y": [], "tip": []}
        self._full.left, self._full.visible = max(n, 1), n < BATCHES[-1]
        chosen = next(p for p in pts if p["batch"] == self.batch.value)
        self._src["chosen"].data = {"batch": [chosen["batch"]], "total": [chosen["total"]],
                                    "tip": [tips[pts.index(chosen)]]}
        self._recorded(d)
        drawn = {self._rec_line: bool(self._src["rec_line"].data["x"]), self._rec_pts: bool(self._src["rec_pts"].data["batch"]),
                 self._ridge_pt: bool(self._src["ridge"].data["x"])}      # a legend entry without its mark misleads
        self.figure.legend[0].items = [i for i in self._legend_items if drawn.get(i.renderers[0], True)]
        self._readout.object = self._readout_html(d, chosen)
        return d

    def _recorded(self, d: dict) -> None:
        """The H200's recorded figures beside the model (only for what they measured)."""
        self._rec_notes = []
        empty = {"x": [], "total": []}
        self._src["rec_line"].data, self._src["rec_pts"].data = empty, {"batch": [], "total": [], "tip": []}
        if d["gpu"] != RECORDED_GPU:
            return
        bw = recorded_bandwidth()
        if bw is None:
            self._rec_notes.append("The H200's copy bandwidth: not recorded yet.")
        else:
            line = roofline(d["model"], d["gpu"], d["context"], bandwidth=bw[0])
            self._src["rec_line"].data = {"x": line["x"], "total": line["total"]}
            self._rec_notes.append(f"Dash-dot line: the same model at the {bw[0] / 1e12:.2f} TB/s an H200 really "
                                   f"copied, not the 4.8 TB/s of its datasheet · {label_html(bw[1])}")
        latency = recorded_latency()
        rows, lab, device = latency or ([], "", "")
        pts = [p for p in rows if p["itl_ms"] and d["model"] == RECORDED_MODEL]
        if pts:
            self._src["rec_pts"].data = {
                "batch": [p["batch"] for p in pts], "total": [p["batch"] * 1e3 / p["itl_ms"] for p in pts],
                "tip": [f"engine on {device}: batch {p['batch']}, {p['prompt_tokens']:,}-token prompts, "
                        f"{p['itl_ms']:.2f} ms per step = {_fmt(p['batch'] * 1e3 / p['itl_ms'])} tokens/s · {lab}"
                        for p in pts]}
            self._rec_notes.append(f"Stars: our engine's decode steps on the H200 · {label_html(lab)}")
        elif latency is None:
            self._rec_notes.append("Our engine's own decode steps on the H200: not recorded yet.")
        else:
            self._rec_notes.append(f"Our engine's H200 decode steps were recorded for {RECORDED_MODEL} only.")

    def _readout_html(self, d: dict, p: dict) -> str:
        cfg = MODELS[d["model"]]
        rb = d["ridge_batch"]
        ridge = (f"The ridge is at batch ≈ {rb:,.0f}: {d['ridge_intensity']:.0f} FLOPs per byte on the {esc(d['gpu'])}."
                 if rb else f"With {d['context']:,} cached tokens per request there is no ridge: each request's own "
                 "cache reads grow as fast as its arithmetic, so decode stays memory-bound at any batch.")
        n = d["max_batch_in_memory"]
        kv = kv_bytes_per_token(cfg) * (d["context"] + 1) / 1e9
        if not d["weights_fit"]:
            mem = (f"{esc(d['model'])}'s {weight_bytes(cfg) / 1e9:,.0f} GB of bf16 weights leave no room for a KV "
                   f"cache in 90% of one {esc(d['gpu'])}'s {GPUS[d['gpu']].memory_bytes / 1e9:,.0f} GB (chapter 19 "
                   "splits them over several GPUs); modelled as if they fitted.")
        elif n < BATCHES[-1]:
            mem = (f"Shaded: beyond batch {n:,} the KV cache ({kv:.2g} GB per request) no longer fits beside the "
                   "weights (90% of memory minus weights, chapter 12).")
        else:
            mem = ""
        head = (f'<p class="rf-line"><b>Batch <span class="rf-batch-value">{p["batch"]:,}</span></b> · '
                f'{esc(d["model"])} on {esc(d["gpu"])}: one step takes <b>{_ms(p["time_s"])}</b> '
                f'({p["bound"]}-bound), <b class="rf-total">{_fmt(p["total"])}</b> tokens/s for all users, '
                f'<b>{_fmt(p["per_user"])}</b> for each. {label_html(modelled("roofline: bytes ÷ bandwidth vs FLOPs ÷ peak"))}</p>')
        notes = [ridge, mem] + self._rec_notes
        return head + "".join(f'<p class="w-small">{n}</p>' for n in notes if n)
