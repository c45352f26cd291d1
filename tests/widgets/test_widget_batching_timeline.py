"""The batching timeline (chapter 14) against the engine it drives: every step it draws is a step of the
trace, with the trace's requests and tokens; preemption under tight memory, recompute vs swap; no block
left in use after a run, finished, cancelled or abandoned with the session."""
from __future__ import annotations

import logging
import time

import pytest

pn = pytest.importorskip("panel")

from widgets.batching_timeline.compute import (MAX_OUTPUT, MAX_PROMPT, MAX_REQUESTS, Req, format_lengths,  # noqa: E402
                                               parse_lengths, pattern_lengths, run_mode, start_run, timeline)
from widgets.batching_timeline.widget import BatchingTimeline  # noqa: E402
from widgets.common import Cancelled  # noqa: E402
from widgets.common.examples import compute_example, load_example  # noqa: E402
from widgets.common.testing import LoadedEngine, same  # noqa: E402

SMALL = [Req("A", 6, 14), Req("B", 5, 3), Req("C", 7, 5), Req("D", 4, 2), Req("E", 6, 4), Req("F", 5, 6)]
TIGHT = [Req("A", 8, 20), Req("B", 8, 20), Req("C", 8, 20)]           # 28 tokens = 2 blocks each, 4 in the pool
WORK = {"prefill", "decode", "recompute", "idle"}                     # states in which a request is scheduled
TIMES = frozenset({"ms", "time_s", "tok_per_s", "mean_finish_ms"})



def cells(t: dict) -> dict[int, dict[str, str]]:
    """step -> {request: state} as the Gantt chart draws it."""
    out: dict[int, dict[str, str]] = {}
    for s in t["segments"]:
        for step in range(s["start"], s["end"]):
            out.setdefault(step, {})[s["req"]] = s["state"]
    return out


def run_to_end(llm, reqs, mode, blocks=48, preemption="recompute"):
    engine = start_run(llm, reqs, mode, blocks, preemption)
    while engine.has_unfinished():
        engine.step()
    records = engine.trace.since(0)
    assert engine.num_free_blocks() == blocks and not engine.allocator_state().tables   # nothing leaked
    return records, timeline(records, reqs, mode, blocks, preemption)


@pytest.fixture(scope="module")
def both(llm):
    return {m: run_to_end(llm, SMALL, m) for m in ("static", "continuous")}


def test_saved_example_is_fresh(llm):
    saved, fresh = load_example("batching-timeline").data, compute_example("batching-timeline", llm)
    diffs = same(saved, fresh, ignore=TIMES)
    assert not diffs, "run `python -m widgets.examples batching-timeline`:\n" + "\n".join(diffs[:20])
    st, ct = saved["runs"]["static"]["summary"], saved["runs"]["continuous"]["summary"]
    assert (st["steps"], ct["steps"]) == (88, 48)           # what chapter 14 tells the reader to look for


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_every_drawn_step_is_the_traces_step(both, mode):
    records, t = both[mode]
    drawn = cells(t)
    assert [s["step"] for s in t["steps"]] == [r.step for r in records]
    for rec, step in zip(records, t["steps"]):
        assert step["tokens"] == rec.num_batched_tokens == step["prefill"] + step["decode"] + step["padding"]
        scheduled = {e.request_id: ("idle" if e.padding else e.kind) for e in rec.entries}
        working = {r: s for r, s in drawn.get(rec.step, {}).items() if s in WORK}
        assert working == scheduled                         # the same requests, in the same kind of work
        for r, s in drawn.get(rec.step, {}).items():
            assert (s in WORK) == (r in scheduled)
    first_seen = list(dict.fromkeys(e.request_id for r in records for e in r.entries))
    first_drawn = sorted({s["req"]: s["start"] for s in reversed(t["segments"]) if s["state"] in WORK}.items(),
                         key=lambda kv: (kv[1], first_seen.index(kv[0])))
    assert [r for r, _ in first_drawn] == first_seen        # requests start in the trace's order
    for s in t["segments"]:                                  # the tokens a segment claims are the trace's
        traced = sum(e.num_tokens for r in records[s["start"]:s["end"]] for e in r.entries if e.request_id == s["req"])
        assert s["tokens"] == traced


