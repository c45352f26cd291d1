"""How often each engine step makes the host wait for the GPU: the GPU tests' check of "one read a step"."""
from __future__ import annotations

import warnings

import torch


def host_waits_per_step(engine) -> list[tuple[int, object]]:
    """Step `engine` until it has nothing left; for each step, (the synchronizing calls CUDA's sync debug
    mode warned about, the step's trace record)."""
    counts = []
    torch.cuda.set_sync_debug_mode("warn")
    try:
        while engine.has_unfinished():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                engine.step()
            counts.append((sum("synchroniz" in str(w.message) for w in caught), engine.trace.records[-1]))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return counts
