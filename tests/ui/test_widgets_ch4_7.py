"""Chapters 4-7 in the browser: the attention heatmap (one head, then all heads as GQA groups), RoPE and
the MLP widget are painted at once, go live, follow hover, taps, keys, sliders and typing, keep reader
text as text; screenshots at 1280 and 390 px, light and dark."""
from __future__ import annotations


import pytest

pytest.importorskip("panel")          # the GPU machine has neither Panel nor Playwright: skip, not error
pytest.importorskip("playwright")

from widgets.common.testing import (bokeh_points, deep_count, deep_text, hover_point, wait_live,  # noqa: E402
                                    wait_text, widget_screenshots)

pytestmark = pytest.mark.ui
XSS = "<img src=x onerror=alert(1)>"
AH, ROPE, MLP = ".widget-attention-heatmap", ".widget-rope", ".widget-mlp-activations"


def test_heatmap_hover_mode_keys_and_escaping(app):
    page = app.open("?chapter=attention")
    page.locator(f"{AH} .as-strip .as-tok").first.wait_for(state="attached")
    assert deep_count(page, f"{AH} .as-strip .as-tok") == 5          # the saved example, before the model
    wait_live(page, "attention-heatmap")
    page.locator(f"{AH} .ah-heatmap").scroll_into_view_if_needed()
    cell = next(p for p in bokeh_points(page) if p.get("y") == 2 and p.get("x") == 0)
    hover_point(page, cell, "␣of (token 2)")                          # tooltip: query, key, weight, score
    wait_text(page, f"{AH} .as-readout", "(token 2, head 8)")         # the sentence follows the hovered row
    assert deep_count(page, f"{AH} .as-strip .as-masked") == 2
    page.locator(f"{AH} .ah-mode button", has_text="scaled scores").click()
    wait_text(page, f"{AH} .ah-caption", "scaled scores q·k/√d before the softmax")
    handle = page.locator(f"{AH} .ah-query .noUi-handle")            # keyboard: the query slider
    handle.focus()
    handle.press("Home")
    wait_text(page, f"{AH} .as-readout", "(token 0, head 8)")
    page.locator(f"{AH} textarea").fill("Hi " + XSS)
    wait_text(page, f"{AH} .as-strip", "onerror")
    assert page.locator(f"{AH} .as-strip img").count() == 0
    assert deep_text(page, f"{AH} .as-strip").replace("␣", " ") == "Hi " + XSS
    app.assert_clean()                                                 # no dialog: the markup stayed text


def test_heads_as_gqa_groups_tap_to_choose_and_kv_bytes(app):
    page = app.open("?chapter=multi-head-attention")
    wait_live(page, "attention-heatmap")
    assert deep_count(page, f"{AH} .ah-small") == 9
    wait_text(page, f"{AH} .as-readout", "‘␣keys’ 0.77")               # layer 14, head 8: are → keys
    wait_text(page, f"{AH} .ah-kv-table", "23,040 B")
    assert "69,120 B" in deep_text(page, f"{AH} .ah-kv-table") and "7,680 B" in deep_text(page, f"{AH} .ah-kv-table")
    page.locator(f"{AH} .ah-small-3").scroll_into_view_if_needed()
    cell = next(p for p in bokeh_points(page) if p.get("head") == 3 and p.get("y") == 4 and p.get("x") == 1)
    page.mouse.click(cell["px"], cell["py"])                           # tap head 3: it is shown large
    wait_text(page, f"{AH} .ah-caption", "head 3 (reads KV head 1)")
    app.assert_clean()


def test_rope_positions_keep_the_score_when_the_distance_stays(app):
    page = app.open("?chapter=positional-encoding")
    wait_live(page, "rope")
    wait_text(page, f"{ROPE} .rope-score", "m − n = 1")
    m_box = page.locator(f"{ROPE} .rope-m input").first
    m_box.fill("40")
    m_box.press("Enter")
    wait_text(page, f"{ROPE} .rope-score", "m − n = 37")
    score = float(deep_text(page, f"{ROPE} .rope-value"))
    page.locator(f"{ROPE} .rope-together input").check()
    m_box.fill("1040")
    m_box.press("Enter")
    wait_text(page, f"{ROPE} .rope-score", "m = 1,040, n = 1,003")
    # Same distance, same score. Float32 angles at positions near 1,000 may move the score by up to ~1.3e-3
    # (test_widget_rope.py's bound, worked out for m + n = 2,043), and each is shown rounded to 0.001: the two
    # shown values are at most two units of the last digit apart; a position bug moves the score by units.
    assert abs(float(deep_text(page, f"{ROPE} .rope-value")) - score) <= 0.002 + 1e-9
    m_box.fill("99999")                                                # past the window: clamped, said
    m_box.press("Enter")
    wait_text(page, f"{ROPE} .rope-notes", "using 8191, not 99,999")
    wait_text(page, f"{ROPE} .rope-score", "m = 8,191, n = 8,154")
    page.locator(f"{ROPE} .rope-pair-b .noUi-handle").focus()
    page.locator(f"{ROPE} .rope-pair-b .noUi-handle").press("End")
    wait_text(page, f"{ROPE} .rope-pairs", "pair 31")
    page.locator(f"{ROPE} .bk-Figure").first.scroll_into_view_if_needed()
    tip = next(p for p in bokeh_points(page) if p.get("who") == "query")
    hover_point(page, tip, "query at position 8191")
    app.assert_clean()


def test_mlp_samples_tap_a_neuron_and_escaping(app):
    page = app.open("?chapter=mlp-block")
    page.locator(f"{MLP} .mlp-table tbody tr").first.wait_for(state="attached")
    assert deep_count(page, f"{MLP} .mlp-table tbody tr") == 10         # the saved example
    wait_live(page, "mlp-activations")
    page.locator(f"{MLP} .mlp-sample button", has_text="Code").click()
    wait_text(page, f"{MLP} .mlp-flow-line", ")’ in layer 21")          # index 20, named 1-30
    page.locator(f"{MLP} .mlp-scatter").scroll_into_view_if_needed()
    # The second strongest neuron: a large dot (the strongest is already the one followed).
    big = sorted((p for p in bokeh_points(page) if "silu" in p), key=lambda p: -abs(p["product"]))
    dot = big[1]
    hover_point(page, dot, f"{dot['neuron']}")
    page.mouse.click(dot["px"], dot["py"])                             # tap: follow that neuron
    wait_text(page, f"{MLP} .mlp-profile-line", f"Neuron {dot['neuron']} of layer 21")
    page.locator(f"{MLP} textarea").fill(XSS)
    wait_text(page, f"{MLP} .mlp-flow-line", ")>’ in layer 21")
    assert page.locator(f"{MLP} img").count() == 0
    app.assert_clean()


@pytest.mark.parametrize("chapter,name", [("multi-head-attention", "attention-heatmap"),
                                          ("positional-encoding", "rope"), ("mlp-block", "mlp-activations")])
def test_screenshots(browser, server, app_page_class, chapter, name):
    shots = widget_screenshots(browser, server, app_page_class, f"?chapter={chapter}", name)
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)
