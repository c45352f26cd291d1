"""The chunked-prefill widget (chapter 17) against the private engines it drives: the bars it draws are
the engine's step trace, chunking keeps every step under the budget while the chats keep decoding,
and no block stays held after a run or a cancelled one."""
from __future__ import annotations

import pytest

pn = pytest.importorskip("panel")

from widgets.chunked_prefill.widget import CHATS, DEFAULT_DOC, ChunkedPrefillWidget  # noqa: E402
from widgets.chunked_prefill.compute import DOC, compare, document_ids, drive, off_budget, private_engine  # noqa: E402
from widgets.chunked_prefill.view import bar_rows, progress_text, summary_html  # noqa: E402
from widgets.common import Cancelled  # noqa: E402
from widgets.common.examples import load_example  # noqa: E402
from widgets.common.testing import LoadedEngine, same  # noqa: E402

TIMES = frozenset({"end_ms", "wall_ms", "gaps", "doc_ttft_ms"})


@pytest.fixture(scope="module")
def prompts(llm):
    chats = [llm.tokenizer.encode_ids(llm.format_prompt(t, chat=True)) for t in CHATS]
    return chats, document_ids(llm, DEFAULT_DOC)[0]


@pytest.fixture(scope="module")
def chunked(llm, prompts):
    with private_engine(llm, 64, True) as engine:
        yield engine, drive(engine, *prompts)


def test_saved_example_is_fresh(llm):
    saved, fresh = load_example("chunked-prefill").data, compare(llm, list(CHATS), DEFAULT_DOC, 64)
    diffs = same(saved, fresh, ignore=TIMES)
    assert not diffs, "run `python -m widgets.examples chunked-prefill`:\n" + "\n".join(diffs[:20])
    assert all(len(saved[m]["gaps"][c]) == len(fresh[m]["gaps"][c]) for m in ("on", "off") for c in saved[m]["gaps"])


def test_the_bars_are_the_engines_step_trace(chunked):
    engine, run = chunked
    records = engine.trace.since(engine.trace.num_steps - len(run["steps"]))
    bars = bar_rows(run)
    for rec, step in zip(records, run["steps"]):
        mine = [h for x, h in zip(bars["x"], bars["h"]) if x == step["step"]]
        assert sorted(mine) == sorted(e.num_tokens for e in rec.entries)
        assert sum(mine) == rec.num_batched_tokens
    assert sum(1 for s in run["steps"] if s["step"] < 0) == 2               # the warm decode-only steps


