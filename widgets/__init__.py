"""Live widgets that chapters place with ``::: widget NAME {json args}``.

Each module registers its factory with ``widgets.common.register`` (see widgets/common/README.md);
importing this package imports them all, so ``REGISTRY`` maps every directive name to its factory
``factory(engine_handle, **directive_args)`` returning a Panel component.
"""
from __future__ import annotations

from widgets.common.registry import REGISTRY, discover

discover()

__all__ = ["REGISTRY"]
