"""The engine side of the batching timeline (chapter 14): the same requests through a private engine
in static and in continuous mode, and the timeline each run's step trace draws.

    requests ──► sandbox(llm, static_batching=True)  ──► step trace ──► timeline("static")
             └─► sandbox(llm, static_batching=False) ──► step trace ──► timeline("continuous")

Every request asks for an exact number of tokens (EOS is ignored), so the schedule depends only on
the lengths, the seats, the token budget and the KV memory: what the reader changes. The timeline is
read from the engine's StepRecords alone. Each request is, at each step, in one state:

    waiting    queued, no KV cache yet             prefill    its prompt (or a chunk of it) computed
    decode     one new token                       recompute  its prompt + output prefilled again
    stalled    holds its KV, not scheduled         idle       static only: done, its seat computes junk
    preempted  KV dropped, queued to recompute     swapped    KV copied out to CPU memory

Each run's private engine is released when the run ends, however it ends (``release``: what is left is
aborted, the allocator is checked for blocks still in use, the memory freed). Runs wait for one of the
server's run slots (widgets/common/sharing.py: BATCHING_RUNS).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

from widgets.common.load import busy_requests
from widgets.common.sharing import BATCHING_RUNS
from widgets.common.sandboxes import release, sandbox

SEATS = 4                  # max_num_seqs: the batch's seats, as in the chapter's example
BUDGET = 128               # max_num_batched_tokens: tokens one step may compute
MAX_REQUESTS = 8
MAX_PROMPT = 128
MAX_OUTPUT = 64
MAX_STEPS = 400            # per run: a bound on one reader's work (thrashing under tight memory)
DEFAULT_BLOCKS = 48        # room for every default request at once: no preemption
MAX_BLOCKS = 64
MODES = ("static", "continuous")
SCALE = 0.03               # the serving chapters' patterns, lengths scaled to fit a CPU and 4 seats
NAMES = "ABCDEFGH"
STATES = ("waiting", "prefill", "decode", "recompute", "stalled", "idle", "preempted", "swapped")
CHAPTER_EXAMPLE = [(24, 48), (12, 6), (16, 10), (10, 4), (14, 8), (20, 40), (12, 6), (16, 12)]
PATTERN_LABELS = {"long-short": "two long answers, six short (the chapter's case)",
                  "summarization": "summarization: long prompts, short answers",
                  "chatbot": "chat: a shared system prompt, medium answers",
                  "codegen": "code: short prompts, long answers",
                  "mixed": "mixed: a third of each"}


@dataclass(slots=True, frozen=True)
class Req:
    id: str
    prompt: int            # tokens
    output: int            # tokens to generate (exactly: EOS is ignored)


def pattern_lengths(pattern: str) -> list[tuple[int, int]]:
    """(prompt, output) lengths of 8 requests: the chapter's case, or a serving pattern scaled down."""
    if pattern == "long-short":
        return list(CHAPTER_EXAMPLE)
    from engine import workload_lengths
    return [(min(p, MAX_PROMPT), min(o, MAX_OUTPUT)) for _, p, o in workload_lengths(pattern, MAX_REQUESTS, SCALE)]


def format_lengths(lengths) -> str:
    return ", ".join(f"{p}→{o}" for p, o in lengths)


def parse_lengths(text: str) -> tuple[list[Req], list[str]]:
    """'24→48, 12→6' (or 24/48, 24:48, 24->48, 24 48) into requests, clamped, with a note per fix."""
    notes, lengths = [], []
    for part in (p for p in re.split(r"[,;\n]+", text or "") if p.strip()):
        nums = re.findall(r"\d+", part)
        if len(nums) != 2:
            notes.append(f"“{part.strip()[:20]}” is not prompt→answer (two numbers): skipped.")
            continue
        p, o = int(nums[0]), int(nums[1])
        cp, co = min(max(p, 1), MAX_PROMPT), min(max(o, 1), MAX_OUTPUT)
        if (cp, co) != (p, o):
            notes.append(f"Prompts are 1–{MAX_PROMPT} tokens and answers 1–{MAX_OUTPUT}: {p}→{o} became {cp}→{co}.")
        lengths.append((cp, co))
    if len(lengths) > MAX_REQUESTS:
        notes.append(f"At most {MAX_REQUESTS} requests: the first {MAX_REQUESTS} are used.")
        lengths = lengths[:MAX_REQUESTS]
    return [Req(NAMES[i], p, o) for i, (p, o) in enumerate(lengths)], notes


