"""`generate` (chapters 1, 21): widget.py (Panel) → view.py (HTML) → compute.py (one streamed reply from the shared engine)."""