def test_static_keeps_seats_until_the_batch_ends_continuous_does_not(both):
    (_, st), (_, ct) = both["static"], both["continuous"]
    assert st["summary"]["padding"] > 0 and ct["summary"]["padding"] == 0
    assert all(s["state"] != "idle" for s in ct["segments"])
    first_batch = [r.id for r in SMALL[:4]]                 # 4 seats: A-D together, released together
    assert len({st["finish"][r] for r in first_batch}) == 1
    assert min(st["first"][r] for r in ("E", "F")) > st["finish"]["A"]
    assert ct["summary"]["steps"] < st["summary"]["steps"]
    assert ct["summary"]["mean_finish_step"] < st["summary"]["mean_finish_step"]
    for t in (st, ct):                                       # every answer complete, at its length
        assert t["summary"]["complete"] and t["summary"]["output_tokens"] == sum(r.output for r in SMALL)


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_tight_memory_preempts_and_each_mode_pays_its_own_way(llm, preemption):
    records, t = run_to_end(llm, TIGHT, "continuous", blocks=4, preemption=preemption)
    s = t["summary"]
    assert s["complete"] and s["preemptions"] == sum(len(r.preempted) for r in records) > 0
    states = {seg["state"] for seg in t["segments"]}
    if preemption == "recompute":
        assert "preempted" in states and "recompute" in states and "swapped" not in states
        assert s["recomputed_tokens"] > 0 and s["swapped_blocks"] == 0
    else:
        assert "swapped" in states and "recompute" not in states
        assert s["swapped_blocks"] > 0 and s["recomputed_tokens"] == 0


def test_static_batching_under_tight_memory_releases_finished_seats_and_says_so(llm):
    """Static batching at 8 blocks: the engine lets go of seats whose answers are done (they only compute
    padding) and records that as a preemption. The review read "preemptions 5 (0 tokens prefilled again)":
    a preemption that costs nothing. Those are counted apart and said in words."""
    import re
    from widgets.batching_timeline.view import compare_html

    reqs, _ = parse_lengths(format_lengths(pattern_lengths("long-short")))
    records, t = run_to_end(llm, reqs, "static", blocks=8)
    s = t["summary"]
    engine_count = sum(len(r.preempted) for r in records)
    assert engine_count > 0 and s["released_seats"] == engine_count and s["preemptions"] == 0
    for r in records:                                  # each one let go is done: it ends in that very step
        assert {name for name, _ in r.preempted} <= set(r.finished)
    text = re.sub(r"<[^>]+>", " ", compare_html({"static": t}, "measured on cpu"))
    assert f"0 ({engine_count} seats freed early*)" in text and "0 tokens prefilled again" not in text
    assert f"Static batching freed {engine_count} seats early when the KV memory ran short" in text
    assert "nothing was lost or redone" in text


def _steps(ms: float, n: int = 12, seqs: int = 4) -> list[dict]:
    return [{"step": i, "prefill": 0, "decode": seqs, "padding": 0, "ms": ms} for i in range(n)]


def _runs(static_ms: float, continuous_ms: float, busy: int = 0) -> dict:
    """Made-up complete runs: static 88 steps, continuous 48, each step of 4 requests decoding."""
    def run(steps, ms, b):
        return {"steps": _steps(ms, steps), "summary": {"complete": True, "steps": steps, "time_s": steps * ms / 1e3,
                                                        "busy_steps": b}}
    return {"static": run(88, static_ms, 0), "continuous": run(48, continuous_ms, busy)}


def test_a_noisy_comparison_says_so_and_compares_steps():
    """ux review: "continuous 26.78 s vs static 24.82 s" on a busy server, with no caveat. When the same
    step took different times in the two runs, or other work shared the server, or continuous batching
    took fewer steps but more seconds, the widget says the server was busy and compares steps."""
    import re
    from widgets.batching_timeline.view import noise_html

    def text(runs):
        return re.sub(r"<[^>]+>", "", noise_html(runs))

    assert text(_runs(60, 64)) == ""                                         # a quiet server: no note
    slow = text(_runs(60, 560))                                              # 48 steps took 26.9 s, 88 took 5.3 s
    assert "The server was busy during this run" in slow
    assert "a step of 4 requests decoding took 60 ms in the static run but 560 ms in the continuous one" in slow
    assert "continuous batching took fewer steps yet more seconds" in slow
    assert "compare steps (48 continuous vs 88 static), which noise cannot change" in slow
    shared = text(_runs(60, 62, busy=7))                                     # same pace, but not alone
    assert "other readers' work shared this server's CPU during 7 of the two runs' 136 steps" in shared
    assert "during" in shared and "a step of" not in shared
    unfinished = _runs(60, 560)
    unfinished["continuous"]["summary"]["complete"] = False
    assert text(unfinished) == ""                                            # only a finished pair is compared


def test_other_work_on_the_server_counts_busy_steps(llm):
    """run_mode asks busy() after every step and counts the steps that shared the server."""
    ticks = iter(range(10_000))
    t = run_mode(llm, SMALL[:2], "continuous", busy=lambda: next(ticks) % 2 == 0)
    assert t["summary"]["busy_steps"] == (t["summary"]["steps"] + 1) // 2
    assert run_mode(llm, SMALL[:2], "continuous")["summary"]["busy_steps"] == 0


