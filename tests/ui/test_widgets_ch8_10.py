"""Chapters 8–10 in the browser: the forward pass steps through a block and the layers with the keyboard,
the sampler reshapes with a slider and writes both continuations, reader text stays text; screenshots
at 1280 and 390 px, light and dark."""
from __future__ import annotations


import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")

from playwright.sync_api import expect  # noqa: E402


from widgets.common.testing import deep_count, wait_live, wait_text, widget_screenshots  # noqa: E402

pytestmark = pytest.mark.ui
XSS = "<img src=x onerror=alert(1)>"
FP, SMP = ".widget-forward-pass", ".widget-sampler"


def hover_tooltip(page, figure, x_frac: float, y_frac: float, contains: str) -> None:
    """Move the mouse over a point of a Bokeh figure and wait for its tooltip to say ``contains``."""
    canvas = page.locator(f"{figure} canvas").first
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    page.mouse.move(box["x"] + box["width"] * x_frac, box["y"] + box["height"] * y_frac, steps=4)
    wait_text(page, ".bk-Tooltip", contains)


def test_forward_pass_block_steps_with_the_keyboard(app):
    page = app.open("?chapter=transformer-block")
    assert "Input" in page.locator(f"{FP} .fp-head").first.inner_text()        # the saved example, at once
    wait_live(page, "forward-pass")
    page.locator(f"{FP} .stp-chip", has_text="2 attention").click()
    wait_text(page, f"{FP} .fp-head", "Step 2 of 6 · Attention")
    assert "[5, 9, 64]" in page.locator(f"{FP} .fp-shapes").inner_text()
    page.keyboard.press("ArrowRight")
    wait_text(page, f"{FP} .fp-head", "Step 3 of 6 · Residual add")
    page.keyboard.press("End")
    wait_text(page, f"{FP} .fp-head", "Step 6 of 6")
    page.locator(f"{FP} .stp-prev").click()
    wait_text(page, f"{FP} .fp-head", "Step 5 of 6 · MLP")
    assert "[5, 1536]" in page.locator(f"{FP} .fp-shapes").inner_text()
    page.locator(f"{FP} select").select_option(label="1: ␣capital")
    wait_text(page, f"{FP} .fp-head", "“␣capital”")
    hover_tooltip(page, f"{FP} .fp-strip", 0.5, 0.5, "dimension")
    page.locator(f"{FP} textarea").fill(XSS)
    page.locator(f"{FP} select option", has_text="img").first.wait_for(state="attached")
    assert page.locator(f"{FP} .fp-detail img").count() == 0
    app.assert_clean()                                                        # no dialog: nothing ran


def test_forward_pass_model_walks_the_layers_to_the_prediction(app):
    page = app.open("?chapter=full-model")
    wait_live(page, "forward-pass")
    wait_text(page, f"{FP} .fp-head", "real prediction")
    assert "␣Paris" in page.locator(f"{FP} .fp-top").inner_text()
    page.locator(f"{FP} .stp-chip", has_text="30").focus()
    page.keyboard.press("Home")
    wait_text(page, f"{FP} .fp-head", "After the embedding")
    page.keyboard.press("ArrowRight")
    wait_text(page, f"{FP} .fp-head", "After block 1:")
    top = page.locator(f"{FP} .fp-top").first.inner_text()          # block 1's second guess: a no-break space
    assert "⍽" in top and "\\x" not in top and "\\xa0" not in page.locator(FP).first.inner_text()
    expect(page.locator(f"{FP} .fp-lens-table tr.on th")).to_have_text("1", timeout=30_000)
    assert deep_count(page, f"{FP} .fp-lens-table tbody tr") == 31
    app.assert_clean()


def test_sampler_reshapes_draws_and_continues(app):
    page = app.open("?chapter=sampling")
    wait_text(page, f"{SMP} .smp-summary", "Draw #1")                          # saved example, at once
    wait_live(page, "sampler")
    wait_text(page, f"{SMP} .smp-summary", "measured on")
    hover_tooltip(page, f"{SMP} .smp-chart", 0.3, 0.033, "of 1,000")            # the top row: ␣Paris
    handle = page.locator(f"{SMP} .smp-topk .noUi-handle")
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    wait_text(page, f"{SMP} .smp-summary", "3 of 49,152 tokens can be drawn")
    page.locator(f"{SMP} .smp-go button").click()
    page.locator(f'{SMP} .smp-cont[data-kind="sampled"] .tok').first.wait_for()
    wait_text(page, f'{SMP} .smp-cont[data-kind="sampled"]', "top-k 3")
    page.locator(f"{SMP} textarea").fill(XSS)
    wait_text(page, f"{SMP} .smp-summary", "measured on")
    assert page.locator(f"{SMP} img").count() == 0
    app.assert_clean()


def test_screenshots(browser, server, app_page_class):
    def step(page):
        page.locator(f"{FP} .stp-chip", has_text="2 attention").click()
        wait_text(page, f"{FP} .fp-head", "Step 2 of 6")
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=transformer-block", "forward-pass", step,
                               tag="forward-pass-block")
    shots += widget_screenshots(browser, server, app_page_class, "?chapter=full-model", "forward-pass",
                                tag="forward-pass-model")
    def top_k_5(page):
        page.locator(f"{SMP} .smp-topk .noUi-handle").focus()
        for _ in range(5):
            page.keyboard.press("ArrowRight")
        wait_text(page, f"{SMP} .smp-summary", "5 of 49,152 tokens")
    shots += widget_screenshots(browser, server, app_page_class, "?chapter=sampling", "sampler", top_k_5)
    assert len(shots) == 12 and all(p.stat().st_size > 10_000 for p in shots)
