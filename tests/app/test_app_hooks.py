"""The server's asyncio exception handler: closed websockets are quiet, every other failure still logs."""
from __future__ import annotations

import asyncio
import logging
import threading

import pytest

pytest.importorskip("tornado")
from tornado.websocket import WebSocketClosedError  # noqa: E402

from app.app_hooks import _quiet_closed_websockets  # noqa: E402


def test_closed_websocket_tasks_are_quiet_and_other_errors_still_log(caplog):
    # On a thread of its own: Playwright's sync API (other test modules) may keep a loop running on this one.
    failures = []
    worker = threading.Thread(target=_check_handler, args=(caplog, failures))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert not failures, failures[0]


def _check_handler(caplog, failures):
    try:
        _quiet_and_loud(caplog)
    except BaseException as e:      # noqa: BLE001 - reported on the test's thread
        failures.append(e)


def _quiet_and_loud(caplog):
    loop = asyncio.new_event_loop()
    try:
        _quiet_closed_websockets(loop)

        async def write_to_closed_tab():
            raise WebSocketClosedError()

        async def broken_callback():
            raise ValueError("a real bug")

        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            for coro in (write_to_closed_tab(), broken_callback()):
                task = loop.create_task(coro)
                loop.run_until_complete(asyncio.wait([task]))
                del task, coro              # unretrieved: asyncio reports it when the task is collected
            import gc
            gc.collect()
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert isinstance(errors[0].exc_info[1], ValueError)
    finally:
        loop.close()


def test_a_websocket_closing_after_its_session_was_discarded_is_quiet():
    """Bokeh's on_close asserts the connection still has a session; after the session was discarded (its
    page went away first) the hook only tells the application the client left. A connection that still has
    its session goes through Bokeh's own on_close."""
    from bokeh.server.views.ws import WSHandler

    from app.app_hooks import _tolerate_detached_connections

    class Connection:
        def __init__(self, session):
            self._session, self.lost = session, 0

        @property
        def session(self):
            assert self._session is not None       # what Bokeh's ServerConnection does
            return self._session

    class Session:
        def __init__(self):
            self.told = 0

        def notify_connection_lost(self):
            self.told += 1

    class Application:
        def __init__(self):
            self.lost = []

        def client_lost(self, connection):
            self.lost.append(connection)

    original = WSHandler.on_close
    try:
        _tolerate_detached_connections()
        wrapped = WSHandler.on_close
        _tolerate_detached_connections()                 # twice (a second server in the process): wrapped once
        assert WSHandler.on_close is wrapped is not original
        handler = WSHandler.__new__(WSHandler)
        handler.application = Application()
        handler.close_code, handler.close_reason = 1001, None
        detached = Connection(None)
        handler.connection = detached
        handler.on_close()                              # no AssertionError
        assert handler.application.lost == [detached]
        session = Session()
        attached = Connection(session)
        handler.connection = attached
        handler.on_close()
        assert session.told == 1 and handler.application.lost == [detached, attached]
        with pytest.raises(AssertionError):
            original(_with(handler, Connection(None)))   # what the hook guards against
    finally:
        WSHandler.on_close = original


def _with(handler, connection):
    handler.connection = connection
    return handler
