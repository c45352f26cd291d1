"""HTML for the parts of a page that are not widgets: cover, sidebar, header, chapter head and
foot, glossary, not-found. Pure functions of their inputs, so unit tests can read them.

Everything interpolated here is escaped; the only raw HTML is what app.render produced.
"""
from __future__ import annotations

import html

from app.content import PARTS, Chapter
from app.glossary import Glossary
from app.links import Links
from app.render import render_inline
from app.toc import TocEntry, by_part

SITE_TITLE = "LLM & vLLM inference, from the ground up"

PITCH = (
    "How does a large language model actually run? This explainer follows a prompt from the moment "
    "it becomes a list of tokens, through every matrix multiplication of a transformer, to the memory "
    "tricks that let a serving system like vLLM answer hundreds of people on one GPU. Nothing is "
    "assumed beyond school algebra: each term is defined where it first appears (hover or focus an "
    "underlined word), and the live widgets run a real model, SmolLM2-135M, on a small inference "
    "engine written for this site, so every number you poke at is computed, not copied."
)


def esc(s: str) -> str:
    return render_inline(s)


def _minutes(m: int | None) -> str:
    return f"{m} min" if m else "—"


def header_html(links: Links, dark: bool, chapter: str | None, page: str | None,
                widget: bool = False) -> str:
    """The site header. Its first Tab stops are the skip links: to the text, and, on a chapter with a
    live widget, to that widget (app.js moves focus into their shadow roots). The banner landmark is
    the header row around it (app/shell.py)."""
    toggle_href = html.escape(links.with_theme(not dark, chapter=chapter, page=page))
    toggle_label = "Light theme" if dark else "Dark theme"
    icon = "☀" if dark else "☾"
    return (
        '<div class="site-header">'
        '<a class="skip-link" href="#main-content">Skip to the text</a>'
        + ('<a class="skip-link skip-widget" href="#widget">Skip to the widget</a>' if widget else '') +
        f'<a class="brand" href="{html.escape(links.cover())}">{esc(SITE_TITLE)}</a>'
        '<nav class="header-links" aria-label="Site">'
        f'<a href="{html.escape(links.cover())}">Contents</a>'
        f'<a href="{html.escape(links.glossary())}">Glossary</a>'
        f'<a class="theme-toggle" href="{toggle_href}" aria-label="Switch to {toggle_label.lower()}">'
        f'<span aria-hidden="true">{icon}</span> {toggle_label}</a>'
        "</nav></div>"
    )


def sidebar_html(entries: list[TocEntry], links: Links, current: str | None) -> str:
    """Table of contents grouped by part; the current chapter is marked (aria-current)."""
    groups = []
    for part, name, items in by_part(entries):
        lis = []
        for e in items:
            label = f'<span class="num">{e.number:02d}</span> {esc(e.title)}'
            if not e.available:
                lis.append(f'<li class="toc-soon"><span title="not written yet">{label}</span></li>')
            elif e.slug == current:
                lis.append(f'<li class="toc-current"><a href="{html.escape(links.chapter(e.slug))}" '
                           f'aria-current="page">{label}</a></li>')
            else:
                lis.append(f'<li><a href="{html.escape(links.chapter(e.slug))}">{label}</a></li>')
        groups.append(f'<h2 class="toc-part">{part}. {esc(name)}</h2><ol class="toc-list">{"".join(lis)}</ol>')
    # Wide screens get the list itself; narrow ones a closed <details> above the chapter, so the
    # text starts on the first screen. CSS shows exactly one of the two.
    inner = "".join(groups)
    return ('<nav class="toc" aria-label="Table of contents">'
            f'<div class="toc-wide"><p class="toc-heading">Contents</p>{inner}</div>'
            f'<details class="toc-narrow"><summary>Contents</summary>{inner}</details></nav>')


def cover_parts(entries: list[TocEntry], links: Links) -> tuple[str, str]:
    """The cover's introduction (title, pitch, start) and its contents list."""
    total = sum(e.minutes or 0 for e in entries)
    written = sum(1 for e in entries if e.available)
    # The minutes time the prose alone (words at 250 a minute); the widgets and questions take however long a
    # reader gives them, so the line counts them instead of inventing a figure for them.
    widgets, questions = sum(e.widgets for e in entries), sum(e.questions for e in entries)
    extras = " and ".join(f"{n} {name}{'' if n == 1 else 's'}"
                          for n, name in ((widgets, "widget"), (questions, "question")) if n)
    reading = (f"about {total} minutes of reading" + (f", plus your time with {extras}" if extras else "")
               + f" · {len(entries)} sections")
    if written < len(entries):
        reading += f" ({written} written so far)"
    first = next((e for e in entries if e.available), None)
    start = (f'<a class="start" href="{html.escape(links.chapter(first.slug))}">Start reading →</a>'
             if first else "")
    parts = []
    for part, name, items in by_part(entries):
        rows = []
        for e in items:
            title = esc(e.title)
            if e.available:
                title = f'<a href="{html.escape(links.chapter(e.slug))}">{title}</a>'
            rows.append(
                f'<li class="cover-entry"><span class="num">{e.number:02d}</span>'
                f'<span class="cover-title">{title}<span class="subtitle"> — {esc(e.subtitle)}</span></span>'
                f'<span class="minutes">{_minutes(e.minutes)}</span></li>')
        parts.append(f'<section class="cover-part"><h2>{part}. {esc(name)}</h2>'
                     f'<ol class="cover-list">{"".join(rows)}</ol></section>')
    intro = ('<article class="prose cover">'
             f'<h1 id="main-content">{esc(SITE_TITLE)}</h1><p class="kicker">A long-form, interactive explainer</p>'
             f'<p class="pitch">{esc(PITCH)}</p>'
             f'<p class="start-row">{start}<span class="total">{reading}</span></p></article>')
    contents = ('<section class="prose cover-contents" aria-labelledby="contents-heading">'
                '<h2 class="contents-heading" id="contents-heading">Contents</h2>' + "".join(parts) + "</section>")
    return intro, contents


