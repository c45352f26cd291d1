"""Glossary tooltips on hover and keyboard focus; math typeset offline; the generate widget runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from playwright.sync_api import expect

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.content import list_chapters  # noqa: E402
from app.glossary import load_glossary  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTERS = list_chapters(strict=True)
GLOSSARY = load_glossary()
# On a fresh CI machine the first engine start downloads (~100 MB) and dequantizes the model.
ENGINE_READY_MS = 480_000
FOCUSED_TERM = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  return a && a.classList.contains('gl-term') ? a.id || a.getAttribute('aria-describedby') : null; }"""


def _wait_engine(page):
    """Until the shared engine is ready (button enabled) or has failed (then fail with its reason)."""
    page.wait_for_selector(".widget-generate .gen-button button:not([disabled]), "
                           ".widget-generate .gen-status.failed", timeout=ENGINE_READY_MS)
    failed = page.locator(".widget-generate .gen-status.failed")
    assert failed.count() == 0, failed.inner_text()


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
    # A loading state (never a blank box) until the shared engine is ready, then the button.
    assert widget.locator(".gen-status").inner_text()
    button = widget.locator(".gen-button button")
    _wait_engine(page)
    widget.locator("textarea").fill("Name one colour. <b>bold?</b>")
    widget.locator(".gen-max-tokens input").fill("8")   # few passes: CI has two slow cores
    widget.locator(".gen-max-tokens input").press("Tab")
    button.click()
    page.wait_for_function(
        """() => { const q = (r, s) => { for (const el of r.querySelectorAll('*')) {
              if (el.matches(s)) return el; if (el.shadowRoot) { const f = q(el.shadowRoot, s); if (f) return f; } }
              return null; };
            const s = q(document, '.gen-stats'); return s && s.textContent.includes('stopped'); }""",
        timeout=120_000)
    passes = int(widget.locator(".gen-passes").inner_text())
    tokens = widget.locator(".gen-out .tok").count()
    assert 1 <= passes <= 8 and passes == tokens
    assert "measured on" in widget.locator(".gen-stats").inner_text()
    assert widget.locator(".gen-out b").count() == 0      # model/user text is escaped, never markup
    page.wait_for_selector(".widget-generate .gen-button button:not([disabled])")
    widget.screenshot(path=str(Path(__file__).resolve().parents[2] / "artifacts" / "screenshots" /
                               "generate-widget-1280.png"))
    app.assert_clean()


def test_one_engine_is_shared_by_all_sessions(browser, server, app_page_class):
    """Two readers in separate browser contexts see the same engine: the same load report."""
    ch = next((c for c in CHAPTERS if "::: widget generate" in c.body), None)
    if ch is None:
        pytest.skip("no chapter uses the generate widget")
    AppPage = app_page_class
    reports = []
    for _ in range(2):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        ap = AppPage(ctx.new_page(), server)
        page = ap.open(f"?chapter={ch.slug}")
        _wait_engine(page)
        reports.append(page.locator(".widget-generate .gen-status").inner_text())
        ap.assert_clean()
        ctx.close()
    assert "loaded in" in reports[0] and reports[0] == reports[1]
