"""`sampler` (chapter 10): widget.py (Panel) → view.py (Bokeh, HTML) → compute.py (the engine's own sampler)."""
