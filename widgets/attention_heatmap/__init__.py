"""`attention-heatmap` (chapters 4–5): widget.py (Panel) → view.py (Bokeh, HTML) → compute.py (one `llm.inspect` pass)."""
