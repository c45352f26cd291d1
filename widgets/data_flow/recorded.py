"""GPU measurements shown beside the data-flow model, read from the recorded files (engine/bench/data).

    beside(batch=8, context=2048)  ->  [Figure(what, value, detail, label), ...]

Three figures, each labelled with the device, command and date that recorded it, or, when its file is
missing, MISSING (a reader is told plainly that no measurement shipped; never a developer's to-do):
    copy bandwidth           `kernels`: the fastest a device-to-device copy ran on the H200
    paged-attention kernel   `kernels`: time and achieved bandwidth of one layer's decode attention at
                             the recorded (batch, context) nearest the reader's, SmolLM2's head shapes
    decode step time         `latency` (`python -m engine bench latency --record` on a GPU): rows with
                             a ``batch`` and an inter-token latency, read by ``_step_rows``; any row
                             layout with those two fields is understood
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine import load_recorded
from widgets.common.labels import recorded_label

DECODE_STEP_FILE = "latency"
SMOLLM2_KV_HEADS, SMOLLM2_HEAD_DIM, BF16 = 3, 64, 2
MISSING = "no GPU measurement ships with this page (the diagram's figures are modelled)"


@dataclass(frozen=True, slots=True)
class Figure:
    key: str            # "copy" | "attention" | "step"
    what: str
    value: str          # "4,263 GB/s", or MISSING
    detail: str         # how it compares with the model
    label: str | None   # labels.recorded(...) or None when missing

    @property
    def present(self) -> bool:
        return self.label is not None


def _label(rec: dict) -> str:
    return recorded_label(rec)


def nearest(rows: list[dict], batch: int, context: int) -> dict:
    """The recorded row closest to (batch, context) on log scales (both were swept in powers of two)."""
    return min(rows, key=lambda r: abs(math.log2(r["batch"] / batch)) + abs(math.log2(r["context"] / context)))


def copy_figure(hbm_bandwidth_h200: float) -> Figure:
    what = "HBM copy bandwidth, device to device"
    rec = load_recorded("kernels")
    if rec is None or "copy_bandwidth_gb_s" not in rec["results"]:
        return Figure("copy", what, MISSING, "", None)
    gbs = rec["results"]["copy_bandwidth_gb_s"]
    return Figure("copy", what, f"{gbs:,.0f} GB/s",
                  f"{gbs * 1e9 / hbm_bandwidth_h200:.0%} of the H200's published {hbm_bandwidth_h200 / 1e12:.1f} TB/s",
                  _label(rec))


def attention_figure(batch: int, context: int, hbm_bandwidth_h200: float) -> Figure:
    what = "paged-attention decode kernel, one layer (SmolLM2's heads)"
    rec = load_recorded("kernels")
    rows = (rec or {}).get("results", {}).get("decode") or []
    if not rows:
        return Figure("attention", what, MISSING, "", None)
    row = nearest(rows, batch, context)
    layer_bytes = 2 * SMOLLM2_KV_HEADS * SMOLLM2_HEAD_DIM * BF16 * row["context"] * row["batch"]
    modelled_us = layer_bytes / hbm_bandwidth_h200 * 1e6
    where = ("at this batch and context" if (row["batch"], row["context"]) == (batch, context)
             else f"at batch {row['batch']}, context {row['context']:,}, the recorded shape nearest yours")
    return Figure("attention", what, f"{row['time_us']:.1f} µs, {row['achieved_gb_s']:,.0f} GB/s",
                  f"{where}: reads {layer_bytes / 1e6:.3g} MB of K and V, {row['fraction_of_copy']:.0%} of "
                  f"copy bandwidth; the model's bytes ÷ bandwidth gives {modelled_us:.1f} µs",
                  _label(rec))


def _step_rows(results) -> list[tuple[int, float, str]]:
    """(batch, inter-token latency in ms, what else the row says) from any rows with those fields."""
    found = []
    stack = [results]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(v for v in item.values() if isinstance(v, (list, dict)))
            if not isinstance(item.get("batch"), int):
                continue
            for key, value in item.items():
                scale = _ms_scale(key)
                if scale and isinstance(value, (int, float)):
                    extra = ", ".join(f"{k} {v:,}" for k, v in item.items()
                                      if isinstance(v, int) and ("prompt" in k or "context" in k))
                    found.append((item["batch"], value * scale, extra))
                    break
    return found


def _ms_scale(key: str) -> float | None:
    if not (key.startswith("itl") or key.startswith("decode_step")):
        return None
    for suffix, scale in (("_ms", 1.0), ("_us", 1e-3), ("_s", 1e3)):
        if key.endswith(suffix):
            return scale
    return None


def step_figure(batch: int) -> Figure:
    what = "decode step (inter-token latency), SmolLM2-135M in our engine"
    rec = load_recorded(DECODE_STEP_FILE)
    rows = _step_rows(rec["results"]) if rec else []
    if not rows:
        return Figure("step", what, MISSING, "", None)
    best = min({b for b, _, _ in rows}, key=lambda b: abs(math.log2(b / batch)))
    mine = [(ms, extra) for b, ms, extra in rows if b == best]
    value = "; ".join(f"{ms:.2f} ms" + (f" ({extra})" if extra else "") for ms, extra in mine)
    return Figure("step", what, value, f"at batch {best}" + ("" if best == batch else ", the recorded batch nearest yours"),
                  _label(rec))


def beside(batch: int, context: int, hbm_bandwidth_h200: float) -> list[Figure]:
    return [copy_figure(hbm_bandwidth_h200), attention_figure(batch, context, hbm_bandwidth_h200),
            step_figure(batch)]
