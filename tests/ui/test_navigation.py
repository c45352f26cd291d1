"""Links are real links: sidebar, previous/next, back button, direct URLs, theme toggle, keyboard."""
from __future__ import annotations


import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")
pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app.content import list_chapters  # noqa: E402

pytestmark = pytest.mark.ui
CHAPTERS = list_chapters(strict=True)


def _h1(page) -> str:
    return page.locator(".ex-main h1").first.inner_text()


def test_sidebar_next_previous_and_back(app):
    first, second = CHAPTERS[0], CHAPTERS[1]
    page = app.open()
    page.locator(f'.toc-wide a[href*="chapter={first.slug}"]').click()
    page.wait_for_url(f"**chapter={first.slug}")
    app.wait_rendered()
    assert _h1(page) == first.title
    assert page.locator('.toc-wide a[aria-current="page"]').inner_text().endswith(first.title)

    page.locator(".pager a[rel=next]").click()
    page.wait_for_url(f"**chapter={second.slug}")
    app.wait_rendered()
    assert _h1(page) == second.title

    page.locator(".pager a[rel=prev]").click()
    page.wait_for_url(f"**chapter={first.slug}")
    app.wait_rendered()
    assert _h1(page) == first.title

    page.go_back()
    page.wait_for_url(f"**chapter={second.slug}")
    app.wait_rendered()
    assert _h1(page) == second.title
    page.go_back()
    page.wait_for_url(f"**chapter={first.slug}")
    page.go_back()
    app.wait_rendered()
    assert "chapter=" not in page.url and page.locator(".cover").count() == 1
    app.assert_clean()


def test_first_and_last_chapter_pager_ends(app):
    page = app.open(f"?chapter={CHAPTERS[0].slug}")
    assert page.locator(".pager a[rel=prev]").count() == 0
    assert page.locator(".pager a[rel=next]").count() == 1
    page = app.open(f"?chapter={CHAPTERS[-1].slug}")
    assert page.locator(".pager a[rel=next]").count() == 0
    app.assert_clean()


def test_direct_url_opens_chapter_with_current_marked(app):
    ch = CHAPTERS[len(CHAPTERS) // 2]
    page = app.open(f"?chapter={ch.slug}")
    assert _h1(page) == ch.title
    current = page.locator('.toc-wide a[aria-current="page"]')
    assert current.count() == 1 and current.get_attribute("href").endswith(f"chapter={ch.slug}")
    app.assert_clean()


def test_theme_toggle_keeps_the_page_and_carries_over_links(app):
    ch = CHAPTERS[0]
    page = app.open(f"?chapter={ch.slug}")
    page.locator(".theme-toggle").click()
    page.wait_for_url("**theme=dark**")
    app.wait_rendered()
    assert f"chapter={ch.slug}" in page.url and _h1(page) == ch.title
    assert page.locator(".pager a[rel=next]").get_attribute("href").endswith("theme=dark")
    app.screenshot(f"chapter-{ch.number:02d}-dark-1280")
    page.locator(".theme-toggle").click()
    page.wait_for_url(lambda url: "theme=dark" not in url)
    app.wait_rendered()
    assert _h1(page) == ch.title
    app.assert_clean()


DEEP_ACTIVE = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (!a) return null;
  const s = getComputedStyle(a);
  return {tag: a.tagName, cls: a.className, text: (a.innerText || '').slice(0, 80),
          outline: s.outlineStyle, width: s.outlineWidth}; }"""


def test_keyboard_reaches_controls_with_visible_focus(app):
    page = app.open(f"?chapter={CHAPTERS[0].slug}")
    seen = []
    for _ in range(12):
        page.keyboard.press("Tab")
        seen.append(page.evaluate(DEEP_ACTIVE))
    links = [s for s in seen if s and s["tag"] == "A"]
    assert any("theme-toggle" in s["cls"] for s in links), seen
    assert any("What is an LLM" in s["text"] or "Tokens" in s["text"] for s in links), seen
    # The focus ring is drawn (outline not 'none' and wider than zero).
    assert all(s["outline"] != "none" and s["width"] != "0px" for s in links), links
    app.assert_clean()


def test_skip_link_moves_focus_to_the_text(app):
    page = app.open(f"?chapter={CHAPTERS[0].slug}")
    page.keyboard.press("Tab")
    first = page.evaluate(DEEP_ACTIVE)
    assert first and "skip-link" in first["cls"]
    assert page.locator('.skip-link[href="#main-content"]').is_visible()     # shown while focused
    page.keyboard.press("Enter")
    page.wait_for_function("""() => { let a = document.activeElement;
        while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
        return a && a.id === 'main-content'; }""")
    # The next Tab lands in the chapter, past the header and the 21 sidebar links.
    page.keyboard.press("Tab")
    nxt = page.evaluate(DEEP_ACTIVE)
    assert nxt and "toc" not in (nxt["cls"] or "") and nxt["text"] not in ("Contents", "Glossary")
    app.assert_clean()


def test_chapter_link_opens_in_a_new_tab(app):
    page = app.open()
    target = CHAPTERS[1]
    with page.context.expect_page() as new_tab:
        page.locator(f'.cover-list a[href*="chapter={target.slug}"]').click(modifiers=["Control"])
    tab = new_tab.value
    tab.wait_for_selector(".chapter-head h1")
    assert tab.locator(".chapter-head h1").inner_text() == target.title
    assert "chapter=" not in page.url          # the first tab stayed where it was
    app.assert_clean()
