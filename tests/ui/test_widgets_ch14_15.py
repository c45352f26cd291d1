"""Chapters 14 and 15 in Chromium: the batching timeline runs the reader's requests through both
schedulers (Gantt bars with tooltips, Stop, the KV-memory slider by keyboard), the page allocator adds,
steps (button and key), forks and finishes on the engine's own block manager, and a reader who leaves
mid-run gets their private engine freed on the server. Screenshots at 1280 and 390 px, light and dark."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")

from playwright.sync_api import expect  # noqa: E402
from widgets.common.testing import deep_count, deep_text, wait_live, wait_text, widget_screenshots  # noqa: E402

pytestmark = pytest.mark.ui
XSS = "<img src=x onerror=alert(1)>"
BT, PA = ".widget-batching-timeline", ".widget-page-allocator"
SERVER_LOG = Path(__file__).resolve().parents[2] / "artifacts" / "panel-serve.log"   # written by conftest's server

# The Gantt bars (hbar glyphs with a "req" column): where each one's middle is on the page.
_BARS = """() => { const out = [];
  const visit = (v) => {
    if (v.frame && v.renderer_views) {
      const rect = v.el.getBoundingClientRect();
      for (const rv of v.renderer_views.values()) {
        const d = rv.model.data_source ? rv.model.data_source.data : null;
        if (!d || !d.req || !d.start) continue;
        for (let i = 0; i < d.req.length; i++) {
          const [y] = v.frame.y_scale.v_compute([d.req[i]]);
          out.push({req: d.req[i], state: d.state[i], tip: d.tip[i],
                    px: rect.x + v.frame.x_scale.compute((d.start[i] + d.end[i]) / 2), py: rect.y + y});
        }
      }
    }
    for (const c of (v.child_views || [])) visit(c);
  };
  for (const v of Object.values(Bokeh.index)) visit(v);
  return out; }"""


def freed_count(who: str) -> int:
    return SERVER_LOG.read_text(errors="replace").count(f"{who}: sandbox freed") if SERVER_LOG.exists() else 0


def test_batching_timeline_runs_both_schedulers_and_draws_the_trace(app):
    page = app.open("?chapter=continuous-batching")
    wait_text(page, f"{BT} .bt-compare-pane", "recorded on")          # never blank: the saved example
    wait_text(page, f"{BT} .bt-verdict", "48 steps instead of 88")
    wait_live(page, "batching-timeline")
    box = page.locator(f"{BT} .bt-lengths input")
    box.fill(f"{XSS}, 6→5, 4→2, 5→3")
    box.press("Enter")
    wait_text(page, f"{BT} .bt-notes", "<img src=x")                  # shown as text: nothing ran
    page.locator(f"{BT} .bt-run button").click()
    wait_text(page, f"{BT} .bt-compare-pane", "measured on cpu", timeout_ms=120_000)
    page.locator(f'{BT} .w-status[data-state="live"]').wait_for(timeout=120_000)
    wait_text(page, f"{BT} .bt-history-pane", "continuous")
    bars = [b for b in page.evaluate(_BARS) if b["state"] == "decode"]
    assert {b["req"] for b in bars} == {"A", "B", "C"}                # the three requests typed, both charts
    bar = next(b for b in bars if b["req"] == "A")
    page.locator(f"{BT} .bt-title-continuous").scroll_into_view_if_needed()
    bar = next(b for b in page.evaluate(_BARS) if b["tip"] == bar["tip"])
    page.mouse.move(bar["px"] - 3, bar["py"])
    page.mouse.move(bar["px"], bar["py"], steps=2)
    wait_text(page, ".bk-Tooltip div", "A (6→5 tokens): decode")
    # The KV-memory slider by keyboard, down to 1 block (enough for the longest of these requests alone).
    handle = page.locator(f"{BT} .bt-blocks .noUi-handle")
    handle.focus()
    handle.press("Home")
    expect(handle).to_have_attribute("aria-valuenow", re.compile(r"^1(\.0+)?$"))
    app.assert_clean()


def test_batching_timeline_stops(app):
    page = app.open("?chapter=continuous-batching")
    wait_live(page, "batching-timeline")
    # A run long by construction, so Stop lands while it goes on even on a fast machine: eight of the
    # longest requests in the least KV memory (preempted and recomputed over and over) take both schedulers
    # to their cap of 400 steps each (~40 s on two CPU cores); Stop is pressed as the first steps show.
    box = page.locator(f"{BT} .bt-lengths input")
    box.fill(", ".join(["128→64"] * 8))
    box.press("Enter")
    handle = page.locator(f"{BT} .bt-blocks .noUi-handle")
    handle.focus()
    handle.press("Home")                                              # raised to the fewest that hold one
    page.locator(f"{BT} .bt-run button").click()
    page.locator(f'{BT} .w-status[data-state="busy"]').wait_for()
    wait_text(page, f"{BT} .bt-compare-pane", "running…", timeout_ms=120_000)
    page.locator(f"{BT} .bt-run button", has_text="Stop").click()
    wait_text(page, f"{BT} .bt-notes", "Stopped")
    page.locator(f'{BT} .w-status[data-state="live"]').wait_for()
    wait_text(page, f"{BT} .bt-run button", "Run")
    app.assert_clean()


def test_page_allocator_and_a_session_closed_mid_run(browser, server, app_page_class, app):
    # A reader starts a long run and leaves. The server notices the closed session only after its
    # unused-session check (about half a minute by default), so the allocator is driven meanwhile.
    before = freed_count("batching-timeline")
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    leaver = app_page_class(ctx.new_page(), server)
    lp = leaver.open("?chapter=continuous-batching")
    wait_live(lp, "batching-timeline")
    lp.locator(f"{BT} .bt-lengths input").fill("100→64, 100→64, 100→64, 100→64, 100→64")
    lp.locator(f"{BT} .bt-lengths input").press("Enter")
    lp.locator(f"{BT} .bt-run button").click()
    wait_text(lp, f"{BT} .bt-compare-pane", "running…", timeout_ms=120_000)
    leaver.assert_clean()
    ctx.close()

    page = app.open("?chapter=paged-attention")
    wait_text(page, f"{PA} .pa-event", "Finished A")                  # the saved example's last action
    wait_live(page, "page-allocator")
    wait_text(page, f"{PA} .pa-side", "measured on cpu")              # the live pool replayed the example
    assert deep_count(page, f"{PA} .pa-block") == 32
    assert deep_text(page, f'{PA} .pa-table[data-owner="C"]') == "[7]"
    page.locator(f"{PA} .pa-n .bk-btn", has_text="3").click()         # n = 3
    page.locator(f"{PA} .pa-add button").click()
    wait_text(page, f"{PA} .pa-event", "Added D")
    wait_text(page, f"{PA} .pa-event", "ref count 3")                 # the samples share the prompt's blocks
    assert deep_count(page, f"{PA} .pa-ref") >= 2
    page.locator(f"{PA} .pa-stage").focus()
    page.keyboard.press("ArrowRight")                                 # one step: copy-on-write
    wait_text(page, f"{PA} .pa-event", "Copy-on-write")
    assert deep_count(page, f"{PA} .pa-block.pa-copy") == 2
    # Hover a tile: the readout says what it holds; its block-table entries light up with it.
    tile = page.locator(f"{PA} .pa-block.pa-copy").first
    tile.hover()
    wait_text(page, f"{PA} .hover-readout", "of 16 slots hold")
    assert deep_count(page, f"{PA} .pa-entry.linked") >= 1
    page.locator(f"{PA} .pa-which select").select_option("C")
    page.locator(f"{PA} .pa-finish button").click()
    wait_text(page, f"{PA} .pa-event", "Finished C. Block 7 went back to the tail of the free queue.")
    assert deep_text(page, f"{PA} .pa-queue").split()[-1] == "7"
    app.assert_clean()

    deadline = time.monotonic() + 90
    while freed_count("batching-timeline") <= before:                 # polling the server's log
        assert time.monotonic() < deadline, "the closed session's run was not freed"
        time.sleep(0.5)
    log = SERVER_LOG.read_text(errors="replace")
    assert not re.search(r"batching-timeline: sandbox closed with \d+ of", log)


def test_page_allocator_resets_to_an_empty_pool_by_keyboard(app):
    # The chapter opens mid-story (the first example: A finished, B×3 and C running); Reset, pressed
    # with the keyboard, gives an empty pool of 32 free blocks, says so, and the next request is A again.
    page = app.open("?chapter=paged-attention")
    wait_live(page, "page-allocator")
    wait_text(page, f"{PA} .pa-side", "measured on cpu")              # the live pool replayed the example
    assert deep_count(page, f"{PA} .pa-free") < 32
    page.locator(f"{PA} .pa-reset button").focus()
    page.keyboard.press("Enter")
    wait_text(page, f"{PA} .pa-event", "Reset: a fresh pool, every block free")
    assert deep_count(page, f"{PA} .pa-free") == 32 and deep_count(page, f"{PA} .pa-table") == 0
    assert "No requests yet" in deep_text(page, f"{PA} .pa-tables")
    assert len(deep_text(page, f"{PA} .pa-queue").split()) == 32
    page.locator(f"{PA} .pa-add button").click()
    wait_text(page, f"{PA} .pa-event", "Added A")
    app.assert_clean()

def test_screenshots(browser, server, app_page_class):
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=continuous-batching", "batching-timeline")
    shots += widget_screenshots(browser, server, app_page_class, "?chapter=paged-attention", "page-allocator",
                                lambda page: wait_text(page, f"{PA} .pa-side", "measured on"))
    assert len(shots) == 8 and all(p.stat().st_size > 10_000 for p in shots)
