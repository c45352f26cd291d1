"""Route a session's query arguments to a page and assemble it (see app/main.py)."""
from __future__ import annotations

import logging

import panel as pn

from app import pages
from app.content import find_chapter, list_chapters, neighbours
from app.engine_handle import shared_engine
from app.glossary import load_glossary
from app.links import Links
from app.overview_map import overview_map
from app.render import ChapterRenderer, HtmlSegment, Notice, PlannedWidget, WidgetSegment
from app.engine_status import engine_status_pane
from app.shell import html_pane, page, stylesheets
from app.toc import table_of_contents

log = logging.getLogger(__name__)

MAX_ARG_BYTES = 4096


def _arg(args: dict, name: str) -> str | None:
    values = args.get(name) or []
    if not values:
        return None
    raw = values[0][:MAX_ARG_BYTES]
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def build(args: dict) -> pn.viewable.Viewable:
    dark = _arg(args, "theme") == "dark"
    links = Links(dark)
    chapters = list_chapters()
    toc = table_of_contents(chapters)
    slug, page_name = _arg(args, "chapter"), _arg(args, "page")

    if slug is None and page_name is None:
        dashboard = _widget(WidgetSegment("engine-dashboard", {}), dark)   # the engine serving everyone
        intro, contents = pages.cover_parts(toc, links)
        # The overview map sits between the pitch and the contents: the one picture of the whole.
        journey = overview_map(None, compact=False, links=links, dark=dark)
        return _shell(pages.SITE_TITLE, links, dark, toc, None, None,
                      [html_pane(intro, dark, ["ex-cover"]), journey,
                       html_pane(contents, dark, ["ex-cover-contents"]), dashboard], widget=True)
    if slug is None and page_name == "glossary":
        titles = {c.slug: f"{c.number:02d} {c.title}" for c in chapters}
        body = pages.glossary_html(load_glossary(), titles, links)
        return _shell(f"Glossary · {pages.SITE_TITLE}", links, dark, toc, None, "glossary",
                      [html_pane(body, dark, ["ex-glossary"])])
    chapter = find_chapter(slug, chapters) if page_name is None else None
    if chapter is None:
        return _shell(f"No such chapter · {pages.SITE_TITLE}", links, dark, toc, None, None,
                      [html_pane(pages.not_found_html(slug or page_name or "", links), dark, ["ex-not-found"])])

    renderer = ChapterRenderer(load_glossary(), links.glossary, links.chapter)
    rendered = renderer.render(chapter.body)
    for problem in rendered.problems:
        log.warning("%s: %s", chapter.path.name, problem)
    main: list = [html_pane(pages.chapter_head_html(chapter), dark, ["ex-chapter-head"]),
                  overview_map(chapter.slug, compact=True, links=links, dark=dark)]   # "you are here"
    for seg in rendered.segments:
        main.append(_segment(seg, dark))
    prev_ch, next_ch = neighbours(chapter, chapters)
    main.append(html_pane(pages.chapter_foot_html(prev_ch, next_ch, links), dark, ["ex-pager"]))
    has_widget = any(isinstance(seg, WidgetSegment) for seg in rendered.segments)
    return _shell(f"{chapter.number:02d} {chapter.title} · {pages.SITE_TITLE}", links, dark, toc,
                  chapter.slug, None, main, widget=has_widget)


def _segment(seg, dark: bool):
    if isinstance(seg, HtmlSegment):
        return html_pane(f'<div class="prose">{seg.html}</div>', dark, ["ex-prose"], math=True)
    if isinstance(seg, PlannedWidget):
        return html_pane(pages.planned_widget_html(seg.name, seg.what), dark, ["ex-planned"])
    if isinstance(seg, Notice):
        return html_pane(pages.notice_html(seg.message), dark, ["ex-notice"])
    if isinstance(seg, WidgetSegment):
        return _widget(seg, dark)
    raise TypeError(f"unknown segment {seg!r}")


def _widget(seg: WidgetSegment, dark: bool):
    from widgets import REGISTRY
    factory = REGISTRY.get(seg.name)
    if factory is None:
        log.warning("unknown widget directive %r", seg.name)
        return html_pane(pages.notice_html(f"Unknown widget “{seg.name}”: this directive names no widget."),
                         dark, ["ex-notice"])
    try:
        component = factory(shared_engine(), **seg.args)
    except Exception as exc:   # a bad argument shows on the page and in the log, the chapter still renders
        log.exception("widget %r failed to build", seg.name)
        return html_pane(pages.notice_html(f"Widget “{seg.name}” could not be built: {exc}"), dark, ["ex-notice"])
    return pn.Column(component, css_classes=["ex-widget", f"widget-{seg.name}"], sizing_mode="stretch_width",
                     margin=(8, 0))


def _shell(title, links, dark, toc, current, page_name, main, widget: bool = False):
    return page(title=title, header=pages.header_html(links, dark, current, page_name, widget=widget),
                sidebar=pages.sidebar_html(toc, links, current), main=main, dark=dark,
                status=engine_status_pane(shared_engine(), stylesheets(dark)))
