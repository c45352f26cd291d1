"""Glossary tooltips on hover and keyboard focus; math typeset offline; the generate widget runs; the
header shows the shared engine."""
from __future__ import annotations


import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")
pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from playwright.sync_api import expect


from app.content import list_chapters  # noqa: E402
from app.glossary import load_glossary  # noqa: E402
from widgets.common.testing import ENGINE_READY_MS, wait_live, wait_text  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTERS = list_chapters(strict=True)
GLOSSARY = load_glossary()
FOCUSED_TERM = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  return a && a.classList.contains('gl-term') ? a.id || a.getAttribute('aria-describedby') : null; }"""


def _chapter_with_terms():
    for ch in CHAPTERS:
        if "[[" in ch.body:
            return ch
    pytest.skip("no chapter marks a glossary term yet")


def test_hover_shows_definition(app):
    ch = _chapter_with_terms()
    page = app.open(f"?chapter={ch.slug}")
    term = page.locator(".gl-term").first
    tip = term.locator(".gl-tip")
    assert not tip.is_visible()
    term.hover()
    tip.wait_for(state="visible")
    name = tip.locator("strong").inner_text()
    entry = GLOSSARY.lookup(name)
    assert entry is not None and entry.short[:40] in tip.inner_text()
    link = tip.locator("a").get_attribute("href")
    assert link.startswith("?page=glossary#") and link.endswith(entry.anchor)
    app.screenshot("tooltip-hover-1280")
    app.assert_clean()


def test_keyboard_focus_shows_definition(app):
    ch = _chapter_with_terms()
    page = app.open(f"?chapter={ch.slug}")
    for _ in range(80):         # Tab through header and sidebar links until a term has focus
        page.keyboard.press("Tab")
        tip_id = page.evaluate(FOCUSED_TERM)
        if tip_id:
            break
    else:
        pytest.fail("Tab never reached a glossary term")
    tip = page.locator(f"#{tip_id}")
    tip.wait_for(state="visible")
    assert len(tip.inner_text()) > 20
    app.screenshot("tooltip-keyboard-1280")
    page.keyboard.press("Escape")              # dismissible without moving the mouse
    tip.wait_for(state="hidden")
    app.assert_clean()


def test_tooltip_on_a_phone_stays_on_screen(phone):
    ch = _chapter_with_terms()
    page = phone.open(f"?chapter={ch.slug}")
    term = page.locator(".gl-term").nth(2)
    term.scroll_into_view_if_needed()
    term.tap()
    tip = term.locator(".gl-tip")
    tip.wait_for(state="visible")
    box = tip.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390 and box["y"] + box["height"] <= 844
    phone.screenshot("tooltip-tap-390")
    phone.assert_clean()


def test_tooltip_link_opens_glossary_entry(app):
    ch = _chapter_with_terms()
    page = app.open(f"?chapter={ch.slug}")
    term = page.locator(".gl-term").first
    term.hover()
    term.locator(".gl-tip a").click()
    page.wait_for_url("**page=glossary#**")
    app.wait_rendered()
    anchor = page.url.rsplit("#", 1)[1]
    entry = page.locator(f"dt#{anchor}")
    assert entry.count() == 1
    expect(entry).to_be_in_viewport()          # scrolled to, although it lives in a shadow root
    app.assert_clean()


def test_later_uses_are_plain_text(app):
    ch = _chapter_with_terms()
    page = app.open(f"?chapter={ch.slug}")
    names = page.locator(".gl-term > .gl-tip > strong").all_inner_texts()
    assert len(names) == len(set(names)), "a term got a second tooltip in one chapter"
    app.assert_clean()


def test_math_is_typeset_offline(app):
    ch = next((c for c in CHAPTERS if "$$" in c.body or "$" in c.body), None)
    if ch is None:
        pytest.skip("no chapter has math yet")
    page = app.open(f"?chapter={ch.slug}")
    page.wait_for_selector("mjx-container svg", timeout=20_000)
    assert page.locator("mjx-container").count() >= 1
    # No TeX delimiter is left untypeset in the prose.
    text = " ".join(page.locator(".prose").all_inner_texts())
    assert "\\(" not in text and "\\[" not in text
    page.locator("mjx-container").first.scroll_into_view_if_needed()
    app.screenshot(f"math-{ch.slug}-1280")
    app.assert_clean()     # includes: no request left localhost


def test_generate_widget_streams_tokens_and_counts_passes(app):
    ch = next((c for c in CHAPTERS if "::: widget generate" in c.body), None)
    if ch is None:
        pytest.skip("no chapter uses the generate widget")
    page = app.open(f"?chapter={ch.slug}")
    widget = page.locator(".widget-generate")
    widget.scroll_into_view_if_needed()
    # Never blank: a saved reply and its pass counter show before the engine is live.
    assert widget.locator(".gen-out .tok").count() > 0 and "Forward passes" in widget.locator(".gen-stats").inner_text()
    wait_live(page, "generate")
    button = widget.locator(".gen-button button")
    widget.locator("textarea").fill("Name one colour. <img src=x onerror=alert(1)> <b>bold?</b>")
    widget.locator(".gen-max-tokens input").fill("6")           # few passes: CI has two slow cores
    widget.locator(".gen-max-tokens input").press("Tab")
    button.click()
    wait_text(page, ".widget-generate .gen-stats", "measured on", timeout_ms=120_000)   # the saved one says "recorded"
    wait_text(page, ".widget-generate .gen-stats", "stopped", timeout_ms=120_000)
    passes = int(widget.locator(".gen-passes").inner_text())
    tokens = widget.locator(".gen-out .tok").count()
    assert 1 <= passes == tokens <= 6                           # one forward pass per token
    stats = widget.locator(".gen-stats").inner_text()
    assert "measured on" in stats and "1 prefill pass +" in stats and "prompt:" in stats
    assert widget.locator(".gen-out b, .gen-out img").count() == 0      # model/user text is escaped
    # Out of range: clamped with a note, not silently reset; Stop ends the reply early.
    widget.locator("textarea").fill("Write a long story about a dragon who learns to read.")
    widget.locator(".gen-max-tokens input").fill("500")
    widget.locator(".gen-max-tokens input").press("Tab")
    button.click()
    wait_text(page, ".widget-generate .w-note", "using 128")           # the server took the click
    # Stop, if the reply is still being written. A fast machine (a GPU server) may write all 128 tokens
    # first; then the button reads Generate again and a click would start another reply, so the label is
    # read and the button pressed in one step in the page.
    stopped = button.evaluate("b => b.textContent.includes('Stop') && (b.click(), true)")
    page.wait_for_selector('.widget-generate .w-status[data-state="live"]', timeout=120_000)
    expect(button).to_have_text("Generate", timeout=30_000)
    if stopped:
        wait_text(page, ".widget-generate .gen-stats", "stopped early", timeout_ms=60_000)
        assert widget.locator(".gen-out .tok").count() < 128
    else:                                                               # it ended on its own
        wait_text(page, ".widget-generate .gen-stats", "stopped:", timeout_ms=60_000)
    assert widget.locator(".gen-max-tokens input").input_value() == "128"
    widget.locator("textarea").fill("   ")
    page.wait_for_selector('.widget-generate .w-status[data-state="live"]')
    widget.locator(".gen-button button").click()
    wait_text(page, ".widget-generate .w-note", "prompt is empty")
    app.assert_clean()         # includes: no dialog opened, so the <img onerror> never ran


def test_one_engine_is_shared_by_all_sessions_and_shown_in_the_header(browser, server, app_page_class):
    """Two readers in separate browser contexts see the same engine, named in every page's header."""
    AppPage = app_page_class
    reports = []
    for query in ("", "?page=glossary"):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        ap = AppPage(ctx.new_page(), server)
        page = ap.open(query)
        page.wait_for_selector('.engine-state[data-state="ready"]', timeout=ENGINE_READY_MS)
        reports.append(page.locator(".engine-state").get_attribute("title"))
        ap.assert_clean()
        ctx.close()
    assert "loaded in" in reports[0] and reports[0] == reports[1]
