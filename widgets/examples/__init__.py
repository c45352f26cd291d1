"""`python -m widgets.examples [NAME ...]` recomputes the widgets' saved first examples (each widget's own
example.json) with the real model on the CPU. See widgets/common/examples.py."""
