"""Work computed from the shared model, kept per server (not per page): two readers with the same sentence
share one forward pass, and the tokenizer's sample table is counted once.

    stats = cached(llm, "tokenizer-samples", (), lambda: sample_stats(llm))
    ins, note, took_s = inspection(llm, "The capital of France is")     # llm.inspect, the last few kept

Entries live with the ``LLM`` object itself (a weak reference): a server that loads another model starts
afresh, and nothing here keeps a model alive. Each kind of entry keeps its newest ``keep`` values.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")

_STORE: "weakref.WeakKeyDictionary[object, dict[str, OrderedDict]]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def cached(llm, kind: str, key: Hashable, compute: Callable[[], T], keep: int = 64) -> T:
    """``compute()`` for (kind, key) of this llm, or the value kept from an earlier call. Computed outside
    the lock: two first callers may both compute, and one result is kept."""
    with _LOCK:
        entries = _STORE.setdefault(llm, {}).setdefault(kind, OrderedDict())
        if key in entries:
            entries.move_to_end(key)
            return entries[key]
    value = compute()
    with _LOCK:
        entries = _STORE.setdefault(llm, {}).setdefault(kind, OrderedDict())
        entries[key] = value
        while len(entries) > keep:
            entries.popitem(last=False)
    return value


def forget(llm=None) -> None:
    """Drop what is kept (for one llm, or all): benchmarks time the work itself."""
    with _LOCK:
        if llm is None:
            _STORE.clear()
        else:
            _STORE.pop(llm, None)


# -- one forward pass over the reader's sentence, for the widgets that look inside the model ----------
# The attention heatmap (chapters 4–5), the MLP widget (7), the RoPE widget (6) and the forward pass (8–9)
# read `llm.inspect(text)`: every layer's hidden states, attention, queries, keys and MLP activations.
# A 64-token pass costs a few hundred ms on two CPU cores and holds ~80 MB: the last four are kept.
MAX_TOKENS = 64            # the heatmap's limit: 64 x 64 cells stay readable and fast
MAX_CHARS = 600            # what a text box accepts (64 tokens are rarely more than ~400 characters)
KEEP_PASSES = 4


def token_limit_note(llm, text: str, limit: int = MAX_TOKENS) -> str | None:
    """The note a widget shows when only the first ``limit`` tokens of ``text`` are used."""
    n = len(llm.tokenizer.encode(text).ids)
    if n <= limit:
        return None
    return f"Your text has {n:,} tokens: only the first {limit} are shown (the limit is {limit})."


def inspection(llm, text: str, limit: int = MAX_TOKENS):
    """``(llm.inspect(text, limit), note, seconds the pass took)``, kept for the newest few texts."""
    if not text.strip():
        raise ValueError("the text is empty: type a sentence first")

    def run():
        t0 = time.perf_counter()
        ins = llm.inspect(text, max_tokens=limit)   # the LLM lets one reference pass run at a time
        return ins, token_limit_note(llm, text, limit), time.perf_counter() - t0
    return cached(llm, "inspect", (text, limit), run, keep=KEEP_PASSES)
