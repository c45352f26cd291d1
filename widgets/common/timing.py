"""Server milliseconds per widget update, for each widget module's ``bench(llm) -> dict`` (widgets/README.md,
point 6), which ``python -m widgets.bench`` collects into its JSON:

    def bench(llm) -> dict:
        return {"new sentence": median_ms(lambda: compute(llm, "The capital of France is"))}

    timed(lambda: update(...), repeats=7)   -> {"median_ms": 12.3, "p90_ms": 15.1}

Medians of a few runs: a benchmark, never a test (no timing is ever asserted).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable


def _runs_ms(fn: Callable[[], object], repeat: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return sorted(runs)


def median_ms(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> dict:
    """{"median_ms", "max_ms", "runs"} of ``fn()`` in milliseconds, after ``warmup`` untimed calls."""
    runs = _runs_ms(fn, repeat, warmup)
    return {"median_ms": round(statistics.median(runs), 2), "max_ms": round(runs[-1], 2), "runs": repeat}


def timed(fn: Callable[[], object], repeats: int = 7, warmup: int = 0) -> dict:
    """Median and 90th percentile of ``repeats`` calls of ``fn``, in milliseconds, after ``warmup``
    untimed calls (give one if its first run does one-off work)."""
    runs = _runs_ms(fn, repeats, warmup)
    return {"median_ms": round(statistics.median(runs), 2), "p90_ms": round(runs[int(0.9 * (len(runs) - 1))], 2)}
