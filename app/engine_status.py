"""The shared engine's state in the page header, on every page: loading (with the engine's progress),
ready (on which device), or failed (and what to do). Readers cannot see the server console."""
from __future__ import annotations

import html

import panel as pn

from widgets.common.gate import in_session, loading_text, watch_engine

LIVENESS_MS = 2000


def status_html(snap) -> str:
    state = snap.status.value
    if state == "ready":
        device = snap.detail.rsplit(" on ", 1)[-1] if " on " in snap.detail else snap.detail
        noise = " · random weights" if snap.random_weights else ""
        return (f'<p class="engine-state" data-state="ready" role="status" title="{html.escape(snap.detail)}">'
                f"Model ready on {html.escape(device)}{noise}</p>")
    if state == "stopped":
        return ('<p class="engine-state" data-state="stopped" role="alert">The engine stopped '
                f'({html.escape(snap.detail[:100])}). Widgets show saved examples; restart '
                "<code>panel serve app</code> to bring it back.</p>")
    if state == "failed":
        return ('<p class="engine-state" data-state="failed" role="alert">Model failed to load '
                f'({html.escape(snap.detail[:100])}). The widgets show saved examples; the server console '
                "has the details, and restarting <code>panel serve app</code> retries.</p>")
    return f'<p class="engine-state" data-state="loading" role="status">{html.escape(loading_text(snap))}</p>'


def engine_status_pane(handle, stylesheets: list[str]) -> pn.pane.HTML:
    """A header pane that follows the engine's state (polls lightly until it is ready or failed)."""
    pane = pn.pane.HTML(status_html(handle.snapshot()), stylesheets=stylesheets, disable_math=True,
                        css_classes=["ex-engine-status"], margin=(0, 0))
    watch_engine(handle, lambda snap: setattr(pane, "object", status_html(snap)))
    if in_session():
        # Once ready, keep an eye on the engine's thread: if it dies, every page says so.
        def alive() -> None:
            snap = handle.snapshot()
            if snap.status.value == "stopped" and 'data-state="stopped"' not in pane.object:
                pane.object = status_html(snap)
        pn.state.add_periodic_callback(alive, period=LIVENESS_MS)
    return pane
