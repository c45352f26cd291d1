"""The page shell: header, sidebar table of contents and main column, as Panel components.

Layout: a FlexBox with the sidebar (17rem) beside the main column; under 820 px wide it wraps, so
the contents sit above the chapter as a collapsible block and the text takes the full width.
"""
from __future__ import annotations

import re
from functools import lru_cache

import panel as pn
from pygments.formatters import HtmlFormatter

from widgets.common.theme import DARK_OVERRIDES, static_url


@lru_cache(maxsize=2)
def pygments_css(dark: bool) -> str:
    """Token colours for highlighted code, scoped to code blocks inside our prose. The style's own
    background is dropped: on an inline <code> it paints a box behind every line; the block's
    background comes from app.css instead."""
    css = HtmlFormatter(style="github-dark" if dark else "default").get_style_defs(".prose pre code")
    keep = []
    for line in css.splitlines():
        if not line.startswith(".prose pre code"):
            continue                      # unscoped rules (pre, line numbers) we do not use
        if line.startswith(".prose pre code {"):
            line = re.sub(r"background(-color)?:[^;}]*;?", "", line)
        keep.append(line)
    css = "\n".join(keep)
    # The light style's comment teal and operator-word purple read at 4.3-4.4:1 on our code background:
    # one step darker for 4.5:1.
    return css if dark else css.replace("#3D7B7B", "#336868").replace("#A2F;", "#8a1bd4;")




def stylesheets(dark: bool) -> list[str]:
    """The app's own panes' CSS: app.css and the code colours (a widget's panes take
    widgets.common.theme.stylesheets, which adds widgets.css)."""
    sheets = [static_url("app.css"), pygments_css(dark)]
    return sheets + [DARK_OVERRIDES] if dark else sheets


def html_pane(markup: str, dark: bool, css_classes: list[str] | None = None, math: bool = False,
              **kw) -> pn.pane.HTML:
    """A pane of the app's own trusted HTML (prose, cover, pager); ``math=True`` typesets a chapter's
    $…$. Widgets use widgets.common.theme.html_pane instead: it never typesets (a reader's ``$`` stays a
    dollar sign) and its theme is read from the page, so ``dark`` is optional and comes after the classes."""
    return pn.pane.HTML(markup, stylesheets=stylesheets(dark), disable_math=not math,
                        css_classes=css_classes or [], sizing_mode="stretch_width", margin=(0, 0), **kw)


# Panel's page template, extended. In the <head>: phones lay out at their real width (without this they
# pretend to be 980 px wide), the dark theme draws dark scrollbars, and app.css styles the preview.
# The page paints at once: Bokeh's and Panel's scripts (3.9 MB, in the head by default, where they block
# every paint until they have loaded) move into the body, after a preview of the page — its header,
# contents and text, rendered on the server — that the reader reads while they load. app.js removes the
# preview once Bokeh has drawn the live page under it (it covers the page until then, so nothing shifts).
_TEMPLATE = """{% block preamble %}{{ super() }}
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="description" content="An interactive explainer of LLM and vLLM inference, from the ground up.">
{% if theme_name == "dark" %}<meta name="color-scheme" content="dark">{% endif %}
<link rel="stylesheet" href="{{ app_css }}">
{% endblock %}
{% block js_resources %}{% endblock %}
{% block postamble %}{{ super() }}<script src="{{ app_js }}" defer></script>
<script src="{{ widgets_js }}" defer></script>{% endblock %}
{% block contents %}<div id="ex-preview" class="ex-preview{% if theme_name == 'dark' %} ex-preview-dark{% endif %}">
{{ preview_html | safe }}</div>
{{ bokeh_js }}
{{ super() }}{% endblock %}"""

_MATH = re.compile(r"\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def preview_html(header: str, sidebar: str, main: list) -> str:
    """What the reader sees while the scripts load: the header, the contents and every text pane of the
    main column as they will be, a placeholder for each widget. Math shows as its TeX source (MathJax is
    one of the scripts being loaded), in the style of code."""
    parts = []
    for item in main:
        if getattr(item, "preview_html", None) is not None:    # a live part with a static face (the map)
            parts.append(item.preview_html)
        elif isinstance(item, pn.pane.HTML):
            parts.append(_MATH.sub(lambda m: f'<code class="ex-preview-math">{m.group(1) or m.group(2)}</code>',
                                   item.object or ""))
        else:
            parts.append('<p class="ex-preview-widget">The live widget appears here once the page has loaded.</p>')
    return (f'<div class="ex-header-row"><div class="ex-header">{header}</div></div><div class="ex-preview-shell">'
            f'<div class="ex-sidebar">{sidebar}</div><div class="ex-main">{"".join(parts)}</div></div>')


class _Landmark:
    """A layout whose element is an ARIA landmark (``role="main"``, ``role="banner"``): Bokeh sets its
    ``html_attributes`` on the element itself, so the landmark holds every pane rendered inside it
    (each pane is a shadow root of its own: a <main> inside one pane could not)."""
    role = ""

    def _get_model(self, doc, root=None, parent=None, comm=None):
        model = super()._get_model(doc, root, parent, comm)
        model.html_attributes = {**(model.html_attributes or {}), "role": self.role}
        return model


class MainColumn(_Landmark, pn.Column):
    role = "main"


class Banner(_Landmark, pn.Column):
    role = "banner"


def page(*, title: str, header: str, sidebar: str, main: list, dark: bool,
         status: pn.viewable.Viewable | None = None) -> pn.viewable.Viewable:
    """The whole page; ``status`` (the engine's state) sits in the header row beside the links."""
    doc = pn.state.curdoc
    if doc is not None:
        doc.template = _TEMPLATE      # Panel renders a str template as `{% extends base %}` + it
        doc.template_variables["app_css"] = static_url("app.css")
        doc.template_variables["preview_html"] = preview_html(header, sidebar, main)
        doc.template_variables["app_favicon"] = static_url("favicon.svg")
        doc.template_variables["apple_icon"] = static_url("favicon.svg")
        doc.template_variables["app_js"] = static_url("app.js")
        doc.template_variables["widgets_js"] = static_url("widgets.js")
    header_pane = html_pane(header, dark, ["ex-header"])
    sidebar_pane = html_pane(sidebar, dark, ["ex-sidebar"])
    main_col = MainColumn(*main, css_classes=["ex-main"], stylesheets=stylesheets(dark),
                         sizing_mode="stretch_width", margin=(0, 0))
    body = pn.FlexBox(sidebar_pane, main_col, flex_wrap="wrap", css_classes=["ex-shell"],
                      stylesheets=stylesheets(dark), sizing_mode="stretch_width", margin=(0, 0))
    top = header_pane
    if status is not None:
        top = pn.FlexBox(header_pane, status, flex_wrap="wrap", align_items="center", gap="0 1.5rem",
                         css_classes=["ex-header-row"],
                         stylesheets=stylesheets(dark), sizing_mode="stretch_width", margin=(0, 0))
    banner = Banner(top, css_classes=["ex-banner"], sizing_mode="stretch_width", margin=(0, 0))
    root = pn.Column(banner, body, sizing_mode="stretch_width", css_classes=["ex-root"],
                     stylesheets=stylesheets(dark), styles={"padding": "0 clamp(.8rem, 3vw, 2rem)"})
    root.servable(title=title)
    return root
