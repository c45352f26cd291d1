"""`rope` (chapter 6): widget.py (Panel) → view.py (HTML, Bokeh arrows) → compute.py (the model's own `llm.rope`)."""
