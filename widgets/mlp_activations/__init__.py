"""`mlp-activations` (chapter 7): widget.py (Panel) → view.py (Bokeh, HTML) → compute.py (one `llm.inspect` pass)."""
