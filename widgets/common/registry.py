"""Which widget a ``::: widget NAME {json args}`` line in a chapter builds.

A widget module registers its factory; nothing else needs editing to add a widget:

    # widgets/tokenizer.py
    @register("tokenizer")
    def make_tokenizer(engine, **args) -> pn.viewable.Viewable:   # engine: the app's EngineHandle
        return TokenizerWidget(engine, **args)                      # args: the directive's JSON

``discover()`` imports every module of the ``widgets`` package (except the toolkit, the saved examples
and the benchmarks, ``bench*.py``), so each registers itself; ``widgets.REGISTRY`` is the result. A directive whose
name is missing is an unknown widget: the page shows a notice and the content tests fail. A factory
that rejects its arguments (a TypeError for an unknown keyword) shows a notice in the chapter.
"""
from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Callable

REGISTRY: dict[str, Callable[..., object]] = {}
_NOT_WIDGETS = {"common", "examples"}        # and bench*.py: benchmarks, not widgets


def register(name: str):
    """Decorator: ``factory(engine_handle, **directive_args)`` builds the widget called ``name``."""
    def add(factory):
        if name in REGISTRY and REGISTRY[name] is not factory:
            raise ValueError(f"two widgets are registered as {name!r}")
        REGISTRY[name] = factory
        return factory
    return add


def discover() -> dict[str, Callable[..., object]]:
    """Import every widget module so it registers; returns the registry."""
    package = Path(__file__).resolve().parents[1]
    for info in pkgutil.iter_modules([str(package)]):
        if info.name.startswith(("_", "bench")) or info.name in _NOT_WIDGETS:
            continue
        importlib.import_module(f"widgets.{info.name}")
    return REGISTRY
