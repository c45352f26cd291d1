"""`parallelism` (chapter 19): widget.py → view.py → compute.py (the real split), modelled.py (70B on 8 GPUs)."""
