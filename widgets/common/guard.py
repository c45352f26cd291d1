"""Refuse, at the server's edge, input values no honest page can send.

A page's controls keep their values in range (a slider stops at its end, a select offers its options),
but the values arrive from the browser over the websocket, and anyone can send that socket anything:
layer 999 to a 30-layer slider, 10**21 as a seed, 5 to a checkbox, an option the select never had. Panel
hands such a value on as it came; the widget's code then fails deep inside a job (a "job failed"
traceback) or in param's validation (Panel's ERROR with two tracebacks), and the reader learns nothing.

``guard_inputs(layout, say)`` wraps, for every control in ``layout``, the one method through which Panel
turns the browser's message into parameter values (``_process_property_change``). A value that is out of
its control's range is clamped to it; one of the wrong kind (NaN, text for a number, an unknown option)
is dropped, so the control keeps the value it had. Either way ``say`` tells the reader, once, in words,
and nothing is logged as an error.
"""
from __future__ import annotations

import math
from typing import Callable

import panel as pn
import param

# A number input with no range of its own: beyond 2**53 a browser's number is no longer an exact integer.
SAFE_INT = 2**53
VALUE_KEYS = ("value", "value_throttled", "value_input")
_DROP = object()            # "keep the value the control had"


def _bounds(w) -> tuple[float | None, float | None]:
    """The hard range of a numeric control: an editable slider's fixed_start/fixed_end (its start/end are
    only where the slider's track ends), else start/end."""
    lo = getattr(w, "fixed_start", None) if hasattr(w, "fixed_start") else getattr(w, "start", None)
    hi = getattr(w, "fixed_end", None) if hasattr(w, "fixed_end") else getattr(w, "end", None)
    return lo, hi


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _name(w) -> str:
    return getattr(w, "label", None) or getattr(w, "name", None) or "A control"


def checked_value(w, key: str, value):
    """(the value to keep, or ``_DROP``; a note for the reader or None)."""
    name = _name(w)
    p = w.param[key] if key in w.param else None
    if isinstance(p, (param.Number,)) and not isinstance(value, bool) and value is not None:
        if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
            return _DROP, f"{name}: the page sent {str(value)[:40]!r}, which is not a number; kept {getattr(w, key)}."
        lo, hi = _bounds(w)
        if isinstance(p, param.Integer):
            if value != int(value):
                return _DROP, f"{name}: the page sent {value}, which is not a whole number; kept {getattr(w, key)}."
            value = int(value)
            lo = -SAFE_INT if lo is None else lo
            hi = SAFE_INT if hi is None else hi
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            clamped = min(max(value, lo if lo is not None else value), hi if hi is not None else value)
            if abs(clamped - value) <= 1e-9 * max(1.0, abs(clamped)):
                return clamped, None    # a slider's start + n·step can pass its end by a rounding error
            return clamped, (f"{name}: the page sent {_num(value)[:40]}, outside {_num(lo)} to {_num(hi)}; "
                             f"using {_num(clamped)}.")
        return value, None
    if isinstance(w, pn.widgets.select.SelectBase) and key == "value":
        options = w.values if hasattr(w, "values") else list(w.options)
        if isinstance(value, list):
            ok = all(v in options for v in value)
        else:
            ok = value in options
        if not ok:
            return _DROP, f"{name}: the page sent an option it does not offer; kept {getattr(w, key)!r}."
    if p is not None:
        try:
            p._validate(value)                 # param's own check: a bool for a checkbox, text for text
        except Exception:                      # noqa: BLE001 - any refusal means "not this value"
            return _DROP, f"{name}: the page sent a value of the wrong kind; kept the one it had."
    max_length = getattr(w, "max_length", None)
    if isinstance(value, str) and max_length and len(value) > max_length:
        return value[:max_length], f"{name}: the page sent {len(value):,} characters; kept the first {max_length:,}."
    return value, None



def guard_widget(w, say: Callable[[str], None]) -> None:
    if getattr(w, "_guarded", False):
        return
    convert = w._process_property_change

    def process(msg: dict) -> dict:
        try:
            params = convert(msg)
        except Exception:              # noqa: BLE001 - Panel could not even map it (an index past the options)
            params = {k: v for k, v in msg.items() if k not in VALUE_KEYS and k not in ("active",)}
            say(f"{_name(w)}: the page sent a choice it does not offer; kept the one it had.")
            return params
        out = {}
        for key, value in params.items():
            if key not in VALUE_KEYS:
                out[key] = value
                continue
            kept, note = checked_value(w, key, value)
            if note:
                say(note)
            if kept is not _DROP:
                out[key] = kept
        return out
    w._process_property_change = process
    w._guarded = True


def guard_inputs(layout, say: Callable[[str], None]) -> None:
    """Guard every control inside ``layout``, the parts of composite controls included."""
    seen: set[int] = set()

    def visit(obj) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, pn.widgets.Widget) and not isinstance(obj, pn.widgets.Button):
            guard_widget(obj, say)
        inner = getattr(obj, "_composite", None)
        for child in list(getattr(obj, "objects", None) or []) + ([inner] if inner is not None else []):
            visit(child)
    for obj in layout.select(pn.viewable.Viewable):
        visit(obj)
