"""A page's controls keep their values in range, but the values reach the server over a websocket that
anyone can write to. Every control of every widget, on the real model, is sent what no honest page
sends — numbers far outside its range, NaN, an option it never offered, a number for a checkbox, a
megabyte of text — and the server must refuse or clamp each with a note, never a traceback
(widgets/common/guard.py)."""
from __future__ import annotations

import logging

import pytest

pn = pytest.importorskip("panel")     # not on the GPU machine

from widgets.common.registry import registry  # noqa: E402
from widgets.common.testing import LoadedEngine  # noqa: E402

HOSTILE_NUMBERS = (10**21, -10**21, 999, float("nan"), float("inf"), 3.5)


def hostile_events(w) -> list[dict]:
    """What a hand-written client could send this control."""
    if isinstance(w, (pn.widgets.RadioButtonGroup, pn.widgets.CheckButtonGroup)):
        return [{"active": 99}, {"active": [99]}, {"active": -5}]
    if isinstance(w, pn.widgets.Checkbox):
        return [{"value": 5}, {"value": "yes"}]
    if isinstance(w, pn.widgets.select.SelectBase):
        return [{"value": "no such option"}, {"value": 10**21}]
    if isinstance(w, (pn.widgets.TextInput, pn.widgets.TextAreaInput)):
        return [{"value": "x " * 500_000}, {"value_input": "y " * 500_000}]
    if isinstance(getattr(w, "value", None), (int, float)):
        return [{key: v} for v in HOSTILE_NUMBERS for key in ("value", "value_throttled") if key in w.param]
    return []


def controls(widget) -> list:
    found, seen = [], set()

    def visit(obj):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, pn.widgets.Widget) and not isinstance(obj, pn.widgets.Button):
            found.append(obj)
        inner = getattr(obj, "_composite", None)
        for child in list(getattr(obj, "objects", None) or []) + ([inner] if inner is not None else []):
            visit(child)
    for obj in widget.layout.select(pn.viewable.Viewable):
        visit(obj)
    return found


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_control_refuses_what_no_page_sends_without_a_traceback(name, llm, caplog):
    widget = registry()[name](LoadedEngine(llm))
    widget.__panel__()                                   # what Panel calls when it puts the widget on a page
    said: list[str] = []
    say = widget.say
    widget.say = lambda *notes, **kw: (said.extend(n for n in notes if n), say(*notes, **kw))
    sent = 0
    with caplog.at_level(logging.WARNING):
        for control in controls(widget):
            for event in hostile_events(control):
                before = control.value
                control._process_events(dict(event))
                sent += 1
                v = control.value
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    assert v == v and abs(v) != float("inf"), (name, control, event, v)
                    lo, hi = getattr(control, "start", None), getattr(control, "end", None)
                    if lo is not None and hi is not None and not hasattr(control, "fixed_start"):
                        assert lo <= v <= hi, (name, control, event, v)
                if isinstance(control, pn.widgets.Checkbox):
                    assert isinstance(v, bool)
                if isinstance(control, pn.widgets.select.SelectBase) and not isinstance(v, list):
                    assert v in control.values or v == before, (name, control, v)
        widget.jobs.wait_idle(timeout=300)
    widget.close()
    assert sent > 0 or not controls(widget)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, f"{name}: " + "\n".join(r.getMessage()[:300] for r in errors)
    if sent:
        assert said, f"{name}: {sent} hostile values and not one note to the reader"
