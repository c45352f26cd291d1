"""Chapters 2 and 3 in the browser: the tokenizer playground and the embedding explorer are painted
at once, go live, follow typing, hover and clicks, keep reader text as text, carry the reader's
sentence to the next chapter in the URL; screenshots of them and of chapter 1's generate widget at
1280 and 390 px, light and dark (generate's behaviour is tested in test_glossary_math_widget.py)."""
from __future__ import annotations

import re
import time

from pathlib import Path

import pytest

pytest.importorskip("playwright")      # the GPU machine has neither (pytest -m gpu must still collect)
pytest.importorskip("panel")
from playwright.sync_api import expect  # noqa: E402


from engine import gpt2_tokenizer  # noqa: E402
from widgets.common.testing import (bokeh_points, deep_count, hover_point, wait_live, wait_text,  # noqa: E402
                                    widget_screenshots)

pytestmark = pytest.mark.ui
XSS = "<img src=x onerror=alert(1)>"
TK = ".widget-tokenizer"


def test_tokenizer_types_hovers_links_and_carries_the_sentence(app):
    page = app.open("?chapter=tokens")
    # Never blank: the saved example is on the page before the engine is live.
    assert deep_count(page, f"{TK} .tk-out .tk") > 0
    wait_live(page, "tokenizer")
    box = page.locator(f"{TK} textarea")
    text = "Hello world, 👋🏽 "
    box.fill(text)
    n_gpt2 = len(gpt2_tokenizer().encode(text).ids)
    wait_text(page, f'{TK} .tk-col[data-tokenizer="g"] .tk-stats', f"{n_gpt2} tokens")
    # Ids on demand, and hover links a coloured piece and its id both ways.
    page.locator(f"{TK} .tk-show-ids input").check()
    ids = page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tk-ids')
    expect(ids).to_be_visible()
    assert ids.inner_text().split()[0] == "15496"                  # GPT-2's "Hello"
    span = page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tk-out .tk').nth(1)
    span.hover()
    link = span.get_attribute("data-link")
    expect(page.locator(f'{TK} .tid[data-link="{link}"]')).to_have_class("tid c1 linked")
    wait_text(page, f'{TK} .tk-col[data-tokenizer="g"] .hover-readout', "= id 995")     # "␣world"
    page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tid').nth(0).hover()
    expect(page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tk-out .tk').nth(0)).to_have_class("tk c0 linked")
    wait_text(page, f'{TK} .tk-col[data-tokenizer="g"] .hover-readout', "“Hello” = id 15496")
    # The emoji is never cut: one span holds all its byte-level tokens.
    emoji = page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tk-out .tk', has_text="👋🏽")
    assert emoji.count() == 1 and "byte-level tokens" in emoji.get_attribute("data-tip")
    # Whitespace on demand.
    page.locator(f"{TK} .tk-show-ws input").check()
    page.locator(f"{TK} .tk-out .ws").first.wait_for()
    # The sentence is in the URL, and the link to the next chapter carries it.
    page.wait_for_function("() => new URL(location.href).searchParams.get('sentence') === 'Hello world, 👋🏽 '",
                           timeout=90_000)     # a server round trip: slow on a loaded 2-core machine
    # Typing one's own sentence is using it on this page (mine=1), and the control offers the way back.
    assert "mine=1" in page.url
    expect(page.locator(f"{TK} .sentence-choice")).to_have_text("Back to the chapter's example")
    # The next chapter gets the sentence, not the choice: it opens on its own example.
    page.locator(".pager-next").click()
    page.wait_for_url("**chapter=embeddings**")
    assert "sentence=Hello" in page.url and "mine=" not in page.url
    app.assert_clean()


def test_tokenizer_samples_limit_and_escaping(app):
    page = app.open("?chapter=tokens")
    wait_live(page, "tokenizer")
    page.locator(f"{TK} .tk-sample button", has_text="Python code").click()
    wait_text(page, f'{TK} .tk-col[data-tokenizer="s"] .tk-stats', "29 tokens")
    wait_text(page, f'{TK} .tk-col[data-tokenizer="g"] .tk-stats', "44 tokens")
    wait_text(page, f"{TK} .tk-samples", "3.6")                     # the chapter's figure for the code
    box = page.locator(f"{TK} textarea")
    box.fill(XSS)
    wait_text(page, f'{TK} .tk-col[data-tokenizer="g"] .tk-out', "onerror")
    assert page.locator(f"{TK} .tk-out img").count() == 0
    assert page.locator(f'{TK} .tk-col[data-tokenizer="g"] .tk-out').inner_text() == XSS
    box.fill("a" * 20_001)                 # the browser keeps 20,000; the page says why
    wait_text(page, f"{TK} .w-note", "20,000 characters")
    app.assert_clean()                     # no dialog: the <img onerror> never ran


def test_tokenizer_screenshots(browser, server, app_page_class):
    def prepare(page):
        page.locator(f"{TK} .tk-show-ids input").check()
        page.locator(f"{TK} .tk-out .tk").nth(3).hover()
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=tokens", "tokenizer", prepare)
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)


