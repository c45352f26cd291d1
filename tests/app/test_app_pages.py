"""Page HTML: the cover lists the book, links carry the theme, nothing from a URL is unescaped."""
from __future__ import annotations

import pytest

pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app import pages  # noqa: E402
from app.content import list_chapters  # noqa: E402
from app.links import Links  # noqa: E402
from app.toc import table_of_contents  # noqa: E402

CHAPTERS = list_chapters(strict=True)
TOC = table_of_contents(CHAPTERS)


def test_cover_lists_every_section_with_subtitle_and_minutes():
    html = pages.cover_html(TOC, Links())
    assert html.count('class="cover-entry"') == len(TOC) >= 21
    for e in TOC:
        assert pages.esc(e.subtitle) in html
    for c in CHAPTERS:
        assert f'href="?chapter={c.slug}"' in html
    for part in ("Foundations", "How serving actually works", "vLLM internals", "Scaling out"):
        assert part in html


def test_cover_reading_time_is_the_prose_and_names_what_it_leaves_out():
    """The cover's minutes are the chapters' (the prose at 250 words a minute, tests/app/test_chapters.py); the
    widgets and questions are counted beside them, not folded into an invented figure."""
    intro, _ = pages.cover_parts(TOC, Links())
    minutes = sum(c.minutes for c in CHAPTERS)
    widgets = sum(1 for c in CHAPTERS for line in c.body.splitlines() if line.strip().startswith("::: widget "))
    questions = sum(c.body.count("<summary>Show answer</summary>") for c in CHAPTERS)
    assert widgets >= 21 and questions >= 42                    # every chapter has a widget and two questions
    assert (f"about {minutes} minutes of reading, plus your time with {widgets} widgets and {questions} "
            "questions") in intro


def test_not_found_escapes_and_truncates_what_the_url_said():
    html = pages.not_found_html('<img src=x onerror="alert(1)">' + "a" * 500, Links())
    assert "<img" not in html and "&lt;img" in html
    assert "a" * 100 not in html


def test_dark_theme_is_carried_by_every_internal_link():
    links = Links(dark=True)
    html = pages.sidebar_html(TOC, links, CHAPTERS[0].slug) + pages.header_html(links, True, CHAPTERS[0].slug, None)
    hrefs = [h.split('"')[0] for h in html.split('href="')[1:]]
    toggle = [h for h in hrefs if "theme=dark" not in h and not h.startswith("#")]   # "#": in-page
    assert len(toggle) == 1 and toggle[0] == f"?chapter={CHAPTERS[0].slug}"   # only the toggle goes light


def test_sidebar_marks_the_current_chapter_once():
    html = pages.sidebar_html(TOC, Links(), CHAPTERS[0].slug)
    # Two copies of the list (wide and narrow layouts), each marking the current chapter once.
    assert html.count('aria-current="page"') == 2
