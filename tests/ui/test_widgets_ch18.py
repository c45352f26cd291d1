"""The speculative-decoding widget (chapter 18) in Chromium: engine mode steps the real engine (drafts
with verdicts, numbers beside the closed form, escaped reader text), simulator mode plays rounds one
at a time and a thousand at once, and the widget fits 1280 and 390 px in both themes."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("playwright")      # the GPU machine has neither (pytest -m gpu must still collect)
pytest.importorskip("panel")
from playwright.sync_api import expect  # noqa: E402


from engine import expected_tokens_per_pass  # noqa: E402
from widgets.common.testing import wait_live, wait_text, widget_screenshots  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTER = "?chapter=speculative-decoding"
NAME = "speculative-decoding"
W = f".widget-{NAME}"


def open_widget(app):
    page = app.open(CHAPTER)
    page.locator(f"{W} .sd-step").first.wait_for(timeout=60_000)        # the saved example paints at once
    page.locator(W).first.scroll_into_view_if_needed()
    return page


def test_engine_mode_steps_the_real_engine(app):
    page = open_widget(app)
    assert "recorded on" in page.locator(f"{W} .sd-steps").inner_text()
    wait_live(page, NAME)
    box = page.locator(f"{W} .sd-prompt textarea")
    box.fill("Repeat twice, word for word: <img src=x onerror=alert(1)> the cat sat on the mat.")
    box.press("Tab")                                                    # a new prompt: the next Step starts over
    page.locator(f"{W} .sd-step-button button").click()
    wait_text(page, f"{W} .sd-steps", "measured on cpu")          # the prefill ran live
    wait_text(page, f"{W} .sd-step-head", "prefill")
    wait_text(page, f"{W} .sd-engine-stats", "1 target pass produced 1 token:")   # never "1 target passes … 1 tokens"
    page.locator(f"{W} .sd-step-button button").click()
    page.locator(f"{W} .sd-step[data-step='1']").wait_for(timeout=60_000)
    assert page.locator(f"{W} .sd-end").count() == 0                  # the live reply has only begun
    page.locator(f"{W} .sd-run-button button").click()                 # run to the end, step by step
    wait_text(page, f"{W} .sd-end", "complete", timeout_ms=120_000)
    chips = page.locator(f"{W} .sd-step .sd-tok")
    assert chips.count() > 5
    statuses = {c.split()[-1] for c in (chips.nth(i).get_attribute("class") for i in range(chips.count()))}
    assert "sd-accepted" in statuses                                    # n-gram lookup copied the sentence
    tip = page.locator(f"{W} .sd-step .sd-accepted").first.get_attribute("title")
    assert tip.startswith("draft kept")
    stats = page.locator(f"{W} .sd-engine-stats").inner_text()
    number = r"([0-9]+(?:\.[0-9]+)?)"
    a = float(re.search(r"a = kept / judged = " + number, stats).group(1))
    closed = float(re.search(r"gives " + number, stats).group(1))
    assert closed == pytest.approx(expected_tokens_per_pass(a, 4), rel=5e-3)     # both shown to 3 digits
    assert page.locator(f"{W} .sd-reply").inner_text().strip()
    assert page.locator(f"{W} img").count() == 0                        # whatever came back is text: nothing ran
    app.assert_clean()                                                  # (an alert would be a dialog here)


def test_simulator_mode_plays_rounds(app):
    page = open_widget(app)
    page.locator(f"{W} .sd-mode button", has_text="simulator").click()
    expect(page.locator(f"{W} .sd-one button")).to_be_visible(timeout=30_000)    # the server redraws the mode
    wait_text(page, f"{W} .sd-sim-numbers", "3.362")                      # a = 0.8, k = 4 before any round
    page.locator(f"{W} .sd-one button").click()
    wait_text(page, f"{W} .sd-rounds", "1")
    assert page.locator(f"{W} .sd-round .sd-tok").count() == 5        # k drafts + the target's token
    page.locator(f"{W} .sd-many button").click()
    wait_text(page, f"{W} .sd-rounds", "1,001")
    simulated = float(page.locator(f"{W} .sd-sim-tpp").inner_text())
    assert abs(simulated - 3.362) < 0.2
    page.locator(f"{W} .sd-sim-k .noUi-handle").focus()
    for _ in range(6):
        page.keyboard.press("ArrowRight")                               # k 4 -> 10: a new tally
    wait_text(page, f"{W} .sd-sim-numbers", f"{expected_tokens_per_pass(0.8, 10):.3f}")
    page.locator(f"{W} .sd-reset button").click()
    app.assert_clean()


def test_screenshots_1280_and_390_light_and_dark(browser, server, app_page_class):
    shots = widget_screenshots(browser, server, app_page_class, CHAPTER, NAME)
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)
