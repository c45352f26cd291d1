"""`page-allocator` (chapter 15): widget.py (Panel) → view.py (HTML) → compute.py (the private engine it pokes)."""
