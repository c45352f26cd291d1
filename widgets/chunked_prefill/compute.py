"""The engine side of the chunked-prefill widget (chapter 17): a long prompt arrives while three short
chats decode, in a private engine, once with chunked prefill under a token budget and once without.

    chats 1–3 prefill, then decode ─► WARM_STEPS decode-only steps ─► the document arrives (t = 0)
        ─► steps until the document has its first token ─► AFTER_STEPS more ─► everything aborted

    chunked, budget 64:   step  [c1 c2 c3 | doc 61]  [c1 c2 c3 | doc 61]  …  every step ≤ 64 tokens
    not chunked:          step  [c1 c2 c3 | doc 300]                          one long step

What is drawn comes from the engine: each step's tokens per request from its step trace, each chat's
inter-token gaps and the document's TTFT from the request outputs' own timestamps.
"""
from __future__ import annotations

from widgets.common.load import busy_requests
from widgets.common.sandboxes import page_sandbox

BLOCK_SIZE = 16
BUDGETS = (32, 48, 64, 96, 128, 192, 256, 384, 512)
MAX_DOC_TOKENS = 384
WARM_STEPS = 2                      # decode-only steps shown before the document arrives
AFTER_STEPS = 3                     # steps shown after the document's first token
CHAT_TOKENS = 64                    # more than a run ever lets a chat generate (it is aborted at the end)
DOC = "document"
POOL_BLOCKS = 56                    # three chats of ≤ 48 + 64 tokens and a document of ≤ 420 tokens


def chat_names(n: int) -> list[str]:
    return [f"chat {i + 1}" for i in range(n)]


def document_ids(llm, text: str) -> tuple[list[int], bool]:
    """The document as a chat request ("Summarize: …"), its text cut to MAX_DOC_TOKENS tokens."""
    ids = llm.tokenizer.encode(text).ids
    cut = len(ids) > MAX_DOC_TOKENS
    body = llm.tokenizer.decode(ids[:MAX_DOC_TOKENS]) if cut else text
    return llm.tokenizer.encode_ids(llm.format_prompt(f"Summarize this in one sentence:\n\n{body}", chat=True)), cut


def drive(engine, chats: list[list[int]], doc: list[int], check=lambda: None, progress=lambda p: None) -> dict:
    """Run the scenario on `engine` (a fresh private one) and read back what it did; every request is
    aborted at the end (or on error), so the engine holds no block afterwards. ``progress(p)`` after every
    step says where the run is (a run takes seconds on a CPU): p = {"stage": "chats" | "warm" | "document"
    | "after", "steps": steps so far, "doc_done": document prompt tokens computed, "doc_tokens",
    "chunks": steps that carried a piece of the document, "after": steps since its first token}."""
    from engine import SamplingParams
    names = chat_names(len(chats))
    chat_params = SamplingParams(temperature=0.0, max_tokens=CHAT_TOKENS, ignore_eos=True)
    done = {"doc_done": 0, "chunks": 0}

    def step(stage: str, after: int = 0):
        events = engine.step()
        latest = engine.trace.since(engine.trace.num_steps - 1)
        piece = sum(e.num_tokens for e in latest[-1].entries
                    if e.request_id == DOC and e.kind == "prefill") if latest else 0
        done["doc_done"] += piece
        done["chunks"] += bool(piece)
        progress({"stage": stage, "steps": engine.trace.num_steps, "doc_tokens": len(doc), "after": after, **done})
        return events
    try:
        for name, ids in zip(names, chats):
            engine.add_request(name, ids, chat_params)
        started: set[str] = set()
        while len(started) < len(names):            # the chats' prompts (chunked too, if the budget is small)
            check()
            started |= {ev.request_id for ev in step("chats")}
        for _ in range(WARM_STEPS):
            check()
            step("warm")
        first_shown = engine.trace.num_steps - WARM_STEPS
        arrival = engine.trace.num_steps
        engine.add_request(DOC, doc, SamplingParams(temperature=0.0, max_tokens=AFTER_STEPS + 1, ignore_eos=True))
        after = None
        while after is None or after < AFTER_STEPS:
            check()
            events = step("document" if after is None else "after", 0 if after is None else after + 1)
            if after is not None:
                after += 1
            elif any(ev.request_id == DOC for ev in events):
                after = 0
    finally:
        for rid in engine.unfinished_request_ids():
            engine.abort(rid)
    outputs = {rid: engine.take_output(rid) for rid in [*names, DOC]}
    t0 = outputs[DOC].metrics.arrival_s
    records = engine.trace.since(first_shown)
    steps = [{"step": r.step - arrival, "end_ms": (r.start_s + r.wall_s - t0) * 1e3, "wall_ms": r.wall_s * 1e3,
              "tokens": {e.request_id: e.num_tokens for e in r.entries},
              "kinds": {e.request_id: e.kind for e in r.entries}} for r in records]
    shown_from = records[0].start_s
    gaps = {}
    for name in names:
        times = outputs[name].metrics.token_times_s
        gaps[name] = [[(b - t0) * 1e3, (b - a) * 1e3] for a, b in zip(times, times[1:]) if b >= shown_from]
    return {"budget": engine.config.max_num_batched_tokens, "chunked": engine.config.enable_chunked_prefill,
            "steps": steps, "gaps": gaps, "doc_tokens": len(doc), "doc_ttft_ms": outputs[DOC].metrics.ttft_s * 1e3,
            "doc_chunks": [s["tokens"][DOC] for s in steps if s["kinds"].get(DOC) == "prefill"],
            "free_after": engine.num_free_blocks(), "num_blocks": engine.allocator_state().num_blocks}


