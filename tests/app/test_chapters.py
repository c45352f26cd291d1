"""The book itself: 21 chapters of the promised length and shape, and a glossary that fits them."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app.content import list_chapters  # noqa: E402
from app.glossary import load_glossary  # noqa: E402
from app.render import ChapterRenderer, PlannedWidget, WidgetSegment  # noqa: E402

CHAPTERS = list_chapters(strict=True)
GLOSSARY = load_glossary()


def body_words(body: str) -> int:
    """Words a reader reads: code blocks, display math and HTML comments (widget markers) excluded, and so is
    every token without a letter or digit in it (a table's | and --- rules, an arrow, a ×): those were 1,300 of
    the 22,600 counted, so the count said 90 minutes for a book the cover's per-chapter times put at 86."""
    for pattern in (r"```.*?```", r"\$\$.*?\$\$", r"<!--.*?-->"):
        body = re.sub(pattern, "", body, flags=re.S)
    return sum(1 for token in body.split() if re.search(r"\w", token))


def render(chapter):
    return ChapterRenderer(GLOSSARY, lambda anchor: f"?chapter=glossary#{anchor}").render(chapter.body)


def test_there_are_21_chapters_in_four_parts():
    assert [c.number for c in CHAPTERS] == list(range(1, 22))
    assert [c.part for c in CHAPTERS] == [1] * 10 + [2] * 4 + [3] * 4 + [4] * 3


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_chapter_length_is_in_range(chapter):
    assert 600 <= body_words(chapter.body) <= 1500


def test_the_book_is_75_to_90_minutes_of_reading():
    # The cover promises 75-90 minutes; at 250 words a minute that is 18,750-22,500 words. The widgets'
    # "try it" prose counts too: a chapter that gains a paragraph must lose one elsewhere.
    total = sum(body_words(c.body) for c in CHAPTERS)
    assert 18_750 <= total <= 22_500, total


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_chapter_shape(chapter):
    body = chapter.body
    assert 2 <= body.count("<summary>Show answer</summary>") <= 3, "two or three questions with hidden answers"
    assert re.search(r"^#+ .*summary", body, flags=re.I | re.M), "a summary section"
    if chapter.number < 21:
        nxt = CHAPTERS[chapter.number]
        assert f"?chapter={nxt.slug}" in body, "a link to the next chapter"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_every_marked_term_is_defined_and_every_directive_is_known(chapter):
    rendered = render(chapter)
    assert rendered.unknown_terms == []
    assert rendered.problems == []
    widgets = [s for s in rendered.segments if isinstance(s, (WidgetSegment, PlannedWidget))]
    assert widgets, "each chapter places at least one widget (live or planned)"


def test_every_glossary_entry_is_used_somewhere():
    used = {t for c in CHAPTERS for t in render(c).terms_used}
    unused = sorted(t.term for t in GLOSSARY.terms if t.term not in used)
    assert unused == []
    assert len(GLOSSARY.terms) >= 120


def test_every_term_is_introduced_in_a_chapter_that_marks_it():
    by_slug = {c.slug: set(render(c).terms_used) for c in CHAPTERS}
    wrong = [(t.term, t.chapter) for t in GLOSSARY.terms if t.term not in by_slug[t.chapter]]
    assert wrong == []


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_reading_minutes_follow_the_word_count(chapter):
    """The cover's reading times are the text's length at about 250 words a minute, not guesses."""
    assert abs(chapter.minutes - body_words(chapter.body) / 250) <= 1
