"""The overview map in a real browser: the cover's map links to chapters, each chapter's header says
"you are here", Generate makes the map follow the reader's request through the shared engine (and it
settles when done), reduced motion stops the animation but not the state, and a phone never scrolls
sideways."""
from __future__ import annotations

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")
pytest.importorskip("markdown_it")

from widgets.common.testing import wait_live  # noqa: E402

pytestmark = pytest.mark.ui

# The computed animation of every stage link (Playwright's CSS engine pierces the shadow roots;
# page.evaluate does not, so the links are collected by walking them).
_ANIMATIONS = """(sel) => { const out = [];
  const walk = (root) => { root.querySelectorAll(sel).forEach((a) => out.push(
      [a.dataset.stage, getComputedStyle(a).animationName]));
    root.querySelectorAll('*').forEach((el) => { if (el.shadowRoot) walk(el.shadowRoot); }); };
  walk(document); return out; }"""

_OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"


def _host_classes(page, which: str) -> str:
    return page.locator(f".ovm-host-{which}").first.get_attribute("class") or ""


def test_cover_map_links_to_each_stages_chapter(app):
    page = app.open()
    links = page.locator(".ovm-full a.ovm-link")
    assert links.count() == 11
    assert page.locator(".ovm-full").get_attribute("aria-label")
    assert page.locator('.ovm-live[data-phase="idle"]').count() == 1      # says how to start it
    kv = page.locator('.ovm-full a[data-stage="kv"]')
    assert "KV pages" in kv.inner_text()
    kv.click()
    page.wait_for_url("**chapter=kv-cache**")
    app.wait_rendered()
    assert page.locator(".chapter-head h1").inner_text() == "The KV cache"
    app.assert_clean()


def test_a_chapter_header_says_you_are_here(app):
    page = app.open("?chapter=kv-cache&theme=dark")
    here = page.locator('.ovm-compact a[aria-current="location"]')
    assert here.count() == 1 and here.get_attribute("data-stage") == "kv"
    assert "you are here" in here.inner_text()
    assert "theme=dark" in here.get_attribute("href")
    # the header map is visible under the title, before the text
    head, row = page.locator(".chapter-head h1").bounding_box(), page.locator(".ovm-compact").bounding_box()
    assert row["y"] > head["y"] and row["height"] > 0
    app.assert_clean()


@pytest.mark.parametrize("motion", ["no-preference", "reduce"])
def test_generate_makes_the_header_map_follow_the_request(app, motion):
    page = app.page
    page.emulate_media(reduced_motion=motion)
    page = app.open("?chapter=what-is-an-llm")
    assert page.locator(".ovm-live").count() == 0             # a chapter's map says nothing while idle
    wait_live(page, "generate")
    widget = page.locator(".widget-generate")
    # a reply that runs its 48 tokens (a short answer can stop after a few steps): enough decode steps
    # for the map's 4 looks a second on a loaded 2-core machine
    widget.locator("textarea").fill("Tell me a long story about a dragon who learns to read.")
    widget.locator(".gen-max-tokens input").fill("48")
    widget.locator(".gen-max-tokens input").press("Tab")
    widget.locator(".gen-button button").click()
    # Live: the line under the map names the phase and this request's KV blocks; the host carries it.
    running = page.locator('.ovm-live[data-phase="decode"]')
    running.wait_for(timeout=120_000)
    assert "KV block" in running.inner_text() and "step" in running.inner_text()
    assert "ovm-decode" in _host_classes(page, "compact")
    # The reader watches from the widget, far below the title: the map sticks to the top of the window.
    widget.scroll_into_view_if_needed()
    sticky, top = page.locator(".ovm-block-compact").evaluate(
        "el => [el.classList.contains('ovm-sticky'), el.getBoundingClientRect().top]")
    assert page.evaluate("window.scrollY") > 300
    if sticky:                       # (else the reply has just ended: the map went back to its place)
        assert abs(top) <= 2, top
    animations = dict(page.evaluate(_ANIMATIONS, ".ovm-compact a.ovm-link"))
    if motion == "reduce":
        assert set(animations.values()) == {"none"}, animations    # still: no animation at all
    else:
        assert animations["kv"] == "ovm-glow" and animations["text"] == "none", animations
    # Done: the map settles on what the request held, and nothing moves any more.
    page.locator('.ovm-live[data-phase="done"]').wait_for(timeout=120_000)
    assert "freed" in page.locator(".ovm-live").inner_text()
    assert "ovm-done" in _host_classes(page, "compact")
    assert "ovm-sticky" not in (page.locator(".ovm-block-compact").get_attribute("class") or "")
    assert set(dict(page.evaluate(_ANIMATIONS, ".ovm-compact a.ovm-link")).values()) == {"none"}
    app.assert_clean()


@pytest.mark.parametrize("query", ["", "?chapter=kv-cache", "?chapter=what-is-an-llm&theme=dark"])
def test_no_horizontal_overflow_on_a_phone(phone, query):
    page = phone.open(query)
    assert page.locator(".ovm-link").first.is_visible()
    assert page.evaluate(_OVERFLOW) <= 0
    if query:                         # the compact row scrolls inside itself, its current stage in view
        row = page.locator(".ovm-compact .ovm-row")
        current = page.locator('.ovm-compact a[aria-current="location"]')
        r, c = row.bounding_box(), current.bounding_box()
        assert r["x"] - 1 <= c["x"] and c["x"] + c["width"] <= r["x"] + r["width"] + 1
    phone.assert_clean()
