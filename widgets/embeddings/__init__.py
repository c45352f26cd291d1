"""`embeddings` (chapter 3): widget.py (Panel) → view.py (HTML, the Bokeh map) → compute.py (the embedding table)."""
