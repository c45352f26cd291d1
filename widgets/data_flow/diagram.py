"""The data-flow diagram: a Panel custom component (SVG drawn by diagram.js) and the data it draws.

Python does the arithmetic and writes every sentence; diagram.js only lays out and animates what
``diagram_data`` gives it, so a unit test of ``diagram_data`` checks what the reader sees:

    data = diagram_data(flow, figures)
    {"caption": "...", "kinds": [{key, name, color, bytes_text}],
     "levels": [{key, name, short, bytes: {kind: B}, times: {kind: s}, time_s, share, label, readout}],
     "side":   [{key, name, short, step_text, label, readout}],
     "bottleneck": "hbm", "readout": {...}}          # readout = {"title": str, "lines": [str]}

The JS module is served by the app with the page (Panel inlines it into the document; no CDN).
"""
from __future__ import annotations

from pathlib import Path

import param
from panel.custom import JSComponent

from widgets.common.theme import PALETTE
from widgets.data_flow.recorded import Figure
from widgets.data_flow.compute import KIND_NAMES, KINDS, Level, Side, StepFlow

# Okabe–Ito (theme.PALETTE): weights blue, KV reads orange, KV writes green, activations pink.
KIND_COLORS = {"weights": PALETTE[0], "kv_read": PALETTE[1], "kv_write": PALETTE[2], "activations": PALETTE[4]}
KIND_WHAT = {
    "weights": "every parameter, read once and shared by the whole batch (parameters × 2 bytes)",
    "kv_read": "each request's whole cache (kv_bytes_per_token × context × batch); no two requests share it",
    "kv_write": "the new token's K and V, one per request, going back down to HBM",
    "activations": "outputs one kernel hands the next, written and read back (×2) in every layer, and the logits",
}
SHORT_NAMES = {"registers": "registers", "smem": "SMEM/L1", "l2": "L2", "hbm": "HBM"}


class DataFlowDiagram(JSComponent):
    """SVG of the memory ladder with the step's bytes flowing through it; hover or focus for a readout."""
    data = param.Dict(default={}, doc="what to draw: diagram_data(...)")
    _esm = Path(__file__).parent / "diagram.js"


def fmt_bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_time(s: float) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s * 1e9:.3g} ns" if s > 0 else "0"


def fmt_rate(bps: float) -> str:
    return f"{bps / 1e12:.3g} TB/s" if bps >= 1e12 else f"{bps / 1e9:.3g} GB/s"


def _bandwidth_words(lv: Level) -> str:
    mark = {"published": "", "derived": "≈ ", "estimate": "~ "}[lv.bandwidth_kind]
    return f"{mark}{fmt_rate(lv.bandwidth)}"


def level_readout(lv: Level, flow: StepFlow, copy: Figure | None) -> dict:
    lines = [f"Holds: {lv.holds}.",
             f"Capacity: {lv.capacity_text}.",
             f"Bandwidth: {_bandwidth_words(lv)} ({lv.bandwidth_kind}: {lv.source}).",
             f"This step: {fmt_bytes(lv.total_bytes())} ÷ {fmt_rate(lv.bandwidth)} = {fmt_time(lv.time_s())} (modelled)."]
    for kind in KINDS:
        if lv.bytes[kind] > 0:
            lines.append(f"  {KIND_NAMES[kind]}: {fmt_bytes(lv.bytes[kind])} → {fmt_time(lv.time_s(kind))}")
        elif kind == "activations":
            lines.append("  activations: 0 B here, they stay in L2 between kernels")
    if lv is flow.bottleneck() and flow.compute_bound():
        lines.append(f"The slowest rung, yet the arithmetic takes longer still ({fmt_time(flow.flops_time_s)} at the "
                     "bf16 peak): past the ridge point the tensor cores set the pace.")
    elif lv is flow.bottleneck():
        lines.append("The slowest rung: it sets the pace of the whole step.")
    if lv.key == "hbm" and copy is not None and copy.present:
        lines.append(f"Recorded beside the model: {copy.what} {copy.value} ({copy.detail}), "
                     f"{copy.label.replace('`', '')}.")
    return {"title": f"{lv.name}, {lv.where}", "lines": lines}


