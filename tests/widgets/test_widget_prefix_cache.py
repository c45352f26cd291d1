"""The prefix-cache widget (chapter 16) against the private engines it drives: the hits it lights up are
the blocks the engine shared, an early edit misses every later block, and no block stays held."""
from __future__ import annotations

import pytest

pn = pytest.importorskip("panel")

from widgets.common import Cancelled  # noqa: E402
from widgets.common.examples import load_example  # noqa: E402
from widgets.common.testing import LoadedEngine, same  # noqa: E402
from widgets.prefix_cache.compute import BLOCK_SIZE, PrefixLab, chat_ids  # noqa: E402
from widgets.prefix_cache.widget import (DEFAULT_QUESTIONS, DEFAULT_SYSTEM, PrefixCacheWidget,  # noqa: E402
                                         early_word_changed, parse_questions)

QUESTIONS = list(DEFAULT_QUESTIONS)
TIMES = frozenset({"ttft_on_ms", "ttft_off_ms"})


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def expected_hits(cached: list[int], prompt: list[int]) -> int:
    """Full blocks of `prompt` equal to `cached`'s, never the block holding the prompt's last token."""
    return min(common_prefix(cached, prompt) // BLOCK_SIZE, (len(prompt) - 1) // BLOCK_SIZE)


@pytest.fixture(scope="module")
def lab(llm):
    lab = PrefixLab(llm)
    yield lab
    lab.close()


@pytest.fixture(scope="module")
def first(lab):
    return lab.send(DEFAULT_SYSTEM, QUESTIONS)


def test_saved_example_is_fresh(first):
    # the example is the first send of a fresh lab (computed once, by the module's `first` fixture)
    saved = load_example("prefix-cache")
    diffs = same(saved.data, first, ignore=TIMES)
    assert not diffs, "run `python -m widgets.examples prefix-cache`:\n" + "\n".join(diffs[:20])


def test_hits_are_the_blocks_the_engine_reports_shared(llm, first):
    q1, *later = first["requests"]
    assert not any(b["hit"] for b in q1["blocks"])                   # a cold cache: Q1 computes everything
    prompts = [chat_ids(llm, DEFAULT_SYSTEM, q) for q in QUESTIONS]
    hits = 0
    for req, prompt in zip(later, prompts[1:]):
        n = expected_hits(prompts[0], prompt)
        assert n >= 3 and [b["hit"] for b in req["blocks"]] == [True] * n + [False] * (len(req["blocks"]) - n)
        assert req["cached"] == n * BLOCK_SIZE and req["computed"] == len(prompt) - n * BLOCK_SIZE
        for mine, its in zip(req["blocks"][:n], q1["blocks"]):          # the same physical blocks as Q1's ...
            assert mine["id"] == its["id"] and mine["hash"] == its["hash"]
            assert mine["ref"] == len(QUESTIONS) and mine["owners"] == [1, 2, 3]   # ... held by all three
        hits += n
    assert first["blocks_shared"] == hits                           # the trace's count of shared blocks
    unshared = [b for r in first["requests"] for b in r["blocks"][expected_hits(prompts[0], prompts[1]):]]
    assert all(b["ref"] == 1 for b in unshared)


def test_hashes_chain_and_caching_off_computes_every_prompt_token(first):
    for req in first["requests"]:
        full = [b for b in req["blocks"] if b["full"]]
        assert [b["parent"] for b in full] == [None] + [b["hash"] for b in full[:-1]]
        assert all(b["hash"] is None for b in req["blocks"] if not b["full"])
    assert first["prefill_off"] == sum(r["prompt_tokens"] for r in first["requests"])
    assert first["prefill_on"] == sum(r["computed"] for r in first["requests"]) < first["prefill_off"]


def test_an_early_edit_misses_every_later_block(llm, lab, first):
    again = lab.send(DEFAULT_SYSTEM, QUESTIONS)                       # the same send: Q1 now hits too
    q1, q1_ids = again["requests"][0], chat_ids(llm, DEFAULT_SYSTEM, QUESTIONS[0])
    assert q1["cached"] == expected_hits(q1_ids, q1_ids) * BLOCK_SIZE > 0
    assert again["compared"] and not any(b["changed"] for b in q1["blocks"])
    # an edit in the second sentence: blocks before it still hit, every block from it on misses
    late = DEFAULT_SYSTEM.replace("plain words", "simple words")
    edited = lab.send(late, QUESTIONS)
    n = expected_hits(q1_ids, chat_ids(llm, late, QUESTIONS[0]))
    blocks = edited["requests"][0]["blocks"]
    assert 0 < n < len(blocks) - 1
    assert [b["hit"] for b in blocks] == [True] * n + [False] * (len(blocks) - n)
    assert [b["changed"] for b in blocks if b["full"]] == [False] * n + [True] * (len([b for b in blocks if b["full"]]) - n)
    # the widget's own button edits the first sentence: nothing hits any more
    early = lab.send(early_word_changed(late), QUESTIONS)
    assert early_word_changed(late) != late and not any(b["hit"] for b in early["requests"][0]["blocks"])


def test_no_block_stays_held_after_a_send_or_a_cancelled_send(lab):
    state = lab.engine.allocator_state()
    assert state.num_free == state.num_blocks and not state.tables and state.num_cached > 0
    steps = []

    def stop_after_one_step():
        steps.append(1)
        if len(steps) > 1:
            raise Cancelled()
    with pytest.raises(Cancelled):
        lab.send("A different system prompt, never sent before, long enough for a block or two.", QUESTIONS,
                 check=stop_after_one_step)
    state = lab.engine.allocator_state()
    assert not lab.engine.has_unfinished() and state.num_free == state.num_blocks and not state.tables


def test_widget_escapes_an_edit_on_a_cold_cache_misses_and_frees_on_close(llm):
    w = PrefixCacheWidget(LoadedEngine())
    assert "pc-hit" in w._blocks.object and "recorded on" in w._summary.object     # the saved example
    w = PrefixCacheWidget(LoadedEngine(llm), questions=["<img src=x onerror=alert(1)>", "And a second one?"])
    assert not w.jobs.busy and w._lab is None and not w._send.disabled          # live: waits for the reader
    w._change_word()                     # a cold cache: the unedited prompt goes first, then the edited one
    assert w.jobs.wait_idle(120) and "cheerful" in w._system.value and len(w._lab.engine.trace) > 0
    assert "&lt;img src=x" in w._blocks.object and "<img" not in w._blocks.object
    assert "measured on cpu" in w._summary.object and "hashes changed from block 0" in w._summary.object
    q1 = w._lab.previous["requests"][0]["blocks"]                        # what the view was painted from
    assert not any(b["hit"] for b in q1) and all(b["changed"] for b in q1 if b["full"])
    kept, notes = parse_questions("\n".join(f"Question {i}?" for i in range(6)) + "\n" + "x" * 300)
    assert kept == [f"Question {i}?" for i in range(4)] and notes == ["Only the first 4 questions are sent."]
    engine = w._lab.engine
    w.close()
    assert engine.num_free_blocks() == engine.allocator_state().num_blocks and w._lab is None


def test_a_send_posts_its_progress_step_by_step(llm):
    """Honest waits (issue 30 item 3): a send is two engines of a few steps each, seconds on a CPU; each
    step posts which engine and stage it is at, and the reader's line says it."""
    from widgets.prefix_cache.compute import NEW_TOKENS
    from widgets.prefix_cache.view import progress_text
    posts = []
    lab = PrefixLab(llm)
    try:
        data = lab.send(DEFAULT_SYSTEM, list(DEFAULT_QUESTIONS), progress=posts.append)
    finally:
        lab.close()
    assert data["requests"] and posts
    for mode in ("on", "off"):
        mine = [p for p in posts if p["engine"] == mode]
        assert [p["stage"] for p in mine][-1] == "decode" and "q1" in {p["stage"] for p in mine}
        assert [p["steps"] for p in mine] == list(range(1, len(mine) + 1))          # one post per step
        assert sum(p["stage"] == "others" for p in mine) == 1                       # Q2 … Q3 come together
    assert max(i for i, p in enumerate(posts) if p["engine"] == "on") < posts.index(
        next(p for p in posts if p["engine"] == "off"))                              # caching on, then off
    others = next(p for p in posts if p["stage"] == "others")
    assert progress_text(others) == (f"Caching on (engine 1 of 2): step {others['steps']}, Q2–Q3 arrive and "
                                     f"look up Q1's blocks…")
    decode = {**posts[-1], "warm": True, "others": 1}
    text = progress_text(decode)
    assert text.startswith("First the unedited prompt, to fill the cache. Caching off, for comparison (engine 2 of 2)")
    assert f"decoding {NEW_TOKENS} tokens each…" in text and "also generating for another request" in text
    assert progress_text(None) == ""