def off_budget(budget: int, chats: list[list[int]], doc: list[int]) -> int:
    """Without chunking a prompt goes in one step, so the budget must hold the longest request whole
    (prompt + output: a preempted request re-prefills both), as the engine (and vLLM) insist."""
    return max(budget, len(doc) + AFTER_STEPS + 1, *(len(c) + CHAT_TOKENS for c in chats))


def private_engine(llm, budget: int, chunked: bool):
    """``with private_engine(...) as engine:`` a sandbox owned by the reader's page, released at the end of
    the block (its KV memory goes then, not when the page closes; a block left in use is logged)."""
    return page_sandbox(llm, "chunked-prefill", num_kv_blocks=POOL_BLOCKS, max_num_seqs=4, block_size=BLOCK_SIZE,
                        max_num_batched_tokens=budget, enable_chunked_prefill=chunked, enable_prefix_caching=False)


def compare(llm, chat_texts: list[str], doc_text: str, budget: int, check=lambda: None, post=lambda d: None) -> dict:
    """The scenario with chunked prefill under `budget`, then without. ``post`` gets the data so far after
    every step, with a "progress" entry (drive's, plus "run": "on" | "off", the run's "budget" and
    "others": requests the shared engine is running meanwhile), so the reader sees the run move; the
    chunked half is in it as soon as it is done."""
    if budget not in BUDGETS:
        raise ValueError(f"the token budget is one of {', '.join(map(str, BUDGETS))}")
    chats = [llm.tokenizer.encode_ids(llm.format_prompt(t, chat=True)) for t in chat_texts]
    doc, cut = document_ids(llm, doc_text)
    data = {"chats": list(chat_texts), "doc": doc_text, "cut": cut, "budget": budget}

    def report(run: str, run_budget: int):
        return lambda p: post({**data, "progress": {**p, "run": run, "budget": run_budget,
                                                    "others": busy_requests(llm)}})
    with private_engine(llm, budget, True) as engine:
        data["on"] = drive(engine, chats, doc, check, report("on", budget))
    post(dict(data))
    off = off_budget(budget, chats, doc)
    with private_engine(llm, off, False) as engine:
        data["off"] = drive(engine, chats, doc, check, report("off", off))
    return data