def test_chunks_fit_the_budget_and_the_chats_never_wait(chunked, prompts):
    _, run = chunked
    doc = prompts[1]
    assert sum(run["doc_chunks"]) == len(doc) and len(run["doc_chunks"]) == -(-len(doc) // (64 - 3))
    for s in run["steps"]:
        assert sum(s["tokens"].values()) <= 64
        assert all(s["tokens"][c] == 1 and s["kinds"][c] == "decode" for c in ("chat 1", "chat 2", "chat 3"))
    gaps = [g for gs in run["gaps"].values() for _, g in gs]
    assert len(gaps) == 3 * len(run["steps"]) and all(g > 0 for g in gaps)   # one token per chat per step


def test_without_chunking_one_step_holds_the_whole_document(llm, prompts):
    chats, doc = prompts
    with private_engine(llm, off_budget(64, chats, doc), False) as engine:
        run = drive(engine, chats, doc)
        assert run["doc_chunks"] == [len(doc)] and run["budget"] >= len(doc) + 4
        [big] = [s for s in run["steps"] if DOC in s["tokens"] and s["kinds"][DOC] == "prefill"]
        assert big["tokens"][DOC] == len(doc) and len(big["tokens"]) == 4        # the chats still ride along
        assert run["free_after"] == run["num_blocks"] == engine.num_free_blocks()
    assert "went in <b class=\"cp-chunks\">1 chunk</b>" in summary_html({"budget": 64, "on": run}, "measured")


def test_no_block_stays_held_after_a_run_or_a_cancel(llm, chunked, prompts):
    engine, run = chunked
    assert run["free_after"] == run["num_blocks"] and not engine.has_unfinished()
    assert not engine.allocator_state().tables
    calls = []

    def stop_after_a_few_steps():
        calls.append(1)
        if len(calls) > 5:
            raise Cancelled()
    with private_engine(llm, 64, True) as engine:
        with pytest.raises(Cancelled):
            drive(engine, *prompts, check=stop_after_a_few_steps)
        assert not engine.has_unfinished() and engine.num_free_blocks() == engine.allocator_state().num_blocks


def test_widget_runs_on_a_budget_change(llm):
    w = ChunkedPrefillWidget(LoadedEngine())
    assert "recorded on" in w._summary.object and w._bars["on"].src.data["h"]      # the saved example
    w = ChunkedPrefillWidget(LoadedEngine(llm))
    assert not w.jobs.busy and not w._run.disabled                         # live: waits for the reader
    w._budget.value = 512
    assert w.jobs.wait_idle(300) and "measured on cpu" in w._summary.object
    assert "1 chunk" in w._summary.object                                       # 512 holds the whole document
    with pytest.raises(ValueError):
        compare(llm, list(CHATS), DEFAULT_DOC, 100)                             # not a budget on the slider
    w.close()


def test_on_and_off_step_charts_share_their_axes():
    """ux review #5: with a y axis each, the unchunked 284-token step was drawn as tall as a 64-token
    chunk. Both figures hold the same range objects, so Bokeh spans them over both figures' bars."""
    w = ChunkedPrefillWidget(LoadedEngine())
    on, off = w._bars["on"].fig, w._bars["off"].fig
    assert on.y_range is off.y_range and on.x_range is off.x_range and on.y_range.start == 0
    items = [i.label.value for i in w._gaps.fig.legend[0].items]  # the dashed lines have their entries
    assert "chunked: document's 1st token" in items and "not chunked: document's 1st token" in items
    w.close()


def test_a_run_posts_its_progress_step_by_step_before_its_result(llm):
    """Honest waits (issue 30 item 3): a comparison takes seconds on a CPU, so every step posts where it
    is — the run, its step, the document's tokens so far — and the reader's line says it."""
    posts = []
    final = compare(llm, list(CHATS), DEFAULT_DOC, 128, post=posts.append)
    progress = [d["progress"] for d in posts if "progress" in d]
    on = [p for p in progress if p["run"] == "on"]
    off = [p for p in progress if p["run"] == "off"]
    assert on and off and progress.index(on[-1]) < progress.index(off[0])        # run 1, then run 2
    assert [p["steps"] for p in on] == sorted(p["steps"] for p in on)             # one post per step, in order
    doc = [p for p in on if p["stage"] == "document"]
    assert [p["doc_done"] for p in doc] == sorted(p["doc_done"] for p in doc)      # the document fills up ...
    assert on[-1]["doc_done"] == final["on"]["doc_tokens"] and on[-1]["chunks"] == len(final["on"]["doc_chunks"])
    assert off[-1]["chunks"] == 1 and off[-1]["budget"] == final["off"]["budget"]  # ... in one step unchunked
    assert all("off" not in d for d in posts[:-1]) and "on" in posts[-1]           # the result comes after

    middle = next(p for p in on if p["stage"] == "document" and 0 < p["doc_done"] < p["doc_tokens"])
    text = progress_text(middle)
    assert text.startswith("Run 1 of 2 (chunked, budget 128): step ") and "chunk" in text
    assert f"{middle['doc_done']:,} of {middle['doc_tokens']:,} prompt tokens computed" in text
    assert progress_text(off[-1]).startswith(f"Run 2 of 2 (not chunked, budget raised to {off[-1]['budget']:,})")
    assert "server is also generating for 3 other requests" in progress_text({**middle, "others": 3})
    assert "server" not in text and progress_text(None) == ""


def test_busy_requests_reads_the_shared_engines_latest_step():
    from types import SimpleNamespace as NS
    from widgets.common.load import busy_note, busy_requests
    assert busy_requests(NS(stats=NS(num_running=2, updated_s=100.0)), now=100.5) == 2
    assert busy_requests(NS(stats=NS(num_running=2, updated_s=100.0)), now=102.0) == 0    # gone idle since
    assert busy_requests(object()) == 0 and busy_note(0) == ""
    assert busy_note(1) == " The server is also generating for another request, so this run is slower than usual."
