"""Which widget a ``::: widget NAME {json args}`` line in a chapter builds.

A widget is a folder named after its directive (``kv-cache`` lives in ``widgets/kv_cache/``); its
``widget.py`` registers the class, and the name comes from the folder, so it is written nowhere:

    # widgets/kv_cache/widget.py
    @register
    class KVCacheWidget(Widget):          # built as KVCacheWidget(engine_handle, **directive_args)
        ...

``registry()`` imports every ``widgets/<folder>/widget.py`` the first time it is asked (not when the
``widgets`` package is imported: a toolkit module must not pull in every widget, Panel and torch), and
returns the directive → factory map. A directive whose name is missing is an unknown widget: the page
shows a notice and the content tests fail. A factory that rejects its arguments (a TypeError for an
unknown keyword) shows a notice in the chapter.
"""
from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import Callable

REGISTRY: dict[str, Callable[..., object]] = {}
PACKAGE = Path(__file__).resolve().parents[1]
NOT_WIDGETS = {"common", "modelled", "bench", "examples", "__pycache__"}
_DISCOVERED = threading.Event()
_LOCK = threading.Lock()


def directive_of(module: str) -> str:
    """'widgets.kv_cache.widget' (or any module of that folder) -> 'kv-cache'."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "widgets" or parts[1] in NOT_WIDGETS:
        raise ValueError(f"{module} is not inside a widget folder (widgets/<name>/)")
    return parts[1].replace("_", "-")


def folder_of(name: str) -> Path:
    """The folder of the widget called ``name``: widgets/kv_cache for 'kv-cache'."""
    return PACKAGE / name.replace("-", "_")


def register(factory=None, *, name: str | None = None):
    """``@register`` on a widget class (or a ``factory(engine_handle, **args)`` function) in its folder's
    widget.py: it builds the directive named after that folder."""
    def add(fn):
        key = name or directive_of(fn.__module__)
        if key in REGISTRY and REGISTRY[key] is not fn:
            raise ValueError(f"two widgets are registered as {key!r}")
        REGISTRY[key] = fn
        return fn
    return add(factory) if factory is not None else add


def widget_folders() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir()
                  if p.is_dir() and p.name not in NOT_WIDGETS and (p / "widget.py").exists())


def registry() -> dict[str, Callable[..., object]]:
    """Every widget, registered (imported once, on first use)."""
    if not _DISCOVERED.is_set():
        with _LOCK:
            if not _DISCOVERED.is_set():
                for folder in widget_folders():
                    importlib.import_module(f"widgets.{folder}.widget")
                _DISCOVERED.set()
    return REGISTRY

