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
