"""Benchmarks that print JSON (`python -m engine bench ...`)."""
