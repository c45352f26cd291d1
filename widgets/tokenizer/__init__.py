"""`tokenizer` (chapter 2): widget.py (Panel) → view.py (HTML) → compute.py (the engine's two tokenizers)."""
