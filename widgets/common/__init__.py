"""The shared widget toolkit; widgets/README.md shows a widget built on it.

    base      Widget, notes_html             the base class: example, gate, jobs, notes, run button, page close
    registry  register, registry             `@register` on the widget class: `::: widget NAME` builds it
    handle    EngineStatus, EngineSnapshot   what a widget's engine handle reports (the app's, or a test's)
    gate      EngineGate, watch_engine       status line; on_live(llm) once the shared model is loaded
    examples  example, load_example          precomputed first example saved in the widget's example.json
    jobs      JobRunner, Job, Cancelled      off-loop work with debounce, supersede, cancel, session end
    cache     cached, inspection             per-server work kept with the LLM object (one forward pass shared)
    labels    measured, recorded, modelled, label_html    where each number comes from
    theme     html_pane, stylesheets, themed_figure, PALETTE, is_dark    looks, light and dark
    text      esc, clip, clamp, show_token, card_table    reader input is text; limits with a note
    sentence  reader_sentence, SENTENCE_SOURCE            the reader's sentence carried in the URL, used once chosen
    sandboxes page_sandbox, sandbox, release  private engines owned by the page: freed when it closes, bounded
    sharing   Admission, Reader, Refused     server-wide seats and per-reader limits for generations
    passes    request_passes, describe       one request's forward passes from the engine's step trace
    stepper   Stepper                        a row of steps walked with ← → (llm-viz's habit)
    timing    median_ms, timed               server milliseconds for the widgets' benchmark
    testing   browser and example test helpers (imported by tests only)

Names are looked up lazily: `from widgets.common import esc` imports only widgets/common/text.py, so an
engine-side compute.py that takes `release` from the toolkit does not pull in Panel with it.
"""
from __future__ import annotations

import importlib

_HOME = {
    "Widget": "base",
    "notes_html": "base",
    "cached": "cache",
    "inspection": "cache",
    "Example": "examples",
    "example": "examples",
    "load_example": "examples",
    "EngineGate": "gate",
    "watch_engine": "gate",
    "EngineSnapshot": "handle",
    "EngineStatus": "handle",
    "Cancelled": "jobs",
    "Job": "jobs",
    "JobRunner": "jobs",
    "label_html": "labels",
    "measured": "labels",
    "modelled": "labels",
    "recorded": "labels",
    "recorded_label": "labels",
    "RequestPasses": "passes",
    "describe": "passes",
    "request_passes": "passes",
    "register": "registry",
    "page_sandbox": "sandboxes",
    "page_sandboxes": "sandboxes",
    "release": "sandboxes",
    "sandbox": "sandboxes",
    "SENTENCE_SOURCE": "sentence",
    "reader_sentence": "sentence",
    "Stepper": "stepper",
    "card_table": "text",
    "clamp": "text",
    "clip": "text",
    "esc": "text",
    "plural": "text",
    "show_token": "text",
    "MARKERS": "theme",
    "PALETTE": "theme",
    "html_pane": "theme",
    "is_dark": "theme",
    "stylesheets": "theme",
    "style_figure": "theme",
    "themed_figure": "theme",
}
__all__ = list(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"widgets.common.{_HOME[name]}"), name)
    raise AttributeError(f"module 'widgets.common' has no attribute {name!r}")
