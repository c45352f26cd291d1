"""`prefix-cache` (chapter 16): widget.py (Panel) → view.py (HTML) → compute.py (the private engines it sends to)."""