def side_readout(sd: Side) -> dict:
    rate = f"{fmt_rate(sd.bandwidth)} each way" if sd.bandwidth else "its link is PCIe"
    lines = [f"Reaches: {sd.reaches}."] + ([f"Holds: {sd.capacity_text}."] if sd.capacity_text else []) + [
             f"Rate: {rate} ({sd.source}).",
             f"This step: {fmt_bytes(sd.step_bytes)}" + (f" in {fmt_time(sd.step_time_s())}" if sd.step_bytes else "")
             + f": {sd.step_note} (modelled)."]
    lines += [f"To {what}: {fmt_bytes(n)} in {fmt_time(s)} (modelled)." for what, n, s in sd.whatif]
    return {"title": sd.name, "lines": lines}


def kind_readout(kind: str, flow: StepFlow) -> dict:
    per_level = " · ".join(f"{SHORT_NAMES[lv.key]} {fmt_time(lv.time_s(kind))}" for lv in reversed(flow.levels))
    lines = [f"{fmt_bytes(flow.traffic[kind])} this step per GPU: {KIND_WHAT[kind]}.",
             f"Time at each rung (bytes ÷ bandwidth): {per_level}."]
    return {"title": KIND_NAMES[kind].capitalize(), "lines": lines}


def caption(flow: StepFlow) -> str:
    m = flow.model
    split = "" if flow.gpus == 1 else (f", split over {flow.gpus} GPUs" if flow.gpus else ", too big even for 8 GPUs")
    return (f"One decode step: {m.name}, batch {flow.batch}, context {flow.context:,}, on an {flow.gpu.name}{split}. "
            f"Every time is modelled: bytes ÷ bandwidth.")


def diagram_data(flow: StepFlow, figures: list[Figure]) -> dict:
    copy = next((f for f in figures if f.key == "copy"), None)
    worst = flow.bottleneck().time_s()
    levels = []
    for lv in flow.levels:
        levels.append({
            "key": lv.key, "name": lv.name, "where": lv.where,
            "short": f"{lv.capacity_short} · {_bandwidth_words(lv)}",
            "bytes": dict(lv.bytes), "times": {k: lv.time_s(k) for k in KINDS}, "time_s": lv.time_s(),
            "share": lv.time_s() / worst if worst else 0.0,
            "kind_text": {k: f"{fmt_bytes(lv.bytes[k])} in {fmt_time(lv.time_s(k))}" for k in KINDS},
            "label": f"{fmt_bytes(lv.total_bytes())} in {fmt_time(lv.time_s())}",
            "readout": level_readout(lv, flow, copy)})
    side = []
    for sd in flow.side:
        rate = f"{fmt_rate(sd.bandwidth)} each way" if sd.bandwidth else sd.capacity_text.split(";")[0]
        step = f"step: {fmt_bytes(sd.step_bytes)}" + (f" · {fmt_time(sd.step_time_s())}" if sd.step_bytes else "")
        side.append({"key": sd.key, "name": sd.name, "short": rate, "step_text": step,
                     "readout": side_readout(sd)})
    kinds = [{"key": k, "name": KIND_NAMES[k], "color": KIND_COLORS[k], "bytes_text": fmt_bytes(flow.traffic[k]),
              "readout": kind_readout(k, flow)} for k in KINDS]
    bottleneck = flow.bottleneck()
    return {"caption": caption(flow), "kinds": kinds, "levels": levels, "side": side, "bottleneck": bottleneck.key,
            "pace": "arithmetic" if flow.compute_bound() else bottleneck.key,
            "readout": level_readout(bottleneck, flow, copy)}
