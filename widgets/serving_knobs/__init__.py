"""`serving-knobs` (chapter 20): widget.py (Panel) → view.py (frontier, runs) → compute.py (a private engine)."""
