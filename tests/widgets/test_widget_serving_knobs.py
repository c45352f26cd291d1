"""The serving-knobs widget (chapter 20): each point is its run's metrics as the engine's outputs give
them, the frontier keeps exactly the unbeaten runs, and no block stays held after a run or a Stop."""
from __future__ import annotations

import numpy as np
import pytest

pn = pytest.importorskip("panel")

from widgets.serving_knobs import compute  # noqa: E402
from widgets.common import Cancelled  # noqa: E402
from widgets.common.examples import load_example  # noqa: E402
from widgets.common.testing import LoadedEngine, same  # noqa: E402
from widgets.serving_knobs.widget import EXAMPLE_SEQS, ServingKnobsWidget  # noqa: E402
from widgets.serving_knobs.compute import Knobs, frontier, lengths, point_from, prepare, run_point, serve_point  # noqa: E402

TIMES = frozenset({"tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "duration_s", "device"})


def test_saved_example_is_fresh(llm):
    saved = load_example("serving-knobs").data
    assert [r["knobs"]["max_num_seqs"] for r in saved["runs"]] == list(EXAMPLE_SEQS)
    # the deterministic half of a run (a burst of requests: the same steps every time), at 16 seqs: the
    # fewest steps (the runs at 1 and 4 seqs differ from it only in the knob)
    run = saved["runs"][-1]
    fresh = run_point(llm, Knobs(**run["knobs"]))
    diffs = same(run, fresh, ignore=TIMES)
    assert not diffs, "run `python -m widgets.examples serving-knobs`:\n" + "\n".join(diffs[:20])


def test_a_point_is_its_runs_metrics(llm):
    from engine import serve_workload
    knobs = Knobs("chat", max_num_seqs=2, budget=64)
    with prepare(llm, knobs, num_requests=4) as (engine, requests, budget):
        run = serve_workload(engine, requests)
        point = point_from(knobs, run.metrics, budget, llm.device_name, engine.num_free_blocks())
        ttft = [o.metrics.ttft_s * 1e3 for o in run.outputs]
        itl = [g * 1e3 for o in run.outputs for g in o.metrics.itl_s]
        assert point["ttft_p50_ms"] == pytest.approx(np.percentile(ttft, 50), abs=1e-3)
        assert point["ttft_p99_ms"] == pytest.approx(np.percentile(ttft, 99), abs=1e-3)
        assert point["itl_p50_ms"] == pytest.approx(np.percentile(itl, 50), abs=1e-3)
        out_tokens = sum(r.output_len for r in requests)
        assert point["tokens_per_s"] == pytest.approx(out_tokens / point["duration_s"], rel=1e-2)
        assert point["steps"] == engine.trace.num_steps and point["free_after"] == point["num_blocks"] == 64
        assert max(len(r.entries) for r in engine.trace) <= 2                # max_num_seqs held


def test_frontier_keeps_the_unbeaten_runs():
    pts = [{"tokens_per_s": t, "lat": l} for t, l in ((10, 5), (20, 8), (15, 9), (30, 20), (25, 30), (5, 6))]
    assert [(p["tokens_per_s"], p["lat"]) for p in frontier(pts, "lat")] == [(10, 5), (20, 8), (30, 20)]


def test_no_chunking_raises_the_budget_and_patterns_have_their_lengths(llm):
    longest = max(r["isl"] + r["osl"] for r in lengths("summarization"))
    with prepare(llm, Knobs("summarization", budget=32, chunked=False), num_requests=12) as (engine, _, budget):
        assert budget == longest == engine.config.max_num_batched_tokens
    summ, code = lengths("summarization"), lengths("code generation")
    assert min(r["isl"] for r in summ) >= 100 and max(r["osl"] for r in summ) <= 15     # prefill-heavy
    assert max(r["isl"] for r in code) <= 25 and min(r["osl"] for r in code) >= 25      # decode-heavy
    assert {r["kind"] for r in lengths("mixed")} == {"chatbot", "summarization", "codegen"}
    assert lengths("chat", llm.config.vocab_size) == lengths("chat")                    # before the model loads


def test_a_stopped_run_leaves_no_block_held(llm):
    knobs = Knobs("summarization", max_num_seqs=4, budget=64)
    calls = []

    def stop():
        calls.append(1)
        if len(calls) > 4:
            raise Cancelled()
    with prepare(llm, knobs, num_requests=6) as (engine, requests, budget):
        with pytest.raises(Cancelled):
            serve_point(llm, knobs, engine, requests, budget, check=stop)
        state = engine.allocator_state()
        assert engine.trace.num_steps == 4 and not engine.has_unfinished()
        assert state.num_free == state.num_blocks and not state.tables


def test_widget_plots_each_runs_point(llm, monkeypatch):
    monkeypatch.setattr(compute, "NUM_REQUESTS", 3)
    w = ServingKnobsWidget(LoadedEngine())
    assert len(w._ttft.src["p50"].data["x"]) == len(EXAMPLE_SEQS) and "recorded on" in w._table.object
    w = ServingKnobsWidget(LoadedEngine(llm))
    w._seqs.value = 2
    w._on_run()
    assert w.jobs.wait_idle(300)
    [point] = w._runs                                              # the example's runs gave way
    assert point["knobs"]["max_num_seqs"] == 2 and "source" not in point
    assert w._ttft.src["p50"].data["x"] == [point["tokens_per_s"]]
    assert w._ttft.src["p99"].data["y"] == [point["ttft_p99_ms"]] and w._itl.src["p50"].data["y"] == [point["itl_p50_ms"]]
    assert "measured on cpu" in w._table.object and w._ttft.src["p50"].data["n"] == ["1"]
    w._pattern.value = "summarization"                             # another pattern: its lengths, no runs yet
    assert "summarization" in w._lengths.src and len(w._lengths.src["summarization"].data["x"]) == 12
    assert w._ttft.src["p50"].data["x"] == [] and "1 run(s) of other patterns" in w._table.object
    w.close()


def test_charts_have_readable_ticks_room_and_only_marked_legend_entries():
    """ux review ch. 20: the TTFT axis jammed "8,000 7,000 6,000 5,000", clipped the top point's number
    and had no tick beneath the lowest point; the ISL/OSL legend listed kinds with no marker."""
    from bokeh.models import FixedTicker
    from widgets.common.theme import MIN_BORDER
    w = ServingKnobsWidget(LoadedEngine())                         # the saved example's three runs
    for plot in (w._ttft, w._itl):
        fig, key = plot.fig, plot.what.lower()
        ticks = fig.yaxis[0].ticker.ticks
        assert isinstance(fig.yaxis[0].ticker, FixedTicker)
        assert all(int(f"{t:.0e}"[0]) in (1, 2, 5) for t in ticks)   # 1, 2, 5 × 10ⁿ only
        ys = [p[f"{key}_{pct}_ms"] for p in w._runs for pct in ("p50", "p99")]
        start, end = fig.y_range.start, fig.y_range.end
        assert start in ticks and start <= min(ys)                   # a tick at or beneath the lowest point
        assert end >= 1.5 * max(ys)                                   # room for the top point's number
        assert fig.min_border_left >= MIN_BORDER
    shown = {i.label.value for i in w._lengths.fig.legend[0].items if i.visible}
    assert shown == {"chat"}                                          # the chat pattern: one kind, one entry
    w._pattern.value = "mixed"
    shown = {i.label.value for i in w._lengths.fig.legend[0].items if i.visible}
    assert shown == {"chat", "summarization", "code generation"}
    w.close()


def test_chapter_20_quotes_the_recorded_runs_as_the_table_shows_them():
    """ux review #2: the prose said ITL "barely moves" from max_num_seqs 1 to 16 beside a table that
    showed it rise 43 → 81 → 135 ms. The paragraph quotes the saved runs' figures as the widget prints them."""
    from pathlib import Path
    from widgets.serving_knobs.view import _ms
    chapter = (Path(__file__).resolve().parents[2] / "content" / "20-throughput-vs-latency.md").read_text()
    para = next(p for p in chapter.split("\n\n") if p.startswith("In the widget,"))
    runs = load_example("serving-knobs").data["runs"]
    assert [r["knobs"]["max_num_seqs"] for r in runs] == [1, 4, 16] and "barely moves" not in chapter
    quoted = lambda fmt, key: " to ".join(fmt(r[key]) for r in runs)
    assert quoted(lambda v: f"{v:,.1f}", "tokens_per_s") in para
    assert quoted(_ms, "ttft_p50_ms") in para and quoted(_ms, "itl_p50_ms") in para
    itl = [r["itl_p50_ms"] for r in runs]
    assert itl == sorted(itl) and "ITL p50 rises" in para            # what the sentence says is what they do
