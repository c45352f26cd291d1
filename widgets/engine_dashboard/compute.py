"""The engine side of the engine dashboard: what it draws, from the engine's own per-step snapshot
(no Panel, no HTML here).

Every reader of this server submits to one engine (engine/engine_loop.py). After each step the loop
publishes one small LoopStats record (``llm.stats``); ``dashboard_view`` turns one into plain numbers,
the reader's own requests marked. Other readers' requests stay anonymous: the page knows only which
ids are its own (widgets/common/sharing.py), never whose the others are. A request sent to the server's
OpenAI-compatible API (/v1/completions, a curl or an `openai` client) has an id beginning "api-" and is
marked as such.
"""
from __future__ import annotations

from widgets.common.sandboxes import page_sandbox

API_PREFIX = "api-"      # the OpenAI-compatible API's request ids (app/openai_api.py): a curl, not a page


def dashboard_view(stats, mine: set[str] | frozenset = frozenset(), queued: int = 0) -> dict:
    """What the dashboard draws, from one LoopStats: plain numbers (also the saved first example)."""
    last = stats.last
    batch = [{"yours": e.request_id in mine, "api": e.request_id.startswith(API_PREFIX), "kind": e.kind,
              "tokens": e.num_tokens, "cached": e.num_computed_before} for e in (last.entries if last else [])]
    used = stats.num_blocks - stats.num_free_blocks
    return {"step": last.step if last else None, "batch": batch,
            "step_tokens": last.num_batched_tokens if last else 0, "budget": stats.budget,
            "kv_used": used, "kv_blocks": stats.num_blocks, "running": stats.num_running,
            "waiting": stats.num_waiting, "swapped": stats.num_swapped, "queued": queued,
            "preemptions": stats.preemptions, "steps": stats.steps, "generated": stats.generated,
            "hit_rate": (stats.prefix_hit_tokens / stats.prefix_query_tokens if stats.prefix_query_tokens
                         else None),
            "tokens_per_s": stats.tokens_per_s}


def busy_view(llm) -> dict:
    """Four requests in a private engine, two steps in: one long prompt being prefilled in chunks
    beside three short ones, the first of them "yours"."""
    from engine import LoopStats, SamplingParams
    words = "The quick brown fox jumps over the lazy dog while the engine batches every request. "
    prompts = {"a": "What is the capital of France?", "b": "Name a colour.", "c": "Count to three.",
               "d": words * 6}
    with page_sandbox(llm, "engine-dashboard", num_kv_blocks=48, max_num_seqs=4, max_num_batched_tokens=48) as eng:
        for rid, text in prompts.items():
            eng.add_request(rid, llm.tokenizer.encode_ids(text),
                            SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
        stats = LoopStats()
        for _ in range(2):
            stats = LoopStats.of(eng, stats, generated=len(eng.step()))
    view = dashboard_view(stats, mine={"a"})
    view["tokens_per_s"] = None          # a rate needs a clock: the live view measures it
    return view
