"""The page paints at once: the server sends the page's text as a preview ahead of Bokeh's scripts (which
sit in the body, after it, instead of blocking every paint from the head), the live page replaces it once
drawn, the preview stays readable if the scripts never come, and text responses are compressed."""
from __future__ import annotations

import gzip
import re
import urllib.request

import pytest

pytest.importorskip("playwright")
pytest.importorskip("panel")

pytestmark = pytest.mark.ui


def _get(url: str, gzip_ok: bool = False) -> tuple[bytes, dict]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read(), dict(r.headers)


def test_the_text_comes_before_the_scripts(server):
    html = _get(server + "?chapter=attention")[0].decode()
    head, body = html.split("</head>", 1)
    assert "bokeh.min.js" not in head                          # nothing heavy blocks the first paint
    preview = body.index('id="ex-preview"')
    assert preview < body.index("bokeh.min.js") < body.index("panel.min.js")
    text = body[preview:body.index("bokeh.min.js")]
    assert "<h1>Attention</h1>" in text or ">Attention</h1>" in text
    assert "Three roles for every token" in text               # the chapter's prose, not only its title
    assert "ex-preview-widget" in text                         # a placeholder where the widget will be
    assert 'class="widget-' not in text                        # never taken for the live widget
    assert not re.search(r"\\\(|\\\[", text)                   # math shown as its source in code, not as TeX


def test_scripts_and_pages_are_compressed(server):
    html = _get(server + "?chapter=attention")[0].decode()
    src = re.search(r'src="([^"]*bokeh\.min\.js[^"]*)"', html)[1]
    url = server.rsplit("/app", 1)[0] + "/" + src.lstrip("/")
    plain, _ = _get(url)
    packed, headers = _get(url, gzip_ok=True)
    assert headers.get("Content-Encoding") == "gzip" and gzip.decompress(packed) == plain
    assert len(packed) < len(plain) / 2


def test_the_live_page_replaces_the_preview(app):
    page = app.open("?chapter=attention")                     # waits for the preview to go
    assert page.locator("#ex-preview").count() == 0
    assert page.locator(".ex-main h1").first.inner_text() == "Attention"
    app.assert_clean()


def test_without_the_scripts_the_preview_stays_readable(browser, server, app_page_class):
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = ctx.new_page()
        page.route("**/static/js/bokeh*.js*", lambda route: route.abort())    # a reader whose scripts fail
        page.goto(server + "?chapter=attention&theme=dark", wait_until="load")
        preview = page.locator("#ex-preview")
        assert preview.is_visible() and "ex-preview-dark" in preview.get_attribute("class")
        assert "Three roles for every token" in preview.inner_text()
        fcp = page.evaluate("() => performance.getEntriesByName('first-contentful-paint').length")
        assert fcp == 1                                       # something was painted: the text
    finally:
        ctx.close()
