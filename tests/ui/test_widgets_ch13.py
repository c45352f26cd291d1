"""The data-flow widget in Chromium: it draws, follows model/batch/context, answers hover and keyboard focus
with the same readout, animates only without reduced motion, and fits 1280 and 390 px in both themes."""
from __future__ import annotations


import pytest

pytest.importorskip("playwright")      # the GPU machine has neither (pytest -m gpu must still collect)
pytest.importorskip("panel")
from playwright.sync_api import expect  # noqa: E402


from widgets.modelled.hardware import MODELS  # noqa: E402
from widgets.common.testing import wait_live, wait_text, widget_screenshots  # noqa: E402
from widgets.data_flow.view import render  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTER = "?chapter=gpu-memory-hierarchy"
W = ".widget-data-flow"
FOCUSED_KEY = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  return a && a.getAttribute ? a.getAttribute('data-key') : null; }"""


def open_widget(app):
    page = app.open(CHAPTER)
    page.locator(f"{W} .df-node").first.wait_for(timeout=60_000)
    page.locator(W).first.scroll_into_view_if_needed()
    return page


def readout_title(page) -> str:
    return page.locator(f"{W} .df-readout-title").inner_text()


def test_draws_and_follows_model_batch_and_context(app):
    page = open_widget(app)
    assert page.locator(f"{W} .df-node").count() == 8                 # 4 levels + 4 beside HBM
    assert readout_title(page) == "HBM, beside the chip"
    dot = page.locator(f"{W} .df-dot").first                          # bytes moving: a dot's height changes
    expect(dot).not_to_have_attribute("cy", dot.get_attribute("cy"), timeout=5_000)

    page.locator(f"{W} .df-model select").select_option("Llama-3-70B")
    wait_text(page, f"{W} .df-caption", "Llama-3-70B, batch 8, context 2,048")
    page.locator(f"{W} .df-batch .noUi-handle").focus()
    page.keyboard.press("ArrowRight")                                 # batch 8 -> 16
    wait_text(page, f"{W} .df-caption", "batch 16, context 2,048")
    page.locator(f"{W} .df-context .noUi-handle").focus()
    page.keyboard.press("ArrowLeft")                                  # context 2,048 -> 1,024
    wait_text(page, f"{W} .df-caption", "Llama-3-70B, batch 16, context 1,024, on an H100 SXM, split over 4 GPUs")

    want = render(MODELS, "Llama-3-70B", "H100 SXM", 16, 1024, with_recorded=False)["diagram"]
    hbm = next(lv for lv in want["levels"] if lv["key"] == "hbm")
    step_line = next(line for line in hbm["readout"]["lines"] if line.startswith("This step:"))
    wait_text(page, f"{W} .df-readout", step_line)                    # the readout is the model's arithmetic
    wait_text(page, f"{W} .df-node[data-key=hbm] .df-val", hbm["label"])
    wait_text(page, f"{W} .df-fit", "split over 4 GPUs")

    page.locator(f"{W} .df-gpu button", has_text="H200").click()
    wait_text(page, f"{W} .df-caption", "on an H200")
    # once the model is up the status line says what these numbers are: modelled, never "Live"
    wait_live(page, "data-flow")
    status = page.locator(f'{W} .w-status[data-state="live"]').first.inner_text()
    assert status.startswith("Modelled:") and "Live" not in status
    assert "not recorded yet" not in page.locator(W).first.inner_text()
    app.assert_clean()


def test_keyboard_focus_and_hover_show_the_readout(app):
    page = open_widget(app)
    page.locator(f"{W} .df-kind[data-key=activations]").focus()
    page.keyboard.press("Tab")                                        # out of the legend, onto the first level
    assert page.evaluate(FOCUSED_KEY) == "registers"
    assert readout_title(page) == "Registers, in each SM"
    page.keyboard.press("ArrowDown")
    assert page.evaluate(FOCUSED_KEY) == "smem"
    wait_text(page, f"{W} .df-readout-title", "Shared memory / L1")
    page.keyboard.press("End")
    wait_text(page, f"{W} .df-readout-title", "Network card")
    assert "400 Gb/s" in page.locator(f"{W} .df-readout").inner_text()

    page.locator(f"{W} .df-node[data-key=nvlink]").hover()            # hover: the same readout
    wait_text(page, f"{W} .df-readout-title", "NVLink")
    page.locator(f"{W} .df-kind[data-key=kv_read]").hover()           # follow one kind of byte
    wait_text(page, f"{W} .df-readout-title", "KV reads")
    assert page.locator(f"{W} .df-svg").get_attribute("data-kind") == "kv_read"
    page.locator(f"{W} .df-pause").click()
    expect(page.locator(f"{W} .df-pause")).to_have_text("Play animation")
    app.assert_clean()


def test_reduced_motion_draws_the_same_without_moving(browser, server, app_page_class):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, reduced_motion="reduce")
    try:
        ap = app_page_class(ctx.new_page(), server)
        page = open_widget(ap)
        assert page.locator(f"{W} .df-dot").count() == 0
        assert page.locator(f"{W} .df-node").count() == 8 and page.locator(f"{W} .df-seg").count() > 0
        expect(page.locator(f"{W} .df-pause")).to_be_hidden()
        assert "Reduced motion" in page.locator(f"{W} .df-hint").inner_text()
        page.locator(f"{W} .df-node[data-key=l2]").focus()
        wait_text(page, f"{W} .df-readout-title", "L2 cache")
        ap.assert_clean()
    finally:
        ctx.close()


def test_screenshots_1280_and_390_light_and_dark(browser, server, app_page_class):
    shots = widget_screenshots(browser, server, app_page_class, CHAPTER, "data-flow")
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)
