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
    sentence  reader_sentence, SENTENCE_SOURCE            the reader's sentence carried in the URL
    sandboxes page_sandbox, sandbox, release  private engines owned by the page: freed when it closes, bounded
    sharing   Admission, Reader, Refused     server-wide seats and per-reader limits for generations
    passes    request_passes, describe       one request's forward passes from the engine's step trace
    stepper   Stepper                        a row of steps walked with ← → (llm-viz's habit)
    timing    median_ms, timed               server milliseconds for the widgets' benchmark
    testing   browser and example test helpers (imported by tests only)
"""
from widgets.common.base import Widget, notes_html
from widgets.common.cache import cached, inspection
from widgets.common.examples import Example, example, load_example
from widgets.common.gate import EngineGate, watch_engine
from widgets.common.handle import EngineSnapshot, EngineStatus
from widgets.common.jobs import Cancelled, Job, JobRunner
from widgets.common.labels import label_html, measured, modelled, recorded
from widgets.common.passes import RequestPasses, describe, request_passes
from widgets.common.registry import register
from widgets.common.sandboxes import page_sandbox, page_sandboxes, release, sandbox
from widgets.common.sentence import SENTENCE_SOURCE, reader_sentence
from widgets.common.stepper import Stepper
from widgets.common.text import card_table, clamp, clip, esc, plural, show_token
from widgets.common.theme import MARKERS, PALETTE, html_pane, is_dark, stylesheets, style_figure, themed_figure

__all__ = ["Widget", "notes_html", "cached", "inspection", "Example", "example", "load_example", "EngineGate",
           "watch_engine", "EngineSnapshot", "EngineStatus", "Cancelled", "Job", "JobRunner", "label_html",
           "measured", "modelled", "recorded", "RequestPasses", "describe", "request_passes", "register",
           "page_sandbox", "page_sandboxes", "release", "sandbox", "SENTENCE_SOURCE", "reader_sentence",
           "Stepper", "card_table", "clamp", "clip", "esc", "plural", "show_token", "MARKERS", "PALETTE",
           "html_pane", "is_dark", "stylesheets", "style_figure", "themed_figure"]
