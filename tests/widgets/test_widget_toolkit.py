"""The shared widget toolkit (widgets/common): job runner, input limits, labels, the pass counter read
from the step trace, the registry, saved examples, the gate; and `generate` on the real engine."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("panel")

from engine import ScheduledEntry, StepRecord  # noqa: E402
from widgets.common import (EngineGate, JobRunner, clamp, clip, describe, esc, label_html, measured,  # noqa: E402
                            modelled, recorded, register, request_passes, show_token)
from widgets.common.examples import rounded  # noqa: E402
from widgets.common.jobs import error_message  # noqa: E402
from widgets.common.sentence import reader_sentence  # noqa: E402
from widgets.common.testing import assert_example_fresh, same  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


# -- jobs ---------------------------------------------------------------------------------------
def test_debounce_runs_only_the_newest_of_a_burst():
    ran, shown = [], []
    runner = JobRunner()
    for i in range(5):     # a quiet second: far longer than any stall between two submits, even on a busy machine
        runner.submit(lambda job, i=i: ran.append(i) or i, shown.append, debounce_ms=1000)
    assert runner.wait_idle(30)
    assert ran == [4] and shown == [4]


def test_a_newer_job_supersedes_a_running_one():
    started, release, shown = threading.Event(), threading.Event(), []

    def slow(job):
        started.set()
        release.wait(30)
        return "old"
    runner = JobRunner()
    first = runner.submit(slow, shown.append)
    assert started.wait(30)
    # The old job's result reaches the runner on its own thread, after the new one may have been shown:
    # wait until the runner has handled it, then it must not have been shown.
    handled, deliver = threading.Event(), runner._deliver
    runner._deliver = lambda job, callback: (deliver(job, callback), job is first and handled.set())
    runner.submit(lambda job: "new", shown.append)
    release.set()
    assert runner.wait_idle(30) and first.cancelled
    assert handled.wait(30)
    assert shown == ["new"]


def test_a_job_submitted_by_a_callback_keeps_the_runner_busy():
    shown, busy = [], []
    runner = JobRunner(on_busy=busy.append)
    release = threading.Event()

    def second(job):
        release.wait(5)
        return "second"
    runner.submit(lambda job: "first", lambda r: (shown.append(r), runner.submit(second, shown.append)))
    assert not runner.wait_idle(0.3)           # the follow-up is still running: not idle
    assert runner.busy and busy[-1] is True
    release.set()
    assert runner.wait_idle(5) and shown == ["first", "second"] and busy[-1] is False


def test_cancel_and_close_stop_work_and_refuse_new_jobs():
    busy, shown, gate = [], [], threading.Event()

    def work(job):
        gate.wait(5)
        job.check()                    # raises Cancelled: nothing is delivered
        return "late"
    runner = JobRunner(on_busy=busy.append)
    job = runner.submit(work, shown.append)
    runner.close()
    gate.set()
    assert job.cancelled and runner.wait_idle(5) and not runner.busy
    assert runner.submit(lambda job: 1, shown.append) is None
    assert shown == [] and busy == [True, False]


def test_errors_become_one_line_for_the_reader():
    errors = []
    runner = JobRunner()
    runner.submit(lambda job: 1 / 0, lambda r: None, on_error=errors.append)
    assert runner.wait_idle(5)
    assert errors == ["ZeroDivisionError: division by zero"]
    assert error_message(ValueError("x" * 500 + "\nsecond line")).endswith("…")


@pytest.mark.parametrize("ended", ["page closed", "sandbox freed", "engine closed"])
def test_work_ended_by_the_page_or_server_going_away_is_not_an_error(ended, caplog):
    """A job stopped because its page closed (before or after it made a private engine) or because the
    server is stopping ends quietly: no error line for the reader, no traceback in the log."""
    from engine import EngineClosed, SandboxFreed
    from widgets.common.sandboxes import PageClosed
    exc = {"page closed": PageClosed, "sandbox freed": SandboxFreed, "engine closed": EngineClosed}[ended]

    def work(job):
        raise exc("gone")
    errors, done = [], []
    runner = JobRunner()
    with caplog.at_level("DEBUG", logger="widgets.common.jobs"):
        runner.submit(work, done.append, on_error=errors.append)
        assert runner.wait_idle(5) and not runner.busy
    assert errors == [] and done == []
    assert not [r for r in caplog.records if r.levelno >= 30 or r.exc_info], caplog.text
    assert "gone" in caplog.text                  # still one debug line, for whoever looks


def test_progress_posts_reach_the_page_in_order():
    seen = []
    runner = JobRunner()
    runner.submit(lambda job: [job.post(i) for i in range(3)] and "done", seen.append, on_progress=seen.append)
    assert runner.wait_idle(5)
    assert seen[-1] == "done" and seen[:-1] == sorted(seen[:-1])


# -- text, labels -------------------------------------------------------------------------------
def test_escaping_and_limits():
    assert "<" not in esc(XSS) and "&lt;img" in esc(XSS)
    assert esc("costs $5 \\ day") == "costs &#36;5 &#92; day"       # never typeset as math
    assert clip("abcdef", 4) == ("abcd", "Only the first 4 characters are used (the limit is 4).")
    assert clip("abc", 4) == ("abc", None)
    assert clamp(500, 1, 128, "Max new tokens") == (128, "Max new tokens is 1–128: using 128, not 500.")
    assert clamp("x", 1, 128, "N")[0] == 1 and clamp(7, 1, 128, "N") == (7, None)
    assert show_token(" is\n") == "␣is↵" and show_token("\x07") == "␇"
    # an invisible character gets a mark a reader can read, never Python's escape text (ch. 9 showed "\xa0")
    assert show_token("\xa0") == "⍽" and show_token("\u200d") == "‹U+200D›"
    invisible = [chr(c) for c in range(0x30000) if not chr(c).isprintable() and not 0xD800 <= c < 0xE000]
    assert all(show_token(c).isprintable() and "\\" not in show_token(c) for c in invisible)


def test_labels_say_where_numbers_come_from():
    assert measured("cpu (2 threads)") == "measured on cpu (2 threads)"
    assert measured("cpu (2 threads)", 0.0031) == "measured on cpu (2 threads) in 3.1 ms"
    r = recorded("NVIDIA H200", "python -m engine bench kernels", "2025-11-20")
    assert r == "recorded on NVIDIA H200 by `python -m engine bench kernels` (2025-11-20)"
    assert "<code>python -m engine bench kernels</code>" in label_html(r)
    assert modelled("H100 SXM") == "modelled (H100 SXM)" and "w-label-modelled" in label_html(modelled())
    assert "&lt;img" in label_html(measured(XSS))


# -- the pass counter from the step trace -------------------------------------------------------
def _rec(step, *entries, preempted=()):
    return StepRecord(step, 0.0, 0.0, 0.05, 0.0, entries=list(entries), preempted=list(preempted))


def test_passes_chunked_prefill_preemption_and_sharing():
    other = ScheduledEntry("req-9", 9, "decode", 1, 40)
    records = [
        _rec(0, ScheduledEntry("req-1", 1, "prefill", 2048, 0), other),
        _rec(1, ScheduledEntry("req-1", 1, "prefill", 952, 2048)),
        _rec(2, ScheduledEntry("req-1", 1, "decode", 1, 3000)),
        _rec(3, other, preempted=[("req-1", "recompute")]),
        _rec(4, ScheduledEntry("req-1", 1, "prefill", 2002, 0)),
        _rec(5, ScheduledEntry("req-1", 1, "decode", 1, 3002), other),
    ]
    p = request_passes(records, "req-1")
    assert (p.passes, p.prefill_passes, p.decode_passes) == (5, 3, 2)
    assert p.chunks == [2048, 952] and p.prompt_tokens == 3000 and p.recomputed_tokens == 2002
    lines = describe(p)
    assert lines[0] == "prompt: 3,000 tokens computed in 2 chunks (2,048 + 952)"
    assert "3 prefill passes + 2 decode passes = 5 forward passes" in lines
    assert "preempted once (recompute): 2,002 tokens computed again" in lines
    assert "2 of 5 passes shared with other requests" in lines


def test_a_streaming_counter_shows_only_the_passes_behind_the_tokens_received():
    """The engine often runs the next pass while a token travels to the page: counted from the trace as
    it stands, the counter read one pass ahead of the tokens on screen (ux review, chapter 1)."""
    records = [_rec(0, ScheduledEntry("r", 1, "prefill", 7, 0))] + [
        _rec(i, ScheduledEntry("r", 1, "decode", 1, 6 + i)) for i in range(1, 5)]
    p = request_passes(records, "r")
    assert (p.passes, p.decode_passes) == (5, 4)
    seen = p.upto(2)                                   # 2 tokens on the page: the prefill's and one decode's
    assert (seen.passes, seen.prefill_passes, seen.decode_passes, len(seen.decode_s)) == (2, 1, 1, 1)
    assert p.upto(1).passes == 1 and p.upto(0).passes == 1
    assert p.upto(5) is p and p.upto(9) is p           # every pass already has its token


def test_a_busy_server_is_named_in_the_counter():
    others = [ScheduledEntry(f"o{i}", 10 + i, "decode", 1, 40) for i in range(3)]
    busy = request_passes([_rec(0, ScheduledEntry("r", 1, "prefill", 5, 0), *others)], "r")
    assert busy.most_others == 3 and any("up to 3 at once: a busy server" in line for line in describe(busy))
    pair = request_passes([_rec(0, ScheduledEntry("r", 1, "prefill", 5, 0), others[0])], "r")
    assert not any("busy server" in line for line in describe(pair))


def test_passes_prefix_cache_hit():
    p = request_passes([_rec(7, ScheduledEntry("r", 1, "prefill", 3, 15, 15))], "r")
    assert describe(p)[0] == "prompt: 3 of 18 tokens computed, 15 from the prefix cache"


# -- registry, examples, sentence, gate ---------------------------------------------------------
def test_registry_finds_every_widget_folder_and_refuses_two_widgets_with_one_name():
    from widgets.common.registry import registry, widget_folders
    found = registry()
    assert {f.replace("_", "-") for f in widget_folders()} <= set(found) and "generate" in found
    with pytest.raises(ValueError):
        register(name="generate")(lambda engine: None)


def test_rounded_and_same():
    assert rounded({"a": 0.123456789, "b": [1.0, float("nan")], 3: (2,)}) == {"a": 0.12346, "b": [1.0, None], "3": [2]}
    assert same({"x": [1.0, 2]}, {"x": [1.0004, 2]}) == []
    assert same({"x": [1.0, 2]}, {"x": [1.1, 2]}) == ["/x[0]: saved 1.0, fresh 1.1"]
    assert same({"t": 1, "k": 2}, {"t": 9, "k": 2}, ignore={"t"}) == []
    # display text: a rounded number may land one unit of its last digit away; ids and words may not
    assert same(["#247 (+0.62)", "2.6 → 3.5", "31%"], ["#247 (+0.61)", "2.6 → 3.4", "30%"]) == []
    assert same(["#247 (+0.62)"], ["#248 (+0.62)"]) and same(["0.108"], ["0.110"]) and same(["a 1.0"], ["b 1.0"])
    # a rank far down the vocabulary within max(2, 1%); any other integer exactly
    assert same({"rank": 3000, "n": 5}, {"rank": 3029, "n": 5}, ranks={"rank"}) == []
    assert same({"rank": 30}, {"rank": 33}, ranks={"rank"}) and same({"n": 3000}, {"n": 3001})


def test_reader_sentence_outside_a_session_is_the_default():
    assert reader_sentence("What is the capital of France?") == "What is the capital of France?"


def test_gate_calls_on_ready_once_when_the_engine_is_up():
    from tests.helpers.fakes import FakeHandle, FakeLLM
    from widgets.common.handle import EngineStatus
    calls = []
    h = FakeHandle(EngineStatus.LOADING, _llm=FakeLLM([]))
    gate = EngineGate(h, calls.append)
    gate.start()
    assert calls == [] and not gate.live and 'data-state="loading"' in gate.pane.object
    h.status = EngineStatus.READY
    gate.check()
    gate.check()
    assert len(calls) == 1 and gate.live and 'data-state="live"' in gate.pane.object
    gate.set_busy(True)
    assert 'data-state="busy"' in gate.pane.object
    gate.error(XSS)
    assert 'data-state="error"' in gate.pane.object and "<img" not in gate.pane.object


# -- generate on the real engine ------------------------------------------------------------------
def test_saved_generate_example_is_what_the_engine_writes(llm):
    # Times are measurements, and how much of the prompt the prefix cache holds depends on what ran before.
    assert_example_fresh("generate", llm, ignore={"prefill_s", "decode_s", "cached_prompt_tokens", "chunks"})


def test_generate_counts_what_the_engine_did(llm):
    from widgets.generate.compute import run_generation
    prompt = "Name a colour of the rainbow."
    first = run_generation(llm, prompt, 4, chat=True)
    again = run_generation(llm, prompt, 4, chat=True)
    for reply in (first, again):
        p = reply.passes
        assert p.passes == len(reply.tokens) == p.prefill_passes + p.decode_passes
    # The second time, the prompt's full blocks are in the prefix cache: only the rest is computed.
    p = again.passes
    assert p.cached_prompt_tokens >= 16 and p.prompt_tokens == first.passes.prompt_tokens
    assert f"{sum(p.chunks)} of {p.prompt_tokens} tokens computed" in describe(p)[0]


def test_card_table_labels_every_cell_for_the_phone_layout():
    from widgets.common import card_table
    html = card_table(("run", "max_num_seqs", "TTFT <p50>"), [[1, "4", ("9 ms", "x-ttft")]], "t")
    assert '<th>max_num_<wbr>seqs</th>' in html and "&lt;p50&gt;" in html and "<p50>" not in html
    assert '<td data-label="max_num_seqs">4</td>' in html
    assert '<td data-label="TTFT &lt;p50&gt;" class="x-ttft">9 ms</td>' in html
    assert 'class="pd-scroll w-cards"' in html                     # the container the CSS turns into cards
    empty = card_table(("a", "b"), [], empty="Press Run")
    assert '<td colspan="2" class="placeholder">Press Run</td>' in empty


def test_figures_wait_for_the_first_paint_in_boxes_of_their_height(monkeypatch):
    """defer_figures swaps each fixed-height Bokeh figure (nested too) for a box as tall, and puts the
    figures back, all of them, in the callback the page's load runs; a figure with no height stays."""
    import panel as pn
    from bokeh.plotting import figure

    from widgets.common.base import defer_figures
    loaded = []
    monkeypatch.setattr(pn.state, "onload", loaded.append)
    tall, free = figure(height=270), figure(sizing_mode="stretch_both", height=None)
    a, b, c = pn.pane.Bokeh(tall, sizing_mode="stretch_width"), pn.pane.Bokeh(figure(height=120)), pn.pane.Bokeh(free)
    inner = pn.Row(b)
    layout = pn.Column(pn.pane.HTML("x"), a, pn.FlexBox(inner), c)
    defer_figures(layout)
    assert layout[1] is not a and layout[1].height == 270 and "Drawing the chart" in layout[1].object
    assert inner[0] is not b and inner[0].height == 120
    assert layout[3] is c and len(loaded) == 1
    loaded[0]()
    assert layout[1] is a and inner[0] is b


def test_a_layout_with_no_figure_asks_for_no_load_callback(monkeypatch):
    import panel as pn

    from widgets.common.base import defer_figures
    loaded = []
    monkeypatch.setattr(pn.state, "onload", loaded.append)
    defer_figures(pn.Column(pn.pane.HTML("x")))
    assert loaded == []


@pytest.mark.parametrize("path, want", [("/app", "/app/static/app.css"), ("/app/", "/app/static/app.css"),
                                        ("/app/ws", "/app/static/app.css"), ("/book/app/ws", "/book/app/static/app.css"),
                                        ("/ws", "/app/static/app.css"), ("", "/app/static/app.css")])
def test_static_urls_point_at_the_app_even_from_the_websockets_request(monkeypatch, path, want):
    """A session Bokeh rebuilt from the websocket's request (/app/ws) must still link /app/static/."""
    import types

    import panel as pn

    from widgets.common.theme import static_url
    doc = types.SimpleNamespace(session_context=types.SimpleNamespace(request=types.SimpleNamespace(path=path)))
    monkeypatch.setattr(type(pn.state), "curdoc", property(lambda self: doc))
    assert static_url("app.css") == want
