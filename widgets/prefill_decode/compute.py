"""The engine side of the prefill-vs-decode widget (chapter 11): the reader's sentence prefilled at
several lengths on the shared engine, and the H200 rows the engine recorded.

    the sentence ─► token ids, repeated to 16, 64, 128 … tokens ─► the shared engine, 8 new tokens
                    (each run starts with a fresh number, so       │
                     the prefix cache cannot skip the prefill)      ▼
                                            TTFT = submit → first token;  ITL = median gap after it

Times are taken on this thread (submit to each token) and read from the engine's step trace (the
prefill step's own wall time, prompt tokens the prefix cache supplied, steps shared with other readers).
"""
from __future__ import annotations

import itertools
import random
import time
from statistics import median

from widgets.common.labels import recorded_label
from widgets.common.passes import request_passes

DEFAULT_SENTENCE = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun."
LENGTHS = (16, 64, 128, 256, 512, 1024)
NEW_TOKENS = 8
_RUNS = itertools.count(random.SystemRandom().randrange(10_000, 90_000))   # fresh prompt heads


def ladder(longest: int) -> list[int]:
    return [n for n in LENGTHS if n <= longest]


def prompt_ids(tokenizer, sentence: str, length: int, run: int) -> list[int]:
    """`length` token ids: "Run 12345:" then the sentence's tokens over and over."""
    head = tokenizer.encode(f"Run {run}:").ids
    body = tokenizer.encode(" " + (sentence.strip() or DEFAULT_SENTENCE)).ids
    return (head + body * (length // len(body) + 1))[:length]


def measure_one(llm, ids: list[int], new_tokens: int = NEW_TOKENS, check=lambda: None) -> dict:
    """Prefill `ids` and decode `new_tokens` greedily; times from this thread and the engine's trace."""
    from engine import SamplingParams
    start, times, request_id = llm.num_steps(), [], None
    t0 = time.perf_counter()
    stream = llm.stream({"prompt_token_ids": ids},
                        SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True))
    try:
        for ev in stream:
            times.append(time.perf_counter())
            request_id = ev.request_id
            check()                      # raises Cancelled: closing the stream aborts the request
    finally:
        stream.close()
    p = request_passes(llm.trace_since(start), request_id)
    gaps = [b - a for a, b in zip(times, times[1:])]
    return {"tokens": len(ids), "ttft_ms": (times[0] - t0) * 1e3, "itl_ms": median(gaps) * 1e3,
            "prefill_ms": p.prefill_s * 1e3, "cached": p.cached_prompt_tokens, "shared": p.shared_passes}


def measure(llm, sentence: str, lengths, new_tokens: int = NEW_TOKENS, check=lambda: None,
            post=lambda points: None) -> list[dict]:
    """One point per prompt length, shortest first (a tiny warm-up run first, not reported)."""
    measure_one(llm, prompt_ids(llm.tokenizer, sentence, 16, next(_RUNS)), new_tokens, check)
    points = []
    for n in lengths:
        check()
        points.append(measure_one(llm, prompt_ids(llm.tokenizer, sentence, n, next(_RUNS)), new_tokens, check))
        post(list(points))
    return points


# -- what the engine recorded on a GPU (engine/bench/data/*.json) -----------------------------------
def recorded_latency_rows(data: dict | None) -> list[dict]:
    """Rows of a recorded latency run (``load_recorded("latency")``): dicts with "batch" and "itl_ms" or
    "ttft_ms", and "prompt_tokens" (or "context"), found in ``results`` itself or one level down (e.g.
    ``results["ours"]``). Rows that lack them are skipped, so an unexpected file shows nothing rather
    than something wrong."""
    if not data:
        return []
    results = data.get("results", {})
    lists = [results] if isinstance(results, list) else [v for v in results.values() if isinstance(v, list)]
    rows = [r for rows in lists for r in rows
            if isinstance(r, dict) and "batch" in r and (r.get("itl_ms") or r.get("ttft_ms"))]
    return [{"batch": int(r["batch"]), "prompt_tokens": int(r.get("prompt_tokens", r.get("context", 0))),
             "itl_ms": float(r["itl_ms"]) if r.get("itl_ms") else None,
             "ttft_ms": float(r["ttft_ms"]) if r.get("ttft_ms") else None} for r in rows]


def recorded_latency() -> tuple[list[dict], str, str] | None:
    """The engine's recorded latency run (``load_recorded("latency")``): its rows, label and device; None
    when the engine has no such file."""
    from engine import load_recorded
    data = load_recorded("latency")
    if data is None:
        return None
    return recorded_latency_rows(data), recorded_label(data), data["device"]


def recorded_bandwidth() -> tuple[float, str] | None:
    """The H200's measured device-to-device copy bandwidth (bytes/s) and its label, if recorded."""
    from engine import load_recorded
    data = load_recorded("kernels")
    value = (data or {}).get("results", {}).get("copy_bandwidth_gb_s")
    if not value:
        return None
    return value * 1e9, recorded_label(data)


def recorded_prefill_rows() -> tuple[list[dict], str, str]:
    """The recorded latency run's batch-1 rows (TTFT and ITL by prompt length), its label and its device;
    ([], "", "") when the engine has no such file."""
    rows, label, device = recorded_latency() or ([], "", "")
    return [r for r in rows if r["batch"] == 1], label, device
