"""One forward pass over the reader's sentence, shared by the widgets that look inside the model.

The attention heatmap (chapters 4–5) and the MLP widget (chapter 7) both read `llm.inspect(text)`:
every layer's attention probabilities, queries, keys and MLP activations for one text. A pass over
64 tokens costs a few hundred milliseconds on two CPU cores, while choosing another layer or head
costs nothing, so the last few passes are kept per server (not per session: two readers with the
same sentence share one pass).

    ins, note, took_s = inspection(llm, "The capital of France is")
    # note: None, or "only the first 64 tokens …"; took_s: how long the pass took when it ran
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict

MAX_TOKENS = 64            # the heatmap's limit: 64 x 64 cells stay readable and fast
MAX_CHARS = 600            # what a text box accepts (64 tokens are rarely more than ~400 characters)
KEEP = 4                   # passes kept: one 64-token pass holds ~40 MB of tensors

_lock = threading.Lock()
_cache: "OrderedDict[tuple, object]" = OrderedDict()


def token_limit_note(llm, text: str, limit: int = MAX_TOKENS) -> str | None:
    """The note a widget shows when only the first ``limit`` tokens of ``text`` are used."""
    n = len(llm.tokenizer.encode(text).ids)
    if n <= limit:
        return None
    return f"Your text has {n:,} tokens: only the first {limit} are shown (the limit is {limit})."


def inspection(llm, text: str, limit: int = MAX_TOKENS):
    """``(llm.inspect(text, limit), note, seconds the pass took)``, from the cache when this text
    was inspected lately."""
    if not text.strip():
        raise ValueError("the text is empty: type a sentence first")
    key = (id(llm), text, limit)
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is llm:
            _cache.move_to_end(key)
            return hit[1:]
    t0 = time.perf_counter()
    ins = llm.inspect(text, max_tokens=limit)   # the LLM lets one reference pass run at a time
    took = time.perf_counter() - t0
    note = token_limit_note(llm, text, limit)
    with _lock:
        _cache[key] = (llm, ins, note, took)
        while len(_cache) > KEEP:
            _cache.popitem(last=False)
    return ins, note, took


def forget() -> None:
    """Drop every kept pass (benchmarks time the pass itself)."""
    with _lock:
        _cache.clear()
