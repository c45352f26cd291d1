"""ApiServer: the OpenAI-compatible API on its own port, on the LLM's shared engine.

    server = ApiServer(llm, port=8000, api_key="sk-local").start()   # a background thread; returns when listening
    server.url                                                        # http://127.0.0.1:8000/v1
    server.stop()
    ApiServer(llm, port=8000).serve_forever()                         # python -m engine serve: until Ctrl-C

The handlers (handlers.py) are plain Tornado routes over an ApiState, so the same routes can be added to
another Tornado application — the Panel app's, where they would share the readers' engine.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading

from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.netutil import bind_sockets
from tornado.web import Application

from .handlers import NotFound, api_routes
from .state import ApiState, ServerLimits

log = logging.getLogger("engine.serve")


def make_app(state: ApiState) -> Application:
    return Application(api_routes(state), default_handler_class=NotFound, default_handler_args={"state": state},
                       log_function=_log_request)


def _log_request(handler) -> None:
    status = handler.get_status()
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    log.log(level, "%d %s %s %.0f ms", status, handler.request.method, handler.request.path,
            1000 * handler.request.request_time())


class ApiServer:
    def __init__(self, llm, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None,
                 limits: ServerLimits | None = None, served_model_name: str | None = None):
        self.llm = llm
        self.state = ApiState(lambda: llm, api_key, limits, served_model_name)
        self.host = host
        self._sockets = bind_sockets(port, host, family=socket.AF_INET)   # here, so a busy port fails at once
        self.port = self._sockets[0].getsockname()[1]
        self._loop: IOLoop | None = None
        self._thread: threading.Thread | None = None
        self._http: HTTPServer | None = None

    @property
    def url(self) -> str:
        """The API's base URL, as an `openai` client's base_url."""
        return f"http://{self.host}:{self.port}/v1"

    def _listen(self) -> None:
        self._http = HTTPServer(make_app(self.state), max_body_size=self.state.limits.max_body_bytes)
        self._http.add_sockets(self._sockets)
        self._loop = IOLoop.current()

    def start(self) -> ApiServer:
        """Serve on a background thread (its own event loop); returns once the server is listening."""
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(asyncio.new_event_loop())
            self._listen()
            loop = self._loop
            ready.set()
            loop.start()
            loop.close(all_fds=True)

        self._thread = threading.Thread(target=run, name="api-server", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def serve_forever(self) -> None:
        """Serve on this thread until Ctrl-C or SIGTERM (both end it cleanly: the caller closes the LLM)."""
        asyncio.set_event_loop(asyncio.new_event_loop())
        self._listen()
        loop = self._loop
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: loop.add_callback_from_signal(loop.stop))
        try:
            loop.start()
        finally:
            self._http.stop()
            self._loop = None

    def stop(self) -> None:
        if self._loop is None:
            return
        loop, self._loop = self._loop, None

        def shut() -> None:
            self._http.stop()
            loop.stop()
        loop.add_callback(shut)
        if self._thread is not None:
            self._thread.join(timeout=10)
