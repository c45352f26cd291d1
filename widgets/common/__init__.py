"""The shared widget toolkit (WIDGETS.md, point 3); widgets/common/README.md shows a widget built on it.

    registry  register(name)              a widget module registers its factory for `::: widget NAME`
    gate      EngineGate, watch_engine    status line; on_ready(llm) once the shared model is loaded
    examples  example, load_example       precomputed first example saved in widgets/examples/NAME.json
    jobs      JobRunner, Job, Cancelled   off-loop work with debounce, supersede, cancel, session end
    labels    measured, recorded, modelled, label_html    where each number comes from
    theme     html_pane, stylesheets, themed_figure, PALETTE, is_dark    looks, light and dark
    text      esc, clip, clamp, show_token                reader input is text; limits with a note
              card_table                                  a table whose rows become cards on a phone
    sentence  reader_sentence, SENTENCE_SOURCE            the reader's sentence carried in the URL
    sandboxes sandbox, page_sandboxes     private engines owned by the page: freed when it closes, bounded
    passes    request_passes, describe    one request's forward passes from the engine's step trace
    stepper   Stepper                     a row of steps walked with ← → (llm-viz's habit)
    testing   browser and example test helpers (imported by tests only)
"""
from widgets.common.examples import Example, example, load_example
from widgets.common.gate import EngineGate, watch_engine
from widgets.common.jobs import Cancelled, Job, JobRunner
from widgets.common.labels import label_html, measured, modelled, recorded
from widgets.common.passes import RequestPasses, describe, request_passes
from widgets.common.registry import register
from widgets.common.sandboxes import page_sandboxes, sandbox
from widgets.common.sentence import SENTENCE_SOURCE, reader_sentence
from widgets.common.stepper import Stepper
from widgets.common.text import card_table, clamp, clip, esc, plural, show_token
from widgets.common.theme import MARKERS, PALETTE, html_pane, is_dark, stylesheets, style_figure, themed_figure

__all__ = ["Example", "example", "load_example", "EngineGate", "watch_engine", "Cancelled", "Job", "JobRunner",
           "label_html", "measured", "modelled", "recorded", "RequestPasses", "describe", "request_passes",
           "register", "sandbox", "page_sandboxes", "SENTENCE_SOURCE", "reader_sentence", "Stepper", "card_table", "clamp", "clip", "esc", "plural", "show_token",
           "MARKERS", "PALETTE", "html_pane", "is_dark", "stylesheets", "style_figure", "themed_figure"]
