"""`speculative-decoding` (chapter 18): widget.py → view.py → compute.py (a private engine), simulator.py."""
