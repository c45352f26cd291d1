"""How busy the shared engine is right now, for a widget's progress line ("a short note when the server
is busy", issue 30 item 3).

A widget's private engine (a sandbox) and the shared engine that streams other readers' replies run on
the same CPU cores: while the shared engine is stepping, every step here takes longer. The reader
should know that a slow run is the server's load, not the lesson.

    others = busy_requests(llm)       # 0 when the shared engine is idle (or has no stats: a test double)
    busy_note(others)                 # "" or " The server is also generating for 3 other requests: …"
"""
from __future__ import annotations

import time

RECENT_S = 1.0                      # a snapshot older than this means the shared engine has gone idle


def busy_requests(llm, now: float | None = None) -> int:
    """Requests the shared engine was running in its latest step, if that step was in the last second."""
    try:
        stats = llm.stats
    except AttributeError:                # an LLM without a loop (a test double): nothing else runs
        return 0
    if stats is None:
        return 0
    now = time.monotonic() if now is None else now
    return stats.num_running if now - stats.updated_s < RECENT_S else 0


def busy_note(others: int) -> str:
    """One short sentence when other work shares the CPU (with a leading space), else ""."""
    if others <= 0:
        return ""
    who = "another request" if others == 1 else f"{others} other requests"
    return f" The server is also generating for {who}, so this run is slower than usual."