def test_a_cancelled_run_frees_its_private_engine(llm, caplog):
    class StopAfter:
        def __init__(self, n):
            self.n = n

        def check(self):
            self.n -= 1
            if self.n < 0:
                raise Cancelled()
    caplog.set_level(logging.INFO, logger="widgets.common.sandboxes")
    with pytest.raises(Cancelled):
        run_mode(llm, SMALL, "static", kv_blocks=12, job=StopAfter(3))
    freed = [r.getMessage() for r in caplog.records if "sandbox" in r.getMessage()]
    assert freed == ["batching-timeline: sandbox freed, 12 of 12 KV blocks free"]


def test_lengths_are_parsed_clamped_and_explained():
    reqs, notes = parse_lengths("24→48, 12/6; 3:4\n999 -> 0, <img src=x>, 5 5")
    assert [(r.id, r.prompt, r.output) for r in reqs] == [("A", 24, 48), ("B", 12, 6), ("C", 3, 4),
                                                           ("D", MAX_PROMPT, 1), ("E", 5, 5)]
    assert any("999→0 became 128→1" in n for n in notes) and any("<img src=x>" in n for n in notes)
    reqs, notes = parse_lengths(", ".join(["1→1"] * 12))
    assert len(reqs) == MAX_REQUESTS and any("At most 8" in n for n in notes)
    for pattern in ("summarization", "chatbot", "codegen", "mixed", "long-short"):
        lengths = pattern_lengths(pattern)
        assert len(lengths) == MAX_REQUESTS and all(1 <= p <= MAX_PROMPT and 1 <= o <= MAX_OUTPUT for p, o in lengths)
        assert parse_lengths(format_lengths(lengths)) == ([Req("ABCDEFGH"[i], p, o) for i, (p, o) in
                                                          enumerate(lengths)], [])


def wait_for(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)                                     # polling a condition


def test_widget_paints_the_example_runs_and_frees_on_session_end(llm, caplog):
    w = BatchingTimeline(LoadedEngine())
    assert "recorded on" in w._compare.object and "<b>88</b>" in w._compare.object
    assert len(w._figs["static"][2].data["req"]) > 0        # the saved Gantt, before the model is up
    w = BatchingTimeline(LoadedEngine(llm))
    w._lengths.value = "<img src=x onerror=alert(1)>, 4→3, 3→2"
    assert "&lt;img" in w.notes.object and "<img" not in w.notes.object
    caplog.set_level(logging.INFO, logger="widgets.common.sandboxes")
    w._start()
    assert w.jobs.wait_idle(120)
    assert "measured on" in w._compare.object and "Your runs" in w._history_pane.object
    assert w._figs["continuous"][0].y_range.factors == ["B", "A"]
    freed = lambda: sum("sandbox freed" in r.getMessage() for r in caplog.records)   # noqa: E731
    assert freed() == 2
    w._lengths.value = "20→60, 20→60"
    w._start()
    wait_for(lambda: "(running…)" in w._compare.object, "the second run to start stepping")
    w.close()                                                # what the session's end calls
    wait_for(lambda: freed() == 3, "the abandoned run's engine to be freed")
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


def test_a_run_waiting_for_a_seat_is_told_its_place_then_runs(llm):
    import threading
    from widgets.batching_timeline.compute import run_both
    from widgets.batching_timeline.view import waiting_text
    from widgets.common.sharing import BATCHING_RUNS
    held, release = threading.Barrier(BATCHING_RUNS.seats + 1), threading.Event()

    def hold():                                       # another reader's run in each seat
        with BATCHING_RUNS.seat():
            held.wait()
            release.wait(60)
    holders = [threading.Thread(target=hold) for _ in range(BATCHING_RUNS.seats)]
    for t in holders:
        t.start()
    held.wait()                                        # every seat is taken

    class Job:
        posts: list = []

        def check(self):
            pass

        def post(self, what):
            self.posts.append(what)
            if what == (None, 1):                      # told its place: let the others finish
                release.set()
    job = Job()
    runs = run_both(llm, SMALL[:2], 16, "recompute", job)
    for t in holders:
        t.join()
    assert job.posts[0] == (None, 1) and set(runs) == {"static", "continuous"}
    assert all(mode is not None for mode, _ in job.posts[1:])   # then progress from the runs themselves
    assert "yours is next (place 1 in line)" in waiting_text(1, 2) and "2 comparisons at once" in waiting_text(1, 2)
    assert "2 runs ahead of yours (place 3" in waiting_text(3, 2)
