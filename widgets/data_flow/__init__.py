"""`data-flow` (chapter 13): widget.py → view.py, diagram.py (+ .js) → compute.py (modelled), recorded.py (GPUs)."""
