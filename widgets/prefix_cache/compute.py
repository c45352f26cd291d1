"""The engine side of the prefix-cache widget (chapter 16): one "send" of a shared system prompt with a
few questions, through a private engine with prefix caching on and, for comparison, one with it off.

    step 1        Q1 = system prompt + question 1 arrives alone: its prompt is looked up block by block
                  (hits only if an earlier send left those blocks cached), the rest is prefilled
    step 2        Q2 … Qn arrive together: each finds Q1's full blocks by their chained hashes, shares
                  them (ref count + 1 each) and prefills only what follows        ◄── snapshot here
    then          decode until each has NEW_TOKENS tokens; finished requests release their blocks,
                  which stay in the cache (ref count 0) until the pool needs them

The caching-on engine (PrefixLab) lives for the reader's whole visit, so a second send with one early
word changed finds the blocks before the edit and misses every block after it. Everything shown is
read back from the engines: which blocks each request holds (allocator state, at the snapshot), how
many of its prompt tokens came from the cache (its trace entry), and its TTFT (its output's metrics).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from widgets.common.load import busy_requests
from widgets.common.sandboxes import page_sandbox, release, sandbox

BLOCK_SIZE = 16
MAX_QUESTIONS = 4
MAX_SYSTEM_TOKENS = 128
MAX_QUESTION_TOKENS = 32
NEW_TOKENS = 4                      # enough for Q1 to still hold its blocks when Q2 … Qn arrive
# room for every request with nothing shared (the caching-off engine), chat markup included
POOL_BLOCKS = MAX_QUESTIONS * -(-(MAX_SYSTEM_TOKENS + MAX_QUESTION_TOKENS + 16 + NEW_TOKENS) // BLOCK_SIZE)


def chat_ids(llm, system: str, question: str) -> list[int]:
    """The prompt a chat app sends: the model's chat template with a system turn and a user turn."""
    text = llm.tokenizer.apply_chat_template([{"role": "system", "content": system},
                                              {"role": "user", "content": question}])
    return llm.tokenizer.encode_ids(text)


def cut_to_tokens(llm, text: str, limit: int) -> tuple[str, bool]:
    """At most `limit` tokens of `text` (cut at a token boundary), and whether anything was cut."""
    ids = llm.tokenizer.encode(text).ids
    if len(ids) <= limit:
        return text, False
    return llm.tokenizer.decode(ids[:limit]), True


@dataclass(slots=True)
class SendResult:
    """What one engine did with one send (the widget's data is built from two of these)."""
    request_ids: list[str]
    prompts: list[list[int]]
    records: list                   # StepRecords of the send, oldest first
    snapshot: object                # AllocatorState right after every request was admitted
    ttft_ms: list[float]
    free_after: int                 # free blocks once the send is over (all of them: no leak)
    num_blocks: int
    num_cached_after: int           # of the free blocks, those still holding cached K/V
    cached_tokens: list[int] = field(default_factory=list)   # per request, from its admission entry


def run_send(engine, prompts: list[list[int]], tag: str, check=lambda: None, progress=lambda p: None) -> SendResult:
    """Q1 alone, then the others together (see the module docstring); aborts everything on error.
    ``progress(p)`` as each step starts: p = {"stage": "q1" | "others" | "decode", "steps": this send's
    steps, the one starting included}, so the reader reads what runs now (Q1's prefill is the long one)."""
    from engine import SamplingParams
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    ids = [f"{tag}-q{i + 1}" for i in range(len(prompts))]
    start = engine.trace.num_steps

    def step(stage: str):
        progress({"stage": stage, "steps": engine.trace.num_steps - start + 1})
        return engine.step()
    try:
        engine.add_request(ids[0], prompts[0], params)
        while not any(ev.request_id == ids[0] for ev in step("q1")):
            check()                                   # a long prompt may take several chunks
        for rid, prompt in zip(ids[1:], prompts[1:]):
            engine.add_request(rid, prompt, params)
        if len(ids) > 1:
            check()
            step("others")
        snapshot = engine.allocator_state()
        while engine.has_unfinished():
            check()
            step("decode")
    except BaseException:
        for rid in engine.unfinished_request_ids():
            engine.abort(rid)
        for rid in ids:
            engine.take_output(rid)
        raise
    outputs = [engine.take_output(rid) for rid in ids]
    records, state = engine.trace.since(start), engine.allocator_state()
    admitted = {}
    for rec in records:
        for e in rec.entries:
            admitted.setdefault(e.request_id, e.num_cached_tokens)
    return SendResult(ids, prompts, records, snapshot, [o.metrics.ttft_s * 1e3 for o in outputs],
                      engine.num_free_blocks(), state.num_blocks, state.num_cached, [admitted[rid] for rid in ids])


def short_hash(h: int | None) -> str | None:
    return None if h is None else f"{h:016x}"[:6]


