"""`engine-dashboard` (cover, chapter 14): widget.py (Panel) → view.py (HTML) → compute.py (the engine's per-step snapshot)."""
