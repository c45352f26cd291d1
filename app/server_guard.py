"""What the server does besides pages: refuse over-long addresses with a clear answer, publish the shared
engine's numbers as JSON, answer the OpenAI-compatible API, and log what the engine is doing at a
readable rate.

Bokeh builds its Tornado application and HTTP server before our start-up hook runs and keeps no
reference to them a hook can reach, so `install` finds the two objects once, at start-up, by type.

* **Compression.** gzip for every text response (`_Compress`), which Bokeh does not do.
* **Long addresses.** Tornado reads at most 64 KB of request line and headers and, past that, drops
  the connection without a word (the browser shows an empty response, the log shows nothing). We let
  it read up to 4 MiB (twice the longest address Chromium sends) and answer anything longer than
  MAX_URI_BYTES with 414 and a sentence, logged. A request head past 4 MiB is no browser's: its
  connection is still dropped unread (reading it would hold megabytes per hostile connection), but the
  log says so (`_LogDroppedHeads`).
* **/engine.json** (beside /app): the engine's LoopStats as JSON (anonymous totals only: steps, tokens,
  requests running and waiting, KV blocks in use; the pages' sandboxes and their KV MiB; the pages'
  sessions the server still holds). The load
  test and the browser tests read it.
* **/v1/...** (beside /app): the OpenAI-compatible API on the shared engine (app/openai_api.py), so a
  reader's curl or `openai` client request runs in the same batch as the pages' own.
* **The log.** One `[engine]` line every LOG_EVERY_S seconds while the engine is doing something:
  requests running and waiting, steps and tokens per second, KV blocks in use, sessions open.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import time

from tornado.httpserver import HTTPServer
from tornado.ioloop import PeriodicCallback
from tornado.routing import Matcher, PathMatches, Rule
from tornado.web import Application, GZipContentEncoding, RequestHandler

log = logging.getLogger("app.server")

MAX_URI_BYTES = 16 * 1024          # the app's own links are a few hundred bytes; ?sentence= is capped at 1,000
READ_LIMIT_BYTES = 4 * 1024 * 1024     # what Tornado may read of a request's head before it drops it
LOG_EVERY_S = float(os.environ.get("LLM_EXPLAINER_LOG_EVERY_S", "10"))    # the console's [engine] line


class _LongURI(Matcher):
    def match(self, request):
        return {} if len(request.uri) > MAX_URI_BYTES else None


class _TooLong(RequestHandler):
    def _request_summary(self) -> str:     # Tornado's access-log line: the size, not 100 KB of address
        return f"{self.request.method} /{self.request.path[1:40]}… ({len(self.request.uri):,}-byte address) " \
               f"({self.request.remote_ip})"

    def prepare(self):
        log.warning("refused a %s-byte address from %s (the limit is %s)", f"{len(self.request.uri):,}",
                    self.request.remote_ip, f"{MAX_URI_BYTES:,}")
        self.set_status(414)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(f"414 URI Too Long: this address is {len(self.request.uri):,} bytes; the explainer "
                    f"accepts at most {MAX_URI_BYTES:,}. Open the site from its front page.\n")


class _LogDroppedHeads(logging.Filter):
    """Tornado drops a connection whose request head outgrows READ_LIMIT_BYTES and says so only at its
    debug-ish INFO level ("Unsatisfiable read, closing connection"): say it as a warning of ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Unsatisfiable read"):
            return True
        log.warning("dropped a connection whose request head passed %s bytes unanswered (no browser sends "
                    "an address that long)", f"{READ_LIMIT_BYTES:,}")
        return False