EMB = ".widget-embeddings"


def test_embeddings_compare_neighbours_map_and_escaping(app):
    page = app.open("?chapter=embeddings")
    # Never blank: the saved example's cosine is on the page before the engine is live.
    wait_text(page, f"{EMB} .emb-cos-value", "0.62")
    wait_live(page, "embeddings")
    page.locator(f"{EMB} .emb-a input").fill("dog")
    page.locator(f"{EMB} .emb-b input").fill("cat")
    wait_text(page, f"{EMB} .emb-cos", "“␣dog”, “␣cat”) = 0.58")      # the chapter's table says 0.58
    page.locator(f"{EMB} .emb-near-word input").fill(XSS)
    wait_text(page, f"{EMB} .emb-neighbours", "onerror")            # shown as text
    assert page.locator(f"{EMB} img").count() == 0
    page.locator(f"{EMB} .emb-near-word input").fill("Paris")
    wait_text(page, f"{EMB} .emb-neighbours", "nearest to “␣Paris”")
    assert "␣London" in page.locator(f"{EMB} .emb-list").inner_text()
    page.locator(f"{EMB} .emb-b input").fill("unbelievable")
    wait_text(page, f"{EMB} .emb-how", "the average of their")
    page.locator(f"{EMB} .emb-own input").fill(f"tea, {XSS}")
    page.locator(f"{EMB} .emb-own input").press("Enter")
    page.locator(f"{EMB} .emb-map-pane").scroll_into_view_if_needed()
    page.wait_for_function("(xss) => Object.values(Bokeh.index).length > 0", arg=XSS)
    expect_point = None
    deadline = time.monotonic() + 60      # the map follows the input once the server's job is done
    while time.monotonic() < deadline:
        points = bokeh_points(page)
        expect_point = next((p for p in points if p.get("word") == XSS), None)
        if expect_point:
            break
        page.wait_for_timeout(100)
    assert expect_point is not None and expect_point["set"] == "your words"
    hover_point(page, next(p for p in points if p.get("word") == "queen"), "royalty")
    app.assert_clean()                    # no dialog: the reader's markup stayed text


# The map's word labels as Bokeh drew them: each one's box in pixels from the plot's own scales, its
# offsets and its measured text, and the plot's frame (ux review ch. 3: labels overlapped).
_LABEL_BOXES = """() => { const out = {labels: [], points: 0, frames: []};
  const ctx = document.createElement("canvas").getContext("2d");
  const visit = (v) => {
    if (v.frame && v.renderer_views) {
      for (const rv of v.renderer_views.values()) {
        const m = rv.model;
        if (m.type == "LabelSet" || (m.constructor && m.constructor.__name__ == "LabelSet")) {
          const d = m.source.data, f = v.frame.bbox;
          ctx.font = m.text_font_size.value + " " + m.text_font.value;
          out.frames.push([f.left, f.top, f.right, f.bottom]);
          for (let i = 0; i < d.word.length; i++) {
            const w = ctx.measureText(d.word[i]).width;
            const sx = v.frame.x_scale.compute(d.x[i]) + d.xo[i];      // the scales give canvas pixels
            const sy = v.frame.y_scale.compute(d.y[i]) - d.yo[i];
            const x0 = d.align[i] == "left" ? sx : d.align[i] == "right" ? sx - w : sx - w / 2;
            out.labels.push({word: d.word[i], box: [x0, sy - 6, x0 + w, sy + 6]});
          }
        } else if (m.data_source && m.data_source.data.word) out.points += m.data_source.data.word.length;
      }
    }
    for (const c of (v.child_views || [])) visit(c);
  };
  for (const v of Object.values(Bokeh.index)) visit(v);
  return out; }"""


