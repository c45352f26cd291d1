"""The cover, every chapter, the glossary and bad URLs load offline with no errors."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")
pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app.content import list_chapters  # noqa: E402
from app.render import DIRECTIVE_RE  # noqa: E402
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTERS = list_chapters(strict=True)


def _directives(body: str) -> list[str]:
    return [m["name"] for line in body.splitlines() if (m := DIRECTIVE_RE.match(line.strip()))]


def test_cover_lists_all_sections_with_reading_times(app):
    page = app.open()
    assert page.title() == "LLM & vLLM inference, from the ground up"
    assert page.locator(".cover h1").inner_text().startswith("LLM & vLLM inference")
    assert len(page.locator(".cover .pitch").inner_text()) > 200
    parts = page.locator(".cover-part h2").all_inner_texts()
    assert parts == ["1. Foundations", "2. How serving actually works", "3. vLLM internals", "4. Scaling out"]
    entries = page.locator(".cover-entry")
    assert entries.count() >= 21
    for ch in CHAPTERS:   # every written chapter is a link with its front-matter minutes
        row = entries.filter(has=page.locator(f'a[href*="chapter={ch.slug}"]'))
        assert row.count() == 1, ch.slug
        assert row.locator(".minutes").inner_text() == (f"{ch.minutes} min" if ch.minutes else "—")
    app.screenshot("cover-1280", full_page=True)
    app.assert_clean()


def test_cover_at_phone_width(phone):
    page = phone.open()
    # Nothing may stick out sideways at 390 px.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    phone.screenshot("cover-390", full_page=False)
    phone.assert_clean()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_every_chapter_renders(app, chapter):
    page = app.open(f"?chapter={chapter.slug}")
    assert page.title().startswith(f"{chapter.number:02d} {chapter.title}")
    assert page.locator(".chapter-head h1").inner_text() == chapter.title
    # Every widget directive became a live component, and nothing fell back to a notice.
    names = _directives(chapter.body)
    for name in set(names):
        assert page.locator(f".widget-{name}").count() == names.count(name), name
    assert page.locator(".notice").count() == 0, page.locator(".notice").all_inner_texts()
    app.screenshot(f"chapter-{chapter.number:02d}-{chapter.slug}-1280")
    # Narrowed to a phone's width, the page itself never scrolls sideways (wide tables and code scroll
    # inside their own boxes). The layout follows the width alone, so the open page is resized rather
    # than loaded again.
    page.set_viewport_size({"width": 390, "height": 844})
    try:              # figures follow the new width a frame or two later (a resize observer)
        page.wait_for_function("document.documentElement.scrollWidth <= 390", timeout=15_000)
    except PlaywrightTimeout:
        pass
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"{chapter.slug} scrolls sideways at 390 px: {width} px wide"
    app.assert_clean()


def test_chapter_one_at_phone_width(phone):
    ch = CHAPTERS[0]
    page = phone.open(f"?chapter={ch.slug}")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The contents collapse to one closed block above the chapter; the title is on the first screen.
    assert page.locator("details.toc-narrow").is_visible()
    assert not page.locator(".toc-wide").is_visible()
    box = page.locator(".chapter-head h1").bounding_box()
    assert box is not None and box["y"] < 844
    phone.screenshot(f"chapter-{ch.number:02d}-{ch.slug}-390", full_page=False)
    phone.assert_clean()


def test_glossary_page_lists_terms_alphabetically_with_anchors(app):
    page = app.open("?page=glossary")
    assert page.title().startswith("Glossary")
    terms = page.locator(".gl-list dt").all_inner_texts()
    assert terms, "no glossary entries rendered"
    assert terms == sorted(terms, key=str.casefold)
    ids = page.locator(".gl-list dt").evaluate_all("els => els.map(e => e.id)")
    assert all(re.fullmatch(r"[a-z0-9-]+", i) for i in ids) and len(set(ids)) == len(ids)
    app.screenshot("glossary-1280")
    app.assert_clean()


BAD_SLUGS = [
    "../../etc/passwd",
    "..%2F..%2Fetc%2Fpasswd",
    "x" * 5000,
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "what-is-an-llm/../../../../etc/passwd",
    "no-such-chapter",
]


@pytest.mark.parametrize("slug", BAD_SLUGS, ids=range(len(BAD_SLUGS)))
def test_bad_slug_shows_friendly_page(app, slug):
    from urllib.parse import quote
    page = app.open(f"?chapter={quote(slug, safe='%')}")
    assert page.locator(".not-found h1").inner_text() == "No such chapter"
    # Shown as text (cut short), never as markup: no injected image, no script ran.
    assert page.locator(".not-found img").count() == 0
    assert page.locator(".not-found script").count() == 0
    assert "root:" not in page.locator(".not-found").inner_text()
    assert len(page.locator(".not-found code").inner_text()) <= 60
    app.assert_clean()     # includes: no alert() dialog opened


def test_not_found_screenshots(app, phone):
    app.open("?chapter=../../etc/passwd")
    app.screenshot("not-found-1280")
    phone.open("?chapter=%3Cscript%3E")
    phone.screenshot("not-found-390")
    app.assert_clean()
    phone.assert_clean()


def test_favicon_and_title_per_page(app):
    page = app.open("?chapter=" + CHAPTERS[0].slug)
    href = page.locator('link[rel="icon"]').last.get_attribute("href")
    assert href.endswith("/static/favicon.svg")
    resp = page.request.get(page.url.split("/app")[0] + href)
    assert resp.status == 200 and b"<svg" in resp.body()
    app.assert_clean()