def engine_numbers() -> dict:
    """The shared engine's LoopStats as plain JSON-able numbers ({"status": ...} until it is ready)."""
    from app.engine_handle import shared_engine
    handle = shared_engine()
    snap = handle.snapshot()
    out = {"status": snap.status.value}
    if _SERVER["context"] is not None:           # the pages' Bokeh sessions still held by the server
        out["sessions"] = len(_SERVER["context"].sessions)
    if snap.status.value != "ready":
        return out
    loop = handle.llm.loop
    s = loop.stats
    out.update(alive=loop.alive, failure=loop.failure, steps=s.steps, tokens=s.tokens, generated=s.generated,
               preemptions=s.preemptions, running=s.num_running, waiting=s.num_waiting, swapped=s.num_swapped,
               kv_blocks=s.num_blocks, kv_blocks_used=s.num_blocks - s.num_free_blocks,
               tokens_per_s=round(s.tokens_per_s, 1), prefix_query_tokens=s.prefix_query_tokens,
               prefix_hit_tokens=s.prefix_hit_tokens,
               last_step_s=round(s.last.wall_s, 4) if s.last is not None else None)
    boxes = handle.llm.sandboxes()        # the pages' private engines (freed when their page closes)
    out.update(sandboxes=len(boxes), sandbox_kv_mib=round(sum(b.kv_bytes for b in boxes) / 2**20, 1))
    return out


class _EngineJSON(RequestHandler):
    def get(self):
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(engine_numbers()))


_SERVER = {"context": None}      # the app's Bokeh server context, once install() has run


def install(server_context) -> None:
    _SERVER["context"] = server_context
    tornado_log = logging.getLogger("tornado.general")
    if not any(isinstance(f, _LogDroppedHeads) for f in tornado_log.filters):
        tornado_log.addFilter(_LogDroppedHeads())
        if not tornado_log.isEnabledFor(logging.INFO):       # else its INFO line never reaches the filter
            tornado_log.setLevel(logging.INFO)
    for obj in gc.get_objects():
        if isinstance(obj, HTTPServer):
            obj.conn_params.max_header_size = READ_LIMIT_BYTES
        elif isinstance(obj, Application) and hasattr(obj, "_applications"):     # Bokeh's Tornado app
            from app.openai_api import api_rules
            if _Compress not in obj.transforms:
                obj.transforms.append(_Compress)
            obj.default_router.rules[:0] = [Rule(_LongURI(), _TooLong),
                                            Rule(PathMatches(r"/engine\.json"), _EngineJSON),
                                            *(Rule(PathMatches(pattern), handler, kwargs)
                                              for pattern, handler, kwargs in api_rules())]
    PeriodicCallback(_EngineLog(server_context), max(LOG_EVERY_S, 0.5) * 1000).start()


class _Compress(GZipContentEncoding):
    """gzip for pages, scripts, styles and JSON, for clients that accept it: Bokeh serves none of it
    compressed, and a chapter's first load was 4.8 MB (3.9 MB of it Bokeh's and Panel's scripts), about
    1.4 MB compressed. Level 1: 70 ms of one core for a reader's first page, not 270 ms at the default 6,
    for a few percent more bytes (the scripts are then cached for a year). Server-sent events are left
    alone, so each token of an API stream leaves at once."""
    GZIP_LEVEL = 1

    def _compressible_type(self, ctype: str) -> bool:
        return not ctype.startswith("text/event-stream") and super()._compressible_type(ctype)


class _EngineLog:
    """The engine's state in the console every LOG_EVERY_S seconds, only while it changes."""

    def __init__(self, server_context):
        self.server_context, self.last = server_context, None

    def __call__(self) -> None:
        try:
            n = engine_numbers()
        except Exception:                 # the log never takes the server down
            return
        if n.get("status") != "ready" or (self.last and n["steps"] == self.last[1]["steps"]
                                          and n["running"] == self.last[1]["running"]):
            return
        now = time.monotonic()
        if self.last is not None:
            dt = now - self.last[0]
            rates = (f"{(n['steps'] - self.last[1]['steps']) / dt:.1f} steps/s · "
                     f"{(n['tokens'] - self.last[1]['tokens']) / dt:.0f} tokens/s")
        else:
            rates = f"{n['steps']:,} steps so far"
        sessions = len(self.server_context.sessions)
        log.info("[engine] %d running, %d waiting · %s · KV %d/%d blocks · %d sessions%s", n["running"],
                 n["waiting"], rates, n["kv_blocks_used"], n["kv_blocks"], sessions,
                 "" if n["alive"] else f" · ENGINE THREAD STOPPED: {n['failure']}")
        self.last = (now, n)
