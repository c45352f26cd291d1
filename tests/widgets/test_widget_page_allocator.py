"""The page allocator (chapter 15) against the private engine it drives: after every action the grid is
the allocator's state, a block appears exactly when a sequence crosses a multiple of 16 tokens, forks
share then copy on write, finished blocks return last first, paged waste stays under a block per
sequence, and nothing is left in use when the reader leaves."""
from __future__ import annotations

import random
import time

import pytest

pn = pytest.importorskip("panel")

from bokeh.document import Document  # noqa: E402
from widgets.page_allocator.compute import AllocatorSandbox  # noqa: E402
from widgets.page_allocator.view import compare_html, grid_html, usage  # noqa: E402
from widgets.common.testing import LoadedEngine, assert_example_fresh  # noqa: E402
from widgets.common.sandboxes import owned_by  # noqa: E402
from widgets.page_allocator.widget import PageAllocator  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"



def check(sandbox: AllocatorSandbox, pic: dict) -> None:
    """The picture is the engine's allocator state, and that state adds up."""
    state = sandbox.engine.allocator_state()
    assert [(b["id"], b["ref"], b["owners"], b["free_rank"]) for b in pic["blocks"]] == \
        [(b.block_id, b.ref_count, list(b.owners), b.free_rank) for b in state.blocks]
    assert pic["tables"] == state.tables and pic["free_order"] == state.free_order
    assert sum(b.ref_count for b in state.blocks) == sum(len(t) for t in state.tables.values())
    assert state.num_free == sum(b.ref_count == 0 for b in state.blocks) == len(state.free_order)
    for owner, s in pic["samples"].items():                  # a sequence holds exactly the blocks its tokens need
        assert len(s["table"]) == -(-s["cached"] // pic["block_size"])
        assert s["table"] == state.tables[owner]
    u = usage(pic)
    assert u["paged"]["wasted"] < pic["block_size"] * max(1, u["sequences"])   # under one block per sequence
    assert u["paged"]["used"] == sum(b["used"] for b in pic["blocks"])
    html = grid_html(pic)
    assert html.count('class="pa-block') == pic["num_blocks"]


def test_saved_example_is_fresh(llm):
    assert_example_fresh("page-allocator", llm)


def test_grid_is_the_allocator_after_every_action(llm):
    sb = AllocatorSandbox(llm, "Paged memory, one block at a time.")
    check(sb, sb.last)
    pic = sb.add(15, 20, 1)                                 # A: 15 prompt tokens -> one block
    check(sb, pic)
    (a_block,) = pic["tables"]["A"]
    assert pic["new"] == [a_block] and pic["samples"]["A"]["cached"] == 15
    pic = sb.step()                                          # 16 tokens: still one block
    check(sb, pic)
    assert pic["new"] == [] and pic["samples"]["A"]["cached"] == 16
    pic = sb.step()                                          # 17: a second block, from the head of the queue
    check(sb, pic)
    head = sb.engine.allocator_state().tables["A"][1]
    assert pic["new"] == [head] and pic["tables"]["A"] == [a_block, head]

    pic = sb.add(20, 6, 3)                                   # B: three samples of a 20-token prompt
    check(sb, pic)
    shared = pic["tables"]["B:0"]
    assert len(shared) == 2 and pic["tables"]["B:1"] == pic["tables"]["B:2"] == shared
    assert [pic["blocks"][b]["ref"] for b in shared] == [3, 3]
    assert sorted(b for b, _ in pic["shared"]) == shared
    pic = sb.step()                                          # each writes token 21 into the shared, partly filled block
    check(sb, pic)
    assert sb.engine.trace.since(sb.engine.trace.num_steps - 1)[0].blocks_copied == 2
    assert [(o, src) for o, src, _ in pic["copied"]] == [("B:0", shared[1]), ("B:1", shared[1])]
    assert pic["tables"]["B:2"] == shared                    # the last one writes in place
    assert pic["blocks"][shared[0]]["ref"] == 3 and pic["blocks"][shared[1]]["ref"] == 1
    assert "Copy-on-write" in pic["event"]

    table = list(pic["tables"]["A"])
    pic = sb.finish("A")                                     # A's blocks go back, last block first, to the tail
    check(sb, pic)
    assert pic["freed"] == table[::-1] and pic["free_order"][-2:] == table[::-1]
    assert "A" not in pic["tables"] and pic["requests"]["A"]["finished"]
    for _ in range(5):                                       # B finishes on its own after 6 tokens
        pic = sb.step()
        check(sb, pic)
    assert pic["requests"]["B"]["finished"] and not pic["tables"]
    assert sb.engine.num_free_blocks() == pic["num_blocks"]
    with pytest.raises(ValueError):
        sb.finish("B")
    sb.close()
    assert sb.engine.num_free_blocks() == 32 and not sb.engine.has_unfinished()


@pytest.mark.parametrize("seed", [1])
def test_a_random_walk_of_actions_keeps_grid_and_engine_equal(llm, seed):
    """Adds (n up to 3), steps and finishes in a random order (the pool may run tight enough to
    preempt): after each action the picture is the engine's state, fresh blocks come from the head of
    the free queue, and a finished request's blocks join its tail while the rest keep their places."""
    rng = random.Random(seed)
    sb = AllocatorSandbox(llm, XSS)
    seen = {"copied": 0, "new": 0, "freed": 0}
    for _ in range(28):
        before = sb.last
        live = [r for r, d in before["requests"].items() if not d["finished"]]
        roll = rng.random()
        if len(live) < 4 and (roll < 0.35 or not live):
            pic = sb.add(rng.randint(1, 64), rng.randint(8, 64), rng.randint(1, 3))
        elif roll < 0.45:
            pic = sb.finish(rng.choice(live))
            assert not pic["new"]                            # its blocks joined the tail; the rest kept their places
            assert pic["free_order"][:len(before["free_order"])] == before["free_order"]
        else:
            pic = sb.step()
        check(sb, pic)
        if "preempted" not in pic["event"]:                  # fresh blocks (and copies) from the head
            assert sorted(pic["new"]) == sorted(before["free_order"][:len(pic["new"])])
        for k in seen:
            seen[k] += len(pic[k])
    assert all(seen.values()), seen                          # the walk took, copied and freed blocks
    sb.close()
    assert sb.engine.num_free_blocks() == 32 and not sb.engine.allocator_state().tables


def test_side_panel_compares_the_same_sequences():
    pic = {"num_blocks": 32, "block_size": 16, "requests": {"A": {"colour": 0, "finished": False}},
           "samples": {"A": {"table": [0, 1], "cached": 20}, "A:1": {"table": [0, 2], "cached": 20}},
           "blocks": [{"id": 0, "ref": 2, "used": 16}, {"id": 1, "ref": 1, "used": 4}, {"id": 2, "ref": 1, "used": 4}]
           + [{"id": i, "ref": 0, "used": 0} for i in range(3, 32)]}
    u = usage(pic)
    assert u["contiguous"] == {"allocated": 256, "used": 40, "wasted": 216, "fit": 4}
    assert u["paged"] == {"allocated": 48, "used": 24, "wasted": 24, "fit": 21}
    html = compare_html(pic, "measured on cpu")
    assert "216 (84%)" in html and "about 21" in html and "modelled" in html


def test_side_panel_of_an_empty_pool_says_so_instead_of_comparing_nothing():
    pic = {"num_blocks": 32, "block_size": 16, "requests": {}, "samples": {},
           "blocks": [{"id": i, "ref": 0, "used": 0} for i in range(32)]}
    html = compare_html(pic, "measured on cpu")
    assert "No sequence holds a block yet" in html and "0 sequences" not in html and "<table" not in html
    assert "4 such reservations fit in 512 slots" in html          # 512 slots // 128 reserved each


def test_widget_replays_the_example_then_frees_its_pool_when_the_session_ends(llm):
    w = PageAllocator(LoadedEngine())
    assert 'class="pa-block' in w._grid.object and "recorded on" in w._side.object   # never blank
    page = Document()                                        # the widget's page: it owns the pool
    with owned_by(page):
        w = PageAllocator(LoadedEngine(llm), sentence=XSS)
    assert "&lt;img" in w._source.object and "<img" not in w._source.object
    assert w.jobs.wait_idle(600) and w._sandbox is not None
    pool = w._sandbox
    assert w._grid.object == grid_html(pool.last) and "Finished A" in pool.last["event"]
    w._queue(("add", 30, 40, 2), *[("step",)] * 3)
    deadline = time.monotonic() + 600
    while w._pending or w.jobs.busy:                         # polling a condition
        assert time.monotonic() < deadline
        time.sleep(0.02)
    check(pool, pool.last)
    assert "D:1" in pool.last["tables"] and w._grid.object == grid_html(pool.last)
    assert w._which.options == ["B", "C", "D"]
    w._queue(*[("step",)] * 16)                              # leave while steps are queued
    w.close()
    for end in list(page.session_destroyed_callbacks):      # the page's end frees what it owns
        end(None)
    while not pool.engine.freed:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert pool.engine.num_free_blocks() == 32 and not pool.engine.allocator_state().tables
    assert not pool.engine.has_unfinished() and pool.engine not in llm.sandboxes()
