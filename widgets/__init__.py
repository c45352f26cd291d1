"""Live widgets that chapters place with ``::: widget NAME {json args}``.

``REGISTRY`` maps a directive name to a factory ``factory(engine_handle, **directive_args)`` that
returns a Panel component. The engine handle is the app's shared ``EngineHandle``: a widget calls
``handle.start()`` when it first needs the model and reads ``handle.snapshot()`` / ``handle.llm``.
A name missing here is an unknown directive: the page shows a notice and the tests fail.
"""
from __future__ import annotations

from typing import Callable

from widgets.generate import make_generate

REGISTRY: dict[str, Callable[..., object]] = {
    "generate": make_generate,
}

__all__ = ["REGISTRY"]