def cover_html(entries: list[TocEntry], links: Links) -> str:
    """The cover in one piece (the page puts the overview map between its two parts)."""
    return "".join(cover_parts(entries, links))


def chapter_head_html(ch: Chapter) -> str:
    return (
        '<div class="prose chapter-head">'
        f'<p class="eyebrow">Section {ch.number:02d} · {esc(PARTS.get(ch.part, ""))} · '
        f'{_minutes(ch.minutes)} of reading</p>'
        f'<h1 id="main-content">{esc(ch.title)}</h1>'
        + (f'<p class="subtitle">{esc(ch.subtitle)}</p>' if ch.subtitle else "")
        + "</div>"
    )


def chapter_foot_html(prev_ch: Chapter | None, next_ch: Chapter | None, links: Links) -> str:
    def cell(c: Chapter | None, rel: str, label: str) -> str:
        if c is None:
            return f'<span class="pager-{rel} pager-empty"></span>'
        return (f'<a class="pager-{rel}" rel="{rel}" href="{html.escape(links.chapter(c.slug))}">'
                f'<span class="pager-label">{label}</span>'
                f'<span class="pager-title">{c.number:02d} {esc(c.title)}</span></a>')
    return ('<nav class="pager" aria-label="Previous and next chapter">'
            + cell(prev_ch, "prev", "← Previous") + cell(next_ch, "next", "Next →") + "</nav>")


def planned_widget_html(name: str, what: str) -> str:
    return ('<aside class="planned-widget" role="note">'
            f'<p><strong>Interactive widget coming: {esc(name)}</strong></p><p>{esc(what)}</p></aside>')


def notice_html(message: str) -> str:
    return f'<div class="notice" role="alert">{esc(message)}</div>'


def glossary_html(glossary: Glossary, chapter_titles: dict[str, str], links: Links) -> str:
    """Every term, alphabetical, grouped under letter headings; each entry has an id anchor that
    tooltips link to, and a permalink to itself."""
    groups: dict[str, list[str]] = {}
    for t in glossary.sorted_terms():
        letter = t.term[:1].upper() if t.term[:1].isalpha() else "#"
        intro = ""
        if t.chapter in chapter_titles:
            intro = (f'<p class="gl-intro">Introduced in <a href="{html.escape(links.chapter(t.chapter))}">'
                     f"{esc(chapter_titles[t.chapter])}</a></p>")
        aliases = f'<p class="gl-aliases">Also: {esc(", ".join(t.aliases))}</p>' if t.aliases else ""
        long = f"<p>{esc(t.long)}</p>" if t.long and t.long != t.short else ""
        groups.setdefault(letter, []).append(
            f'<dt id="{html.escape(t.anchor)}"><a class="permalink" href="#{html.escape(t.anchor)}">'
            f"{esc(t.term)}</a></dt>"
            f'<dd><p class="gl-short">{esc(t.short)}</p>{long}{aliases}{intro}</dd>')
    index = " ".join(f'<a href="#letter-{"sym" if k == "#" else k.lower()}">{esc(k)}</a>' for k in groups)
    sections = "".join(
        f'<h2 class="gl-letter" id="letter-{"sym" if k == "#" else k.lower()}">{esc(k)}</h2>'
        f'<dl class="gl-list">{"".join(v)}</dl>' for k, v in groups.items())
    body = sections or "<p>No glossary entries yet.</p>"
    return (f'<article class="prose glossary"><h1 id="main-content">Glossary</h1><p>{len(glossary.terms)} terms, '
            "alphabetical. Each links to the chapter that introduces it.</p>"
            f'<nav class="gl-index" aria-label="Glossary letters">{index}</nav>{body}</article>')


def not_found_html(what: str, links: Links) -> str:
    # `what` comes from the URL: escaped, and cut short so a 10 kB slug cannot flood the page.
    shown = what if len(what) <= 60 else what[:57] + "…"
    return ('<article class="prose not-found"><h1 id="main-content">No such chapter</h1>'
            f'<p>There is no chapter called “<code>{esc(shown)}</code>”.</p>'
            f'<p><a href="{html.escape(links.cover())}">Back to the contents</a> or open the '
            f'<a href="{html.escape(links.glossary())}">glossary</a>.</p></article>')
