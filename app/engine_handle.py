"""One inference engine per server process, shared by every reader's session.

``shared_engine()`` returns the process-wide ``EngineHandle`` (cached with ``pn.state.as_cached``).
Creating the handle is instant; the model is loaded in a background thread that starts with the
server (app/app_hooks.py calls ``handle.start()``; a page that finds it idle starts it too), so the
Tornado event loop never waits on a download or a load, and every session sees the same status:
idle -> loading (with the engine's latest progress line) -> ready (or failed, with the reason).

Readers cannot see the server console, so while loading, the handle also keeps the last line the
engine printed there ("[engine] unpacking: 50%") for the page header to show.

``LLM_EXPLAINER_RANDOM_WEIGHTS=1`` loads the same architecture with random weights and no file:
the UI tests use it when they only check mechanics (the text is gibberish, the pipeline is real).
"""
from __future__ import annotations

import atexit
import io
import logging
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path

from widgets.common.handle import EngineSnapshot, EngineStatus

EXIT_WAIT_S = 2.0          # at exit, how long a model load in progress may take to finish
RANDOM_WEIGHTS_ENV = "LLM_EXPLAINER_RANDOM_WEIGHTS"


_PATH = re.compile(r"\s*(?:\b(?:from|to|in|into)\s+)?(?:/|~/|[A-Za-z]:\\)\S*")


class _ConsoleTee(io.TextIOBase):
    """stderr while the engine loads: everything still goes to the console, and the handle keeps
    the latest "[engine] ..." progress line (the engine reports progress only there)."""

    def __init__(self, inner, keep):
        self.inner, self.keep = inner, keep

    def write(self, text: str) -> int:
        for line in text.replace("\r", "\n").splitlines():
            line = line.strip()
            if line.startswith("[engine] "):
                # Readers see this line: no file paths of the server, and short.
                line = _PATH.sub("", line.removeprefix("[engine] ")).strip()
                self.keep(line if len(line) <= 80 else line[:79] + "…")
        return self.inner.write(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return False                      # one line per update, not a redrawn bar


def _console(msg: str) -> None:
    # The server console is where an operator watches the model download and load.
    print(f"[app] {msg}", file=sys.stderr, flush=True)


class EngineHandle:
    """Lazily started, thread-safe owner of the shared ``engine.LLM``."""

    def __init__(self, random_weights: bool | None = None, **llm_kwargs):
        if random_weights is None:
            random_weights = os.environ.get(RANDOM_WEIGHTS_ENV, "") not in ("", "0", "false", "no")
        self.random_weights = random_weights
        self._llm_kwargs = llm_kwargs
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._status = EngineStatus.IDLE
        self._detail = ""
        self._llm = None
        self._thread: threading.Thread | None = None
        self._progress = ""
        self._t0 = 0.0

    def start(self) -> None:
        """Begin loading in the background if nobody has yet; returns at once."""
        with self._lock:
            if self._status is not EngineStatus.IDLE:
                return
            self._status = EngineStatus.LOADING
            self._t0 = time.perf_counter()
            self._thread = threading.Thread(target=self._load, name="engine-load", daemon=True)
            self._thread.start()
            atexit.register(self._leave_while_loading)

    def _leave_while_loading(self) -> None:
        """The process is exiting (SIGTERM, sys.exit) with the model perhaps still loading. A loading thread
        caught inside torch while the interpreter tears down makes the C++ runtime abort ("terminate called
        without an active exception", exit code -6). Give the load EXIT_WAIT_S to end; if it has not, flush
        the logs and leave at once with code 0 — nothing is lost, nothing was being served."""
        if self._ready.wait(EXIT_WAIT_S):
            close = getattr(self._llm, "close", None)   # loaded meanwhile: its loop may have missed the exit hooks
            if close is not None:
                close()
            return
        _console("exiting while the engine was still loading")
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr, sys.__stderr__):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    def _keep_progress(self, line: str) -> None:
        with self._lock:
            self._progress = line

    def _load(self) -> None:
        t0 = time.perf_counter()
        saved_stderr = sys.stderr
        sys.stderr = _ConsoleTee(saved_stderr, self._keep_progress)
        what = "random weights (LLM_EXPLAINER_RANDOM_WEIGHTS=1)" if self.random_weights else "the default model"
        _console(f"starting the shared engine with {what}; download and load progress follows")
        try:
            # `panel serve` restores sys.path after each run of main.py, and this thread runs later:
            # put the repo root back so the engine package (a sibling of app/) is importable.
            root = str(Path(__file__).resolve().parent.parent)
            if root not in sys.path:
                sys.path.append(root)
            from engine import LLM   # imported here: torch is slow to import, pages that need no engine don't wait
            llm = LLM(random_weights=self.random_weights, **self._llm_kwargs)
        except Exception as exc:     # shown to readers as a notice; full traceback on the console
            traceback.print_exc()
            with self._lock:
                self._status, self._detail = EngineStatus.FAILED, f"{type(exc).__name__}: {exc}"
            _console(f"engine failed to start: {self._detail}")
        else:
            secs = time.perf_counter() - t0
            with self._lock:
                self._llm = llm
                self._status, self._detail = EngineStatus.READY, f"loaded in {secs:.1f} s on {llm.device_name}"
            _console(f"engine ready: {self._detail}")
        finally:
            if isinstance(sys.stderr, _ConsoleTee):
                sys.stderr = saved_stderr
            self._ready.set()

    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            loop = getattr(self._llm, "loop", None)
            if self._status is EngineStatus.READY and loop is not None and not loop.alive:
                return EngineSnapshot(EngineStatus.STOPPED, loop.failure or "the engine loop was closed",
                                      self.random_weights)
            loading = self._status is EngineStatus.LOADING
            return EngineSnapshot(self._status, self._detail, self.random_weights,
                                  self._progress if loading else "",
                                  time.perf_counter() - self._t0 if loading else 0.0)

    @property
    def llm(self):
        """The loaded ``engine.LLM``; raises if it is not ready (callers check ``snapshot()`` first)."""
        with self._lock:
            if self._status is not EngineStatus.READY:
                raise RuntimeError(f"the engine is {self._status.value}")
            return self._llm

    def wait(self, timeout: float | None = None) -> bool:
        """Block until loading ends (for scripts and tests, never on the event loop)."""
        return self._ready.wait(timeout)


def shared_engine() -> EngineHandle:
    """The process-wide handle. Import Panel lazily so this module stays usable without a server."""
    import panel as pn
    return pn.state.as_cached("llm-explainer-engine", EngineHandle)