def blocks_for(tokens: int, block_size: int = 16) -> int:
    return -(-tokens // block_size)


def min_blocks(reqs: list[Req]) -> int:
    """The fewest KV blocks that still hold the longest request on its own."""
    return max((blocks_for(r.prompt + r.output) for r in reqs), default=1)


def start_run(llm, reqs: list[Req], mode: str, kv_blocks: int = DEFAULT_BLOCKS, preemption: str = "recompute"):
    """A fresh private engine with every request queued at step 0 (exact lengths: EOS is ignored)."""
    from engine import SamplingParams
    engine = sandbox(llm, num_kv_blocks=kv_blocks, max_num_seqs=SEATS, static_batching=mode == "static",
                         enable_prefix_caching=False, enable_chunked_prefill=True, max_num_batched_tokens=BUDGET,
                         preemption_mode=preemption, swap_space_blocks=kv_blocks)
    rng = random.Random(0)
    for r in reqs:
        ids = [rng.randrange(3, llm.config.vocab_size) for _ in range(r.prompt)]
        engine.add_request(r.id, ids, SamplingParams(temperature=0.0, max_tokens=r.output, ignore_eos=True))
    return engine


def run_mode(llm, reqs: list[Req], mode: str, kv_blocks: int = DEFAULT_BLOCKS, preemption: str = "recompute",
             job=None, on_progress=None, busy=None) -> dict:
    """Run the requests to the end (or MAX_STEPS) in a fresh private engine; the timeline of its trace.
    ``job.check()`` between steps lets a newer run or the reader leaving stop it; the sandbox is
    released whatever happens (``finally``). ``on_progress(timeline)`` after each step. ``busy()``, asked
    after each step, says whether other work shared the server's CPU then: the summary's ``busy_steps``
    counts those steps, whose times are not this run's alone."""
    engine = start_run(llm, reqs, mode, kv_blocks, preemption)
    busy_steps = 0
    try:
        while engine.has_unfinished() and engine.trace.num_steps < MAX_STEPS:
            if job is not None:
                job.check()
            engine.step()
            busy_steps += bool(busy is not None and busy())
            if on_progress is not None:
                on_progress(timeline(engine.trace.since(0), reqs, mode, kv_blocks, preemption, done=False,
                                     busy_steps=busy_steps))
        return timeline(engine.trace.since(0), reqs, mode, kv_blocks, preemption,
                        done=not engine.has_unfinished(), busy_steps=busy_steps)
    finally:
        release(engine, "batching-timeline")


def server_busy(llm) -> bool:
    """Whether other work was computing on this server just now: the shared engine stepped for other
    readers' requests in the last second, or another reader's batching run holds the other run seat.
    (Both share the CPU with this run, so its steps take longer: seconds are noisy, steps are not.)"""
    return BATCHING_RUNS.running > 1 or busy_requests(llm) > 0


def run_both(llm, reqs: list[Req], kv_blocks: int, preemption: str, job) -> dict:
    """Static, then continuous, in one of the server's run seats; ``job.post((mode, runs so far))`` after
    each step, and ``(None, place)`` while waiting in line for a seat (place 1 is next)."""
    runs: dict = {}
    with BATCHING_RUNS.seat(job.check, on_place=lambda place: job.post((None, place))):
        for mode in MODES:
            runs[mode] = run_mode(llm, reqs, mode, kv_blocks, preemption, job,
                                  on_progress=lambda t, m=mode: job.post((m, {**runs, m: t})),
                                  busy=lambda: server_busy(llm))
    return runs


def timeline(records, reqs: list[Req], mode: str, kv_blocks: int, preemption: str, done: bool = True,
             busy_steps: int = 0) -> dict:
    """What the Gantt charts draw, from the step records alone: one state per request per step
    (merged into segments), the tokens of each step, and the run's totals (``busy_steps``: see run_mode).

    The engine records a finished static seat let go to free memory as a preemption (its padding is
    dropped: nothing is redone). That is no preemption a reader would recognise, so it is counted
    apart, as ``released_seats``, and ``preemptions`` counts only requests that lost work or moved."""
    ids = [r.id for r in reqs]
    prompt = {r.id: r.prompt for r in reqs}
    state = {i: "waiting" for i in ids}
    preempted_once, recomputing = set(), set()
    cached: dict[str, int] = {}                 # tokens in the KV cache, for the blocks a swap moves
    runs: dict[str, list] = {i: [] for i in ids}
    steps, first, finish = [], {}, {}
    swapped_blocks = released_seats = 0
    for rec in records:
        ended = set(rec.finished)
        for name, how in rec.preempted:
            if name in ended or name in finish:         # a static seat already done (padding): let go, over
                released_seats += 1
                continue
            state[name] = "preempted" if how == "recompute" else "swapped"
            preempted_once.add(name)
            if how == "swap":
                swapped_blocks += blocks_for(cached.get(name, 0))
        entries = {e.request_id: e for e in rec.entries}
        for i in ids:
            e = entries.get(i)
            if e is not None:
                kind = "idle" if e.padding else e.kind
                if kind == "prefill" and i in preempted_once and e.num_computed_before == 0:
                    recomputing.add(i)                  # its prompt and output again, from zero
                elif kind != "prefill":
                    recomputing.discard(i)
                if i in recomputing:
                    kind = "recompute"
                if e.kind == "prefill" and i not in first and e.num_computed_before + e.num_tokens >= prompt[i]:
                    first[i] = rec.step                 # the prompt's last chunk samples the first token
                state[i], cached[i], tokens = "running", e.num_computed_before + e.num_tokens, e.num_tokens
            elif state[i] == "done" or i in ended:      # (a static seat let go early has nothing to draw)
                state[i] = "done"
                continue
            elif state[i] == "running":
                kind, tokens = "stalled", 0
            else:
                kind, tokens = state[i], 0
            _extend(runs[i], kind, rec.step, tokens)
        for name in ended:
            state[name], finish[name] = "done", rec.step
        steps.append({"step": rec.step, "tokens": rec.num_batched_tokens, "prefill": rec.num_prefill_tokens,
                      "decode": rec.num_decode_tokens - rec.num_padding_tokens, "padding": rec.num_padding_tokens,
                      "ms": rec.wall_s * 1e3, "free_blocks": rec.num_free_blocks, "running": rec.num_running,
                      "waiting": rec.num_waiting, "swapped": rec.num_swapped})
    segments = [{"req": i, "state": k, "start": a, "end": b + 1, "tokens": t}
                for i in ids for k, a, b, t in runs[i]]
    return {"mode": mode, "kv_blocks": kv_blocks, "preemption": preemption, "seats": SEATS, "budget": BUDGET,
            "requests": [{"id": r.id, "prompt": r.prompt, "output": r.output} for r in reqs],
            "segments": segments, "steps": steps, "first": first, "finish": finish,
            "summary": summary(steps, reqs, finish, records, swapped_blocks, done, released_seats, busy_steps)}


def _extend(runs: list, kind: str, step: int, tokens: int) -> None:
    """Merge a step into the request's last run if it continues it (same state, next step)."""
    if runs and runs[-1][0] == kind and runs[-1][2] == step - 1:
        runs[-1][2], runs[-1][3] = step, runs[-1][3] + tokens
    else:
        runs.append([kind, step, step, tokens])


def summary(steps: list[dict], reqs: list[Req], finish: dict, records, swapped_blocks: int, done: bool,
            released_seats: int = 0, busy_steps: int = 0) -> dict:
    ms = [s["ms"] for s in steps]
    time_s = sum(ms) / 1e3
    out = sum(r.output for r in reqs if r.id in finish)
    prompt_tokens = sum(r.prompt for r in reqs)
    elapsed = [sum(ms[:finish[r.id] + 1]) for r in reqs if r.id in finish]
    return {"steps": len(steps), "time_s": time_s, "output_tokens": out,
            "tok_per_s": out / time_s if time_s > 0 else 0.0,
            "finished": len(finish), "complete": done and len(finish) == len(reqs),
            "padding": sum(s["padding"] for s in steps),
            "seat_steps": SEATS * len(steps),
            "preemptions": sum(len(r.preempted) for r in records) - released_seats,
            "released_seats": released_seats,
            "busy_steps": busy_steps,
            "recomputed_tokens": max(0, sum(s["prefill"] for s in steps) - prompt_tokens) if done else None,
            "swapped_blocks": swapped_blocks,
            "mean_finish_step": sum(finish.values()) / len(finish) + 1 if finish else None,
            "mean_finish_ms": sum(elapsed) / len(elapsed) if elapsed else None}
