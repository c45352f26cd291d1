"""Chapters 11 and 12 in the browser: the prefill-vs-decode widget measures on the server and its
roofline follows model, GPU and batch; the KV-cache stepper steps with its button and a key.
Screenshots at 1280 and 390 px, light and dark."""
from __future__ import annotations

import time


import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")

from widgets.common.testing import deep_count, deep_text, wait_live, wait_text, widget_screenshots  # noqa: E402

pytestmark = pytest.mark.ui
XSS = "<img src=x onerror=alert(1)>"
PD = ".widget-prefill-decode"


def test_prefill_decode_measures_and_the_roofline_follows_the_pickers(app):
    page = app.open("?chapter=prefill-and-decode")
    wait_text(page, f"{PD} .pd-table", "recorded on")                 # never blank: the saved example
    wait_live(page, "prefill-decode")
    page.locator(f"{PD} .pd-prompt textarea").fill(XSS)
    page.locator(f"{PD} .pd-longest select").select_option("128 tokens")
    page.locator(f"{PD} .pd-measure button").click()
    wait_text(page, f"{PD} .pd-table", "measured on cpu", timeout_ms=120_000)
    page.locator(f'{PD} .w-status[data-state="live"]').wait_for(timeout=120_000)
    mine = f"{PD} .pd-table tbody tr:not(.pd-recorded)"                # the H200's recorded rows follow
    assert deep_count(page, mine) == 3                                  # 16, 64, 128 tokens
    assert deep_text(page, f"{mine} td:first-child").split() == ["16", "64", "128"]
    # The roofline: another model, another GPU, a bigger batch (by keyboard on the slider).
    readout = f"{PD} .rf-readout"
    wait_text(page, readout, "Llama-3-8B on H100 SXM")
    page.locator(f"{PD} .rf-model select").select_option("SmolLM2-135M")
    page.locator(f"{PD} .rf-gpu select").select_option("H200")
    wait_text(page, readout, "SmolLM2-135M on H200")
    wait_text(page, readout, "recorded on NVIDIA H200")
    page.locator(f"{PD} .rf-batch .noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    wait_text(page, f"{readout} .rf-batch-value", "128")
    app.assert_clean()                                                  # the typed <img> never ran


def test_prefill_decode_stop(app):
    page = app.open("?chapter=prefill-and-decode")
    wait_live(page, "prefill-decode")
    button = page.locator(f"{PD} .pd-measure button")
    button.click()
    # The server took the click: its progress note, or (done already, on a fast machine) its own rows.
    page.locator(f"{PD} .pd-notes", has_text="Measur").or_(
        page.locator(f"{PD} .pd-table", has_text="measured on")).first.wait_for(timeout=120_000)
    # Stop, if the measure still runs. A fast machine (a GPU server) may finish it first; then the button
    # reads Measure again and a click would start another, so the label is read and the button pressed
    # in one step in the page.
    stopped = button.evaluate("b => b.textContent.includes('Stop') && (b.click(), true)")
    page.locator(f'{PD} .w-status[data-state="live"]').wait_for(timeout=120_000)
    wait_text(page, f"{PD} .pd-measure button", "Measure")
    if stopped:
        wait_text(page, f"{PD} .pd-notes", "Stopped")
    else:                                                               # it ended on its own: every length
        assert deep_count(page, f"{PD} .pd-table tbody tr:not(.pd-recorded)") == 5    # 16 … 512 tokens
    app.assert_clean()


def test_prefill_decode_screenshots(browser, server, app_page_class):
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=prefill-and-decode", "prefill-decode")
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)


KV = ".widget-kv-cache"


def test_kv_cache_steps_with_the_button_and_the_key(app):
    page = app.open("?chapter=kv-cache")
    wait_text(page, f"{KV} .kv-blocks", "block table")                 # never blank: the saved example
    wait_live(page, "kv-cache")
    wait_text(page, f"{KV} .kv-time", "Prefill: 30 tokens")             # live: the prompt prefilled
    page.locator(f"{KV} .kv-step button").click()
    wait_text(page, f"{KV} .kv-time", "Step 1, with the cache")
    wait_text(page, f"{KV} .kv-bytes", "wrote 46,080 B")                # one token: 2 × 30 × 3 × 64 × 4 bytes
    page.locator(f"{KV} .kv-stage").focus()
    page.keyboard.press("ArrowRight")
    wait_text(page, f"{KV} .kv-time", "Step 2, with the cache")
    page.keyboard.press("n")
    wait_text(page, f"{KV} .kv-time", "Step 3, with the cache")
    wait_text(page, f"{KV} .kv-bytes", "33 × 46,080 B")
    assert deep_count(page, f"{KV} .kv-slot.kv-new") == 1
    assert deep_text(page, f"{KV} .kv-table") == "[0, 1, 2]"            # token 33 opened a third block
    # Reader text is text, and a new prompt starts a new private engine.
    box = page.locator(f"{KV} .kv-prompt textarea")
    box.fill(XSS)
    page.locator(f"{KV} .kv-prefill button").click()
    wait_text(page, f"{KV} .kv-time", "Prefill: ")
    wait_text(page, f"{KV} .kv-blocks", "img")
    assert page.locator(f"{KV} .kv-blocks img").count() == 0
    app.assert_clean()


def test_kv_cache_chips_are_one_tab_stop_and_keys_work_after_a_click(app):
    page = app.open("?chapter=kv-cache")
    wait_live(page, "kv-cache")
    wait_text(page, f"{KV} .kv-time", "Prefill: 30 tokens")
    chips = page.locator(f"{KV} .kv-chip[data-link]")
    n = chips.count()
    assert n == 30
    # One chip of the row is in the Tab order (roving tabindex), the others are reached by the arrows.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and page.locator(f'{KV} .kv-chip[data-link][tabindex="0"]').count() != 1:
        page.wait_for_timeout(100)
    assert page.locator(f'{KV} .kv-chip[data-link][tabindex="0"]').count() == 1
    chips.first.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("() => { let a = document.activeElement; while (a && a.shadowRoot && a.shadowRoot.activeElement) "
                         "a = a.shadowRoot.activeElement; return a && a.dataset.link; }") == "p2"
    page.keyboard.press("End")
    assert chips.nth(n - 1).evaluate("el => el.tabIndex") == 0 and chips.first.evaluate("el => el.tabIndex") == -1
    assert page.locator(f"{KV} .kv-time", has_text="Prefill: 30 tokens").count() >= 1   # the arrows moved the focus, not the step
    # A click on the widget's plain text leaves the focus on the page, and its keys still step it.
    page.locator(f"{KV} .kv-time").click()
    page.keyboard.press("n")
    wait_text(page, f"{KV} .kv-time", "Step 1, with the cache")
    app.assert_clean()


def test_kv_cache_screenshots(browser, server, app_page_class):
    def prepare(page):
        wait_text(page, f"{KV} .kv-time", "Prefill: ")
        for n in (1, 2):
            page.locator(f"{KV} .kv-step button").click()
            wait_text(page, f"{KV} .kv-time", f"Step {n},")
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=kv-cache", "kv-cache", prepare)
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)
