"""The engine side of the page allocator (chapter 15): a private engine with a small KV pool of 32
blocks, driven one reader action at a time, and the picture of its allocator after each.

    add(prompt, answer, n) ─► add_request + one step (the prompt prefilled; the others decode)
    step()                 ─► one step: every running sequence gains a token; every 16th needs a block
    finish(request)        ─► abort: its blocks go back to the tail of the free queue, last block first

Everything drawn is read back from the engine: the blocks, owners, ref counts and free order from
``allocator_state()`` (32 records: cheap, unlike the shared engine's thousands), and how many tokens
each sequence holds from the step trace (``num_computed_before + num_tokens`` of its last entry).
What an action changed is the difference of two states: blocks that were free and are now in use
(new), blocks whose ref count grew (shared), table entries that changed (copy-on-write copies), and
blocks that went back to the free queue.
"""
from __future__ import annotations

import threading

from widgets.common.sandboxes import release, sandbox

POOL_BLOCKS = 32
BLOCK_SIZE = 16
MAX_SEQS = 8               # running sequences (samples count one each)
MAX_PROMPT = 64
MAX_ANSWER = 64
MAX_N = 3
MAX_LIVE = 6               # unfinished requests at once
RESERVE = MAX_PROMPT + MAX_ANSWER     # what a contiguous allocator must set aside for each sequence
NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class AllocatorSandbox:
    """One reader's private engine. Every public method holds a lock: one action at a time."""

    def __init__(self, llm, sentence: str):
        self.llm = llm
        self.engine = sandbox(llm, num_kv_blocks=POOL_BLOCKS, max_num_seqs=MAX_SEQS, block_size=BLOCK_SIZE,
                                  enable_prefix_caching=False, max_num_batched_tokens=MAX_SEQS * RESERVE)
        ids = llm.tokenizer.encode_ids(sentence.strip()) if sentence.strip() else []
        self._ids = ids or llm.tokenizer.encode_ids("The cat sat on the mat.")
        self._lock = threading.Lock()
        self.requests: dict[str, dict] = {}          # letter -> prompt, answer, n, colour, finished
        self.cached: dict[str, int] = {}             # output id -> tokens whose K/V are in the cache
        self._count = 0
        self.closed = False
        self.last = self.picture("The pool is empty: add a request.", self.engine.allocator_state())

    # -- actions ----------------------------------------------------------------------------------
    def add(self, prompt: int, answer: int, n: int = 1) -> dict:
        from engine import SamplingParams
        with self._lock:
            live = [r for r, d in self.requests.items() if not d["finished"]]
            if len(live) >= MAX_LIVE:
                raise ValueError(f"at most {MAX_LIVE} requests at once here: finish one first")
            name = NAMES[self._count % len(NAMES)]
            if name in self.requests and not self.requests[name]["finished"]:
                raise ValueError(f"request {name} is still running: finish it first")
            prompt, answer, n = (min(max(int(prompt), 1), MAX_PROMPT), min(max(int(answer), 1), MAX_ANSWER),
                                 min(max(int(n), 1), MAX_N))
            ids = (self._ids * (prompt // len(self._ids) + 1))[:prompt]
            self.engine.add_request(name, ids, SamplingParams(temperature=1.0, seed=self._count, n=n,
                                                              max_tokens=answer, ignore_eos=True))
            self.requests[name] = {"prompt": prompt, "answer": answer, "n": n, "colour": self._count % 6,
                                   "finished": False}
            self._count += 1
            return self._act(f"Added {name}: {prompt} prompt tokens, {answer} to generate"
                             + (f", {n} samples" if n > 1 else "") + ".", self.engine.step)

    def step(self) -> dict:
        with self._lock:
            if not self.engine.has_unfinished():
                self.last = {**self.last, "event": "Nothing is running: add a request first.", "new": [],
                             "copied": [], "freed": [], "shared": []}
                return self.last
            return self._act("", self.engine.step)

    def finish(self, name: str) -> dict:
        with self._lock:
            if name not in self.requests or self.requests[name]["finished"]:
                raise ValueError(f"there is no running request {name!r}")
            return self._act(f"Finished {name}.", lambda: self.engine.abort(name))

    def close(self) -> None:
        """Abort everything, check that every block went back, and free the pool's memory."""
        with self._lock:
            if not self.closed:
                self.closed = True
                release(self.engine, "page-allocator")

    # -- what changed -----------------------------------------------------------------------------
    def _act(self, what: str, fn) -> dict:
        before = self.engine.allocator_state()
        first_step = self.engine.trace.num_steps
        fn()
        records = self.engine.trace.since(first_step)
        for rec in records:
            for e in rec.entries:
                self.cached[e.request_id] = e.num_computed_before + e.num_tokens
            for name, _how in rec.preempted:
                self.cached.pop(name, None)
            for name in rec.finished:
                self.cached.pop(name, None)
        after = self.engine.allocator_state()
        for owner in after.tables:                   # a forked sample holds what its parent held
            if owner not in self.cached and ":" in owner:
                self.cached[owner] = self.cached.get(owner.split(":")[0] + ":0", 0)
        for rid, d in self.requests.items():
            d["finished"] = d["finished"] or not any(s.split(":")[0] == rid for s in
                                                     self.engine.unfinished_request_ids())
        words = ([what] if what else []) + _step_words(records, changes(before, after))
        self.last = self.picture(" ".join(words), after, before)
        return self.last

    def picture(self, event: str, state, before=None) -> dict:
        """The grid, block tables, free queue and request list as plain data (and what just changed)."""
        used: dict[int, int] = {}
        for owner, table in state.tables.items():
            n = self.cached.get(owner, 0)
            for i, b in enumerate(table):
                used[b] = max(used.get(b, 0), min(max(n - i * state.block_size, 0), state.block_size))
        blocks = [{"id": b.block_id, "ref": b.ref_count, "owners": list(b.owners), "free_rank": b.free_rank,
                   "used": used.get(b.block_id, 0)} for b in state.blocks]
        diff = changes(before, state) if before is not None else {"new": [], "shared": [], "copied": [],
                                                                    "freed": []}
        samples = {}
        for owner, table in state.tables.items():
            samples[owner] = {"table": list(table), "cached": self.cached.get(owner, 0)}
        return {"num_blocks": state.num_blocks, "block_size": state.block_size, "blocks": blocks,
                "tables": {o: list(t) for o, t in state.tables.items()}, "free_order": list(state.free_order),
                "requests": {k: dict(v) for k, v in self.requests.items()}, "samples": samples,
                "waiting": [r for r in self.engine.unfinished_request_ids() if not any(
                    o.split(":")[0] == r for o in state.tables)],
                "event": event, **diff}


def play(sandbox: AllocatorSandbox, action: tuple) -> dict:
    """One reader action, ("add", prompt, answer, n), ("step",) or ("finish", request): the picture after it."""
    kind, *args = action
    return {"add": sandbox.add, "step": sandbox.step, "finish": sandbox.finish}[kind](*args)


def changes(before, after) -> dict:
    """What one action did to the pool, from the allocator's state before and after it."""
    was = {b.block_id: b.ref_count for b in before.blocks}
    now = {b.block_id: b.ref_count for b in after.blocks}
    return {"new": [b for b in now if now[b] > 0 and was[b] == 0],
            "shared": [[b, now[b]] for b in now if now[b] > max(was[b], 1)],
            "freed": [b for b in after.free_order if was[b] > 0],
            "copied": [[o, old[i], new[i]] for o, new in after.tables.items() if (old := before.tables.get(o))
                       for i in range(min(len(old), len(new))) if old[i] != new[i]]}


def _blocks(ids) -> str:
    return f"block{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def _step_words(records, diff: dict) -> list[str]:
    """What the steps of one action did, in a few sentences."""
    words = []
    for rec in records:
        kinds: dict[str, list[str]] = {}
        for e in rec.entries:
            kinds.setdefault(e.kind, []).append(e.request_id)
        did = "; ".join(f"{k} {', '.join(v)}" for k, v in kinds.items())
        words.append(f"Step {rec.step}: {did or 'nothing to run'}.")
        for name, _how in rec.preempted:
            words.append(f"No free block for everyone: {name} was preempted, its blocks freed; it will recompute.")
        for name in rec.finished:
            words.append(f"{name} generated all its tokens and finished.")
    copies = {dst for _, _, dst in diff["copied"]}
    fresh = [b for b in diff["new"] if b not in copies]
    if fresh:
        words.append(f"New {_blocks(fresh)} taken from the head of the free queue.")
    for owner, src, dst in diff["copied"]:
        words.append(f"Copy-on-write: {owner} was about to write into block {src}, which others still hold, so it "
                     f"got its own copy, block {dst}.")
    if diff["shared"]:
        refs = ", ".join(f"{b} (ref count {n})" for b, n in diff["shared"])
        words.append(f"Shared block{'s' if len(diff['shared']) > 1 else ''} {refs}: one copy, several block tables.")
    if diff["freed"]:
        words.append(f"{_blocks(diff['freed']).capitalize()} went back to the tail of the free queue.")
    return words
