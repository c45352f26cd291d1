"""`batching-timeline` (chapter 14): widget.py (Panel) → view.py (Gantt) → compute.py (private engines)."""
