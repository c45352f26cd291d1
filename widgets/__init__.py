"""Live widgets that chapters place with ``::: widget NAME {json args}``: one folder per widget, named after
its directive (widgets/README.md). ``widgets.REGISTRY`` (or ``widgets.common.registry.registry()``) maps
every directive to its factory; importing this package imports none of them.
"""
from __future__ import annotations


def __getattr__(name: str):
    if name == "REGISTRY":                       # looked up lazily: discovery imports every widget
        from widgets.common.registry import registry
        return registry()
    raise AttributeError(name)