@pytest.mark.parametrize("width", [1280, 390])
def test_embeddings_map_labels_do_not_overlap(browser, server, app_page_class, width):
    ctx = browser.new_context(viewport={"width": width, "height": 900})
    page = app_page_class(ctx.new_page(), server).open("?chapter=embeddings")
    page.locator(f"{EMB} .emb-map-pane").scroll_into_view_if_needed()
    page.wait_for_function("() => Object.values(Bokeh.index).length > 0")
    deadline = time.monotonic() + 30      # placed in the browser once the plot has its size
    while not (got := page.evaluate(_LABEL_BOXES))["labels"] and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    labels, [frame] = got["labels"], got["frames"]
    assert len(labels) >= got["points"] // 2 and "king" in {lb["word"] for lb in labels}   # most words shown
    for i, a in enumerate(labels):
        x0, y0, x1, y1 = a["box"]
        assert frame[0] - 1 <= x0 and x1 <= frame[2] + 1 and frame[1] - 1 <= y0 and y1 <= frame[3] + 1, a
        for b in labels[i + 1:]:
            overlap = min(x1, b["box"][2]) - max(x0, b["box"][0]), min(y1, b["box"][3]) - max(y0, b["box"][1])
            assert min(overlap) <= 1, (a, b)
    ctx.close()


def test_embeddings_start_from_the_example_and_switch_to_the_readers_sentence(app):
    # A carried sentence does not replace the chapter's example: the widget opens on it, and offers one
    # control that reloads the page with mine=1 (the state in the URL), and a control back.
    page = app.open("?chapter=embeddings&sentence=Why%20is%20the%20sky%20blue%3F")
    wait_live(page, "embeddings")
    own = page.locator(f"{EMB} .emb-own input")
    assert own.input_value() == "red, green, blue, yellow, coffee, tea"         # the chapter's example
    choice = page.locator(f"{EMB} .sentence-choice")
    expect(choice).to_have_text("Use my sentence: “Why is the sky blue?”")
    choice.focus()
    page.keyboard.press("Enter")                                                # a link: keys work
    page.wait_for_url("**mine=1**")
    wait_live(page, "embeddings")
    assert "sentence=Why" in page.url
    expect(own).to_have_value("Why, is, the, sky, blue")
    page.locator(f"{EMB} .emb-map-pane").scroll_into_view_if_needed()
    page.wait_for_function("() => Object.values(Bokeh.index).length > 0")
    words = {p.get("word") for p in bokeh_points(page)}
    assert {"sky", "blue", "king", "dog", "three"} <= words
    expect(choice).to_have_text("Back to the chapter's example")
    choice.click()
    page.wait_for_url(re.compile(r"^(?!.*mine=).*sentence=Why"))               # the sentence still travels
    wait_live(page, "embeddings")
    expect(own).to_have_value("red, green, blue, yellow, coffee, tea")
    app.assert_clean()


def test_embeddings_screenshots(browser, server, app_page_class):
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=embeddings", "embeddings")
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)


def test_server_log_has_no_tracebacks(server):
    """Widget callbacks that fail on the server only show in its log: none may have failed."""
    log = (Path(__file__).resolve().parents[2] / "artifacts" / "panel-serve.log").read_text(errors="replace")
    events = re.split(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ )", log)     # one entry per time-stamped line
    # tornado's note that a browser left while a message to it was being written (a page closed mid-update,
    # as every test's page is) is not a widget failing
    failed = [e for e in events if "Traceback" in e and not e.rstrip().endswith("WebSocketClosedError")]
    assert not failed, failed[0][:3000]


def test_generate_screenshots(browser, server, app_page_class):
    def prepare(page):
        widget = page.locator(".widget-generate")
        widget.locator(".gen-max-tokens input").fill("4")             # a short live reply: CI has 2 cores
        widget.locator(".gen-max-tokens input").press("Tab")
        widget.locator(".gen-button button").click()
        wait_text(page, ".widget-generate .gen-stats", "measured on", timeout_ms=120_000)
        wait_text(page, ".widget-generate .gen-stats", "stopped", timeout_ms=120_000)
    shots = widget_screenshots(browser, server, app_page_class, "?chapter=what-is-an-llm", "generate", prepare)
    assert len(shots) == 4 and all(p.stat().st_size > 10_000 for p in shots)
