"""One inference engine per server process, shared by every reader's session.

``shared_engine()`` returns the process-wide ``EngineHandle`` (cached with ``pn.state.as_cached``).
Creating the handle is instant; the model is loaded in a background thread the first time a page
needs it (``handle.start()``), so the Tornado event loop never waits on a download or a load, and
every session sees the same status: idle -> loading -> ready (or failed, with the reason).

``LLM_EXPLAINER_RANDOM_WEIGHTS=1`` loads the same architecture with random weights and no file:
the UI tests use it when they only check mechanics (the text is gibberish, the pipeline is real).
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

RANDOM_WEIGHTS_ENV = "LLM_EXPLAINER_RANDOM_WEIGHTS"


class EngineStatus(str, Enum):
    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


@dataclass(slots=True, frozen=True)
class EngineSnapshot:
    status: EngineStatus
    detail: str            # what the reader is told: "", the load time, or the error
    random_weights: bool


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

    def start(self) -> None:
        """Begin loading in the background if nobody has yet; returns at once."""
        with self._lock:
            if self._status is not EngineStatus.IDLE:
                return
            self._status = EngineStatus.LOADING
            self._thread = threading.Thread(target=self._load, name="engine-load", daemon=True)
            self._thread.start()

    def _load(self) -> None:
        t0 = time.perf_counter()
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
                self._status, self._detail = EngineStatus.READY, f"loaded in {secs:.1f} s on {llm.device}"
            _console(f"engine ready: {self._detail}")
        finally:
            self._ready.set()

    def snapshot(self) -> EngineSnapshot:
        with self._lock:
            return EngineSnapshot(self._status, self._detail, self.random_weights)

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
