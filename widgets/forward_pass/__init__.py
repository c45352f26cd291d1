"""`forward-pass` (chapters 8–9): widget.py (Panel) → view.py (Bokeh, HTML) → compute.py (one `llm.inspect` pass)."""
