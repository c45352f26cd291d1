"""`chunked-prefill` (chapter 17): widget.py (Panel) → view.py (bars, gaps) → compute.py (its private engines)."""
