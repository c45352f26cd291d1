"""What the data-flow widget shows for one choice of model, GPU, batch and context: the diagram's data
(diagram.py, drawn by diagram.js), the summary under it and the recorded figures beside it, as HTML.

    out = render(MODELS, "Llama-3-8B", "H100 SXM", batch=8, context=2048)
    out["diagram"]  -> diagram_data(...)      out["summary"], out["beside"]  -> escaped HTML
"""
from __future__ import annotations

from widgets.common import esc, label_html, modelled
from widgets.modelled.hardware import GPUS
from widgets.data_flow.compute import decode_step_flow
from widgets.data_flow.diagram import diagram_data, fmt_time
from widgets.data_flow.recorded import beside


def render(models: dict, model: str, gpu: str, batch: int, context: int, with_recorded: bool = True) -> dict:
    """Everything the widget shows for one choice: the diagram's data, the summary and the recorded list."""
    flow = decode_step_flow(models[model], GPUS[gpu], batch, context)
    figures = beside(batch, context, GPUS["H200"].bandwidth) if with_recorded else []
    return {"diagram": diagram_data(flow, figures), "summary": summary_html(flow),
            "beside": beside_html(figures)}


def summary_html(flow) -> str:
    hbm, worst = flow.level("hbm"), flow.bottleneck()
    if flow.gpus is None:
        fit = (f"<p class='w-note'>Weights and cache need {flow.resident_bytes * 8 / 1e9:.0f} GB: more than "
               f"8 GPUs hold. Lower the batch or the context.</p>")
    elif flow.gpus > 1:
        fit = (f"<p class='df-fit'>Too big for one {esc(flow.gpu.name)}: split over {flow.gpus} GPUs "
               f"(tensor parallelism, chapter 19), each holding {flow.resident_bytes / 1e9:.1f} GB and reading its "
               f"share; they exchange {flow.side[0].step_bytes / 1e6:.3g} MB over NVLink per step "
               f"({fmt_time(flow.allreduce_time_s)}).</p>")
    else:
        fit = ""
    return (f"<p class='df-summary'>HBM moves {hbm.total_bytes() / 1e9:.3g} GB in {fmt_time(hbm.time_s())}; "
            f"the arithmetic alone would take {fmt_time(flow.flops_time_s)} at the bf16 peak. "
            f"{'The arithmetic' if flow.compute_bound() else esc(worst.name)} sets the pace: about "
            f"{fmt_time(flow.step_time_s())} a step, "
            f"{flow.tokens_per_s():,.0f} tokens/s for the batch. {label_html(modelled('bytes ÷ bandwidth'))}</p>"
            + fit)


def beside_html(figures) -> str:
    items = []
    for f in figures:
        tag = label_html(f.label) if f.present else ""
        detail = f" — {_code(f.detail)}" if f.detail else ""
        items.append(f"<li data-figure='{f.key}'><b>{esc(f.what)}:</b> {esc(f.value)}{detail} {tag}</li>")
    return ("<div class='df-beside'><p class='w-small'>Recorded on a real GPU, beside the model:</p><ul>"
            + "".join(items) + "</ul></div>")


def _code(text: str) -> str:
    """Escaped, with `backticked` commands as <code>."""
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(esc(text).split("`")))


def caption_html(out: dict) -> str:
    return f"<p class='df-caption' aria-live='polite'>{esc(out['diagram']['caption'])}</p>"
