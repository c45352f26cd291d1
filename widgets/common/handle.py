"""What a widget is given to reach the engine: a handle whose model may still be loading.

    handle.start()             begin loading if nobody has (returns at once)
    handle.snapshot()          an EngineSnapshot: status, detail, progress, elapsed_s, random_weights
    handle.llm                 the loaded ``engine.LLM`` (only once the status is READY)

The app's ``EngineHandle`` (app/engine_handle.py) is the real one, shared by every reader of a server;
unit tests pass ``widgets.common.testing.LoadedEngine``. Both speak these records, defined here, below the
widgets and the app alike, so neither reads the other's strings.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class EngineStatus(str, Enum):
    IDLE = "idle"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"      # it was ready, then its loop thread ended (the reason is in detail)


@dataclass(slots=True, frozen=True)
class EngineSnapshot:
    status: EngineStatus
    detail: str              # what the reader is told: "", the load time, or the error
    random_weights: bool
    progress: str = ""       # while loading: the engine's latest console line, e.g. "unpacking: 50%"
    elapsed_s: float = 0.0   # while loading: seconds since the load began


class EngineHandleLike(Protocol):
    llm: object

    def start(self) -> None: ...

    def snapshot(self) -> EngineSnapshot: ...
