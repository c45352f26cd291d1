"""Arithmetic about hardware the reader does not have: modelled, and labelled so (no Panel, no engine run)."""
