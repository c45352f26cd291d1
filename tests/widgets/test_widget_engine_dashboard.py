"""The live engine dashboard and fair sharing: numbers from the engine's own per-step snapshot, no
engine read per session, the reader's requests marked, queue places, per-reader limits."""
from __future__ import annotations

import threading
import time

import pytest

pn = pytest.importorskip("panel")

from engine import SamplingParams  # noqa: E402
from widgets.common.sharing import Admission, Reader, Refused  # noqa: E402
from widgets.common.testing import LoadedEngine, assert_example_fresh  # noqa: E402
from widgets.engine_dashboard.compute import dashboard_view  # noqa: E402
from widgets.engine_dashboard.view import dashboard_html  # noqa: E402
from widgets.engine_dashboard.widget import EngineDashboard  # noqa: E402
from widgets.generate.compute import run_generation  # noqa: E402


def test_saved_example_is_fresh(llm):
    assert_example_fresh("engine-dashboard", llm, ignore={"tokens_per_s"})


def test_the_view_is_the_engines_latest_step_with_this_readers_request_marked(llm):
    long = llm.stream({"prompt_token_ids": list(range(100, 140))}, SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True))
    other = llm.stream({"prompt_token_ids": list(range(200, 230))}, SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True))
    mine_id = next(long).request_id
    next(other)
    try:
        # the snapshot and the allocator read together, between two steps (the streams keep decoding)
        stats, state = llm.loop.read(lambda: (llm.stats, llm.allocator_state()))
        view = dashboard_view(stats, mine={mine_id})
        assert [e["tokens"] for e in view["batch"]] == [e.num_tokens for e in stats.last.entries]
        assert [e["yours"] for e in view["batch"]] == [e.request_id == mine_id for e in stats.last.entries]
        assert view["step"] == stats.last.step and view["steps"] == stats.steps
        # blocks in use as the allocator counts them: both read in one gap between steps, and no other
        # request runs on this engine, so nothing changed the blocks since the snapshot was published
        assert view["kv_used"] == state.num_blocks - state.num_free
        html = dashboard_html(view, "measured on cpu")
        assert html.count("dash-yours") == sum(e["yours"] for e in view["batch"]) >= 1
    finally:
        long.close()
        other.close()
    assert llm.stats.num_free_blocks == llm.stats.num_blocks           # both aborted, every block back


def test_a_request_from_the_http_api_is_drawn_as_one(llm):
    """The OpenAI-compatible API submits with source="api": its request ids begin "api-", and the dashboard
    draws such a request as an API chip, neither the reader's own nor another reader's."""
    params = SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True)
    api = llm.stream({"prompt_token_ids": list(range(100, 120))}, params, source="api")
    page = llm.stream({"prompt_token_ids": list(range(200, 220))}, params)
    api_id, page_id = next(api).request_id, next(page).request_id
    try:
        assert api_id.startswith("api-") and not page_id.startswith("api-")
        stats = llm.loop.read(lambda: llm.stats)
        view = dashboard_view(stats, mine={page_id})
        kinds = {e.request_id: e for e in stats.last.entries}
        assert {api_id, page_id} <= set(kinds)          # both decode in every step now
        html = dashboard_html(view, "measured on cpu")
        assert html.count("dash-api") == 1 and "API · decode 1" in html and "OpenAI-compatible API" in html
        assert html.count("dash-yours") == 1
    finally:
        api.close()
        page.close()
    with pytest.raises(ValueError, match="source must be a short word"):
        next(llm.stream("x", params, source="api 1"))


def test_open_dashboards_never_ask_the_engine_anything(llm, monkeypatch):
    boards = [EngineDashboard(LoadedEngine(llm)) for _ in range(50)]
    calls = []
    monkeypatch.setattr(llm.loop, "_call", lambda fn: calls.append(fn))
    for board in boards:
        board.refresh()
    assert calls == []                                 # 50 sessions: zero engine reads, one shared snapshot
    assert all("dash-facts" in b._out.object for b in boards)


def test_a_burst_waits_in_line_with_its_place_shown():
    gate = Admission(seats=1)
    places, order, release = [], [], threading.Event()

    def hold():
        with gate.seat():
            order.append("first")
            release.wait(10)
    t1 = threading.Thread(target=hold)
    t1.start()
    deadline = time.monotonic() + 30
    while gate.running == 0 and time.monotonic() < deadline:
        release.wait(0.01)

    def wait_turn():
        with gate.seat(on_place=places.append):
            order.append("second")
    t2 = threading.Thread(target=wait_turn)
    t2.start()
    while not places and time.monotonic() < deadline:
        release.wait(0.01)
    assert places == [1] and gate.waiting == 1 and order == ["first"]
    release.set()
    t1.join(10)
    t2.join(10)
    assert order == ["first", "second"] and gate.running == 0 and gate.waiting == 0


def test_a_waiter_who_leaves_drops_out_of_the_line():
    gate = Admission(seats=0)
    with pytest.raises(Refused):
        with gate.seat(should_stop=lambda: True):
            pass
    assert gate.waiting == 0


def test_one_reader_runs_at_most_two_generations_at_once():
    reader = Reader()
    with reader.generation(), reader.generation():
        with pytest.raises(Refused, match="limit per reader is 2"):
            with reader.generation():
                pass
    assert reader.active == 0


def test_a_generation_is_listed_as_the_readers_while_it_runs(llm):
    reader, seen = Reader(), []
    reply = run_generation(llm, "Hello", 4, chat=False, reader=reader,
                           should_stop=lambda: seen.append(set(reader.requests)) or False)
    assert reply.tokens and any(s for s in seen) and reader.requests == set()
