"""Markdown rendering: glossary tooltips, math, code, escaping, directives."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")
pytest.importorskip("panel")          # widgets/ are Panel components

from app.content import list_chapters  # noqa: E402
from app.glossary import Glossary, Term, load_glossary  # noqa: E402
from app.render import ChapterRenderer, HtmlSegment, Notice, PlannedWidget, WidgetSegment  # noqa: E402
from widgets import REGISTRY  # noqa: E402

GLOSSARY = Glossary([
    Term("KV cache", ("KV caches", "key-value cache"), "Stored keys & values <fast>.", "Long.", "kv-cache"),
    Term("token", ("tokens",), "A piece of text.", "Long.", "tokens"),
])


def render(body: str, glossary: Glossary = GLOSSARY):
    return ChapterRenderer(glossary, lambda a: f"?page=glossary#{a}").render(body)


def html_of(body: str) -> str:
    return "".join(s.html for s in render(body).segments if isinstance(s, HtmlSegment))


def test_first_mark_is_a_tooltip_later_marks_are_plain():
    out = html_of("The [[KV cache]] grows. Each [[key-value cache|KV cache]] entry... [[kv caches]] again.")
    assert out.count('class="gl-term"') == 1
    assert out.count('role="tooltip"') == 1
    assert "Stored keys &amp; values &lt;fast&gt;." in out         # definition escaped
    assert 'href="?page=glossary#kv-cache"' in out
    assert "key-value cache" in out and "kv caches" in out           # later marks keep their text


def test_first_use_is_per_chapter_across_widget_segments():
    r = render("A [[token]].\n\n::: widget generate {}\n\nAnother [[token]].")
    htmls = [s.html for s in r.segments if isinstance(s, HtmlSegment)]
    assert 'class="gl-term"' in htmls[0] and 'class="gl-term"' not in htmls[1]


def test_unknown_term_is_reported_and_shown_as_text():
    r = render("An [[unheard-of thing]] here.")
    assert r.unknown_terms == ["unheard-of thing"]
    assert "unheard-of thing" in r.segments[0].html and "gl-tip" not in r.segments[0].html


def test_math_uses_the_delimiters_the_client_typesets_and_money_is_not_math():
    out = html_of("It costs $30,000 and $5 a day. Inline $x^2 < y$.\n\n$$\n\\frac{a}{b}\n$$\n")
    assert r"\(x^2 \lt  y\)" in out
    assert r"\[\frac{a}{b}\]" in out
    assert "&#36;30,000" in out and "&#36;5" in out                # dollars in prose are hidden from MathJax


def test_code_cannot_trigger_math_and_is_highlighted():
    out = html_of("```python\nx = '$$ \\\\( y'\n```\n\nand `$$a$$` inline")
    assert "$" not in out and "\\" not in out
    assert '<span class="s1">' in out or '<span class="s' in out


@pytest.mark.parametrize("raw", ["<script>alert(1)</script>", '<img src=x onerror="alert(1)">',
                                 "<iframe src=//evil>", "<div onclick=x>hi</div>"])
def test_raw_html_is_escaped(raw):
    out = html_of(f"before\n\n{raw}\n\nafter {raw} inline")
    assert "<script" not in out and "<img" not in out and "<iframe" not in out and "<div onclick" not in out


def test_details_answer_block_is_allowed():
    out = html_of("Q?\n\n<details><summary>Show answer</summary>\n\nIt is *42*.\n\n</details>\n")
    assert "<details><summary>Show answer</summary>" in out and "<em>42</em>" in out and "</details>" in out


def test_directives_split_the_chapter_and_code_fences_protect_them():
    r = render('Intro\n\n::: widget generate {"prompt": "Hi"}\n\n```\n::: widget nope {}\n```\n'
               "<!-- widget: tokenizer | type text and see tokens -->\n::: widget generate {bad: json}\n")
    kinds = [type(s) for s in r.segments]
    assert kinds == [HtmlSegment, WidgetSegment, HtmlSegment, PlannedWidget, Notice]
    assert r.segments[1].args == {"prompt": "Hi"}
    assert "::: widget nope" in r.segments[2].html                  # inside a fence: just code
    assert r.segments[3].name == "tokenizer" and "see tokens" in r.segments[3].what
    assert len(r.problems) == 1 and "bad arguments" in r.problems[0]


def test_chapter_links_keep_the_theme():
    r = ChapterRenderer(GLOSSARY, lambda a: "#" + a, lambda slug: f"?chapter={slug}&theme=dark").render(
        "See [tokens](?chapter=tokens) and [out](https://example.org).")
    assert 'href="?chapter=tokens&amp;theme=dark"' in r.segments[0].html
    assert 'href="https://example.org"' in r.segments[0].html and r.chapter_links == ["tokens"]


# ---- the real content ------------------------------------------------------------------------
CHAPTERS = list_chapters(strict=True)
REAL_GLOSSARY = load_glossary()


@pytest.mark.parametrize("chapter", CHAPTERS, ids=[c.slug for c in CHAPTERS])
def test_real_chapter_renders_with_known_widgets_and_terms(chapter):
    r = ChapterRenderer(REAL_GLOSSARY, lambda a: "#" + a).render(chapter.body)
    assert not r.problems, r.problems
    unknown_widgets = [s.name for s in r.segments if isinstance(s, WidgetSegment) and s.name not in REGISTRY]
    assert not unknown_widgets, f"directives name widgets that do not exist: {unknown_widgets}"
    assert not r.unknown_terms, f"[[terms]] missing from the glossary: {sorted(set(r.unknown_terms))}"
    slugs = {c.slug for c in CHAPTERS}
    assert not [s for s in r.chapter_links if s not in slugs], "links to chapters that do not exist"
    html = "".join(s.html for s in r.segments if isinstance(s, HtmlSegment))
    assert not re.search(r"<(script|iframe|img|style)\b", html)


def test_a_tables_empty_corner_cell_is_not_a_nameless_header():
    out = html_of("| | a | b |\n|---|---|---|\n| x | 1 | 2 |\n")
    assert "<td></td>" in out and "<th></th>" not in out and "<th>a</th>" in out
