"""`engine-dashboard` (cover, chapter 14): the shared engine as it runs — this reader's requests among
everyone else's.

The engine publishes one small snapshot after each step (compute.py reads it); every open dashboard
looks at that same record a few times a second and repaints (view.py) only when a newer step has run.
No session asks the engine anything, so a hundred open dashboards cost the engine nothing.
"""
from __future__ import annotations

import panel as pn

from widgets.common import Widget, example, html_pane, measured, register
from widgets.common.gate import in_session
from widgets.common.sharing import ADMISSION, reader_of
from widgets.engine_dashboard.compute import busy_view, dashboard_view
from widgets.engine_dashboard.view import dashboard_html

REFRESH_MS = 250


@example
def dashboard_example(llm) -> dict:
    return busy_view(llm)


@register
class EngineDashboard(Widget):
    css = "dash"
    live_text = "{model} on {device}, every step"

    def __init__(self, engine, **params):
        super().__init__(engine, **params)
        self._reader = reader_of(pn.state.curdoc)
        first = dashboard_html(self.example.data, self.example.label) if self.example else ""
        self._out = html_pane(first, ["dash-pane"])
        self._seen = None
        self.layout = pn.Column(
            self.title("<b>Live · the shared engine</b> — every reader of this site is served by one engine. "
                       "Each step's batch appears here: your requests among other readers' (anonymous)."),
            self.gate.pane, self._out, sizing_mode="stretch_width", css_classes=["dash-widget"])
        self.gate.start()

    def on_live(self, llm) -> None:
        self.refresh()
        if in_session():               # the periodic callback ends with the session
            pn.state.add_periodic_callback(self.refresh, period=REFRESH_MS)

    def refresh(self) -> None:
        """Repaint if a newer step (or command) has been published: one attribute read otherwise."""
        llm = self.gate.llm
        stats = llm.stats
        key = (stats.updated_s, ADMISSION.waiting, frozenset(self._reader.requests))
        if key == self._seen:
            return
        self._seen = key
        view = dashboard_view(stats, self._reader.requests, ADMISSION.waiting)
        self._out.object = dashboard_html(view, measured(llm.device_name) + ", live")


def bench(llm) -> dict:
    """Server milliseconds of one repaint per open page (every REFRESH_MS while the engine steps): read the
    shared snapshot, build the view, render the HTML. The engine publishes the snapshot once per step."""
    from engine import SamplingParams
    from widgets.common.timing import median_ms
    llm.generate(["a batch", "for the snapshot"], SamplingParams(max_tokens=4))   # a last step with a batch

    def repaint():
        return dashboard_html(dashboard_view(llm.stats, {"a"}, ADMISSION.waiting), measured(llm.device_name))
    return {"repaint_ms": median_ms(repaint, repeat=20)}
