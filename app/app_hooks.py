"""Server lifecycle hooks: Bokeh runs ``on_server_loaded`` once when `panel serve app` starts.

The shared engine starts loading right then, in its background thread, so the first reader does not
wait for the model and the page header can already say "loading…" or "ready" on every page.
"""
from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)


def on_server_loaded(server_context) -> None:
    if _ROOT not in sys.path:           # this hook runs before any page: the repo root is not on the path yet
        sys.path.insert(0, _ROOT)
    from app.engine_handle import shared_engine
    from app.server_guard import install
    _log_like_bokeh()
    _quiet_closed_websockets(asyncio.get_event_loop())
    _tolerate_detached_connections()
    shared_engine().start()
    install(server_context)


def _log_like_bokeh() -> None:
    """`panel serve` sets only the "bokeh" logger to its --log-level (info by default) and leaves the root
    at WARNING, so the app's own info lines (the periodic [engine] line, pages freeing their sandboxes)
    would be dropped. Ours follow the same level, through the root handler and format bokeh set up."""
    level = logging.getLogger("bokeh").getEffectiveLevel()
    for name in ("app", "widgets"):
        logging.getLogger(name).setLevel(level)


def _quiet_closed_websockets(loop: asyncio.AbstractEventLoop) -> None:
    """A reader closing a tab while the server still sends to it is a normal end, not an error.

    Tornado writes each websocket message in a task of its own; when the socket has closed meanwhile,
    that task ends with ``WebSocketClosedError`` and nobody awaits it, so asyncio logs "Task exception
    was never retrieved" with a traceback for every closed tab. Those go to a one-line debug message;
    every other unhandled exception still reaches the default handler.
    """
    from tornado.iostream import StreamClosedError
    from tornado.websocket import WebSocketClosedError

    previous = loop.get_exception_handler()
    log = logging.getLogger("app.websocket")

    def handler(loop, context):
        if isinstance(context.get("exception"), (WebSocketClosedError, StreamClosedError)):
            log.debug("a message to a closed websocket was dropped")
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _tolerate_detached_connections() -> None:
    """A websocket that closes after Bokeh discarded its session is a normal end, not an error.

    When a page goes away, Bokeh's cleanup may discard its session and detach the connection from it
    before the websocket's own close arrives; Bokeh's ``WSHandler.on_close`` then reads
    ``connection.session`` and fails ``assert self._session is not None`` — a traceback in the log for
    every such tab (seen when pages open and close quickly). For such a connection the only thing left
    to do is what on_close does last: tell the application the client is gone.
    """
    from bokeh.server.views.ws import WSHandler

    original = WSHandler.on_close
    if getattr(original, "tolerates_detached", False):
        return
    log = logging.getLogger("app.websocket")

    def on_close(self) -> None:
        connection = self.connection
        if connection is not None and getattr(connection, "_session", True) is None:
            log.debug("a websocket closed after its session was discarded")
            self.application.client_lost(connection)
            return
        original(self)

    on_close.tolerates_detached = True
    WSHandler.on_close = on_close
