"""`kv-cache` (chapter 12): widget.py (Panel) → view.py (HTML) → compute.py (the private engine it steps)."""
