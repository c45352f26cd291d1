"""`prefill-decode` (chapter 11): widget.py (Panel) → view.py (HTML) → compute.py (the timed engine); roofline.py."""
