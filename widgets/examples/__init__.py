"""Saved first examples of the widgets (``<name>.json``); ``python -m widgets.examples`` recomputes them.
See widgets/common/examples.py."""