def request_blocks(llm, result: SendResult, i: int) -> list[dict]:
    """Request i's prompt blocks as the allocator held them at the snapshot."""
    state, rid, prompt = result.snapshot, result.request_ids[i], result.prompts[i]
    table, bs = state.tables[rid], state.block_size
    num_hits = result.cached_tokens[i] // bs
    blocks, parent = [], None
    for j in range(-(-len(prompt) // bs)):
        info = state.blocks[table[j]]
        full = (j + 1) * bs <= len(prompt)
        h = info.block_hash if full else None
        owners = sorted(result.request_ids.index(o) + 1 for o in info.owners if o in result.request_ids)
        blocks.append({"index": j, "id": table[j], "hit": j < num_hits, "full": full, "hash": short_hash(h),
                       "parent": short_hash(parent) if full else None, "ref": info.ref_count,
                       "owners": owners, "first": j * bs, "last": min(len(prompt), (j + 1) * bs) - 1,
                       "text": llm.tokenizer.decode(prompt[j * bs:(j + 1) * bs])})
        parent = h
    return blocks


def send_data(llm, system: str, questions: list[str], on: SendResult, off: SendResult,
              previous: dict | None = None) -> dict:
    """The widget's data for one send: per request its blocks (caching on), cached and computed tokens,
    TTFT on and off; totals; and which of Q1's block hashes changed since the previous send."""
    before = [b["hash"] for b in previous["requests"][0]["blocks"]] if previous else []
    requests = []
    for i, q in enumerate(questions):
        blocks = request_blocks(llm, on, i)
        for b in blocks:
            b["changed"] = bool(i == 0 and before and b["full"] and
                                (b["index"] >= len(before) or before[b["index"]] != b["hash"]))
        requests.append({"question": q, "prompt_tokens": len(on.prompts[i]), "cached": on.cached_tokens[i],
                         "computed": len(on.prompts[i]) - on.cached_tokens[i], "blocks": blocks,
                         "ttft_on_ms": on.ttft_ms[i], "ttft_off_ms": off.ttft_ms[i]})
    prefill = {name: sum(e.num_tokens for r in res.records for e in r.entries if e.kind == "prefill")
               for name, res in (("on", on), ("off", off))}
    return {"system": system, "questions": questions, "requests": requests, "prefill_on": prefill["on"],
            "prefill_off": prefill["off"], "blocks_shared": sum(r.blocks_shared for r in on.records),
            "pool_blocks": on.num_blocks, "free_after_on": on.free_after, "free_after_off": off.free_after,
            "cached_after_on": on.num_cached_after,
            "block_size": BLOCK_SIZE, "compared": bool(before)}


class PrefixLab:
    """One reader's caching-on engine, kept between sends; each send also runs a fresh caching-off one.
    One send at a time (a lock): a newer send waits for an older, cancelled one to let go."""

    def __init__(self, llm):
        self.llm = llm
        self.engine = sandbox(llm, **self._config(True))          # owned by the reader's page
        self.previous: dict | None = None
        self.closed = False
        self._lock = threading.Lock()
        self._sends = 0

    @staticmethod
    def _config(caching: bool) -> dict:
        return dict(num_kv_blocks=POOL_BLOCKS, max_num_seqs=MAX_QUESTIONS, block_size=BLOCK_SIZE,
                    enable_prefix_caching=caching)

    def send(self, system: str, questions: list[str], check=lambda: None, progress=lambda p: None) -> dict:
        """One send through the caching-on engine, then the same through a fresh caching-off one.
        ``progress(p)`` as each step starts: run_send's p with "engine": "on" | "off", "questions" and
        "others" (requests the shared engine is running meanwhile: they slow this CPU down)."""
        if not 1 <= len(questions) <= MAX_QUESTIONS:
            raise ValueError(f"send 1 to {MAX_QUESTIONS} questions")
        prompts = [chat_ids(self.llm, system, q) for q in questions]

        def report(mode: str):
            return lambda p: progress({**p, "engine": mode, "questions": len(questions),
                                       "others": busy_requests(self.llm)})
        with self._lock:
            try:
                self._sends += 1
                on = run_send(self.engine, prompts, f"s{self._sends}", check, report("on"))
                with page_sandbox(self.llm, "prefix-cache, caching off", **self._config(False)) as cold:
                    off = run_send(cold, prompts, "off", check, report("off"))
                data = send_data(self.llm, system, questions, on, off, self.previous)
                self.previous = data
                return data
            finally:
                if self.closed:                   # closed while this send ran: release the engine now
                    release(self.engine, "prefix-cache")

    def clear(self) -> None:
        """Forget every cached block: a fresh engine (the next send starts cold)."""
        with self._lock:
            release(self.engine, "prefix-cache")
            self.engine, self.previous = sandbox(self.llm, **self._config(True)), None

    def close(self) -> None:
        """Release the engine: abort anything still running, check that no block stays held, free its
        memory. A send in flight has been cancelled and releases it as it ends, so the page's event loop
        never waits for it here."""
        self.closed = True
        if self._lock.acquire(blocking=False):
            try:
                release(self.engine, "prefix-cache")
            finally:
                self._lock.release()
