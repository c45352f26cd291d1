"""The reader's sentence and the chapter's example (widgets/common/sentence.py): a carried sentence never
replaces a chapter's worked example unless the page asks for it (mine=1), the one control says which it
offers and links to the same page with only `mine` changed, reader text stays text, and the base class
places the control under the widget's status line."""
from __future__ import annotations

import re
from html import unescape
from urllib.parse import parse_qs

import pytest

pytest.importorskip("panel")

from widgets.common import sentence as sentence_mod  # noqa: E402
from widgets.common.sentence import (SENTENCE_LIMIT, carried_sentence, choice_html, page_href,  # noqa: E402
                                     reader_sentence, uses_mine)

EXAMPLE = "The capital of France is Paris"
MINE = "My dog chased the red ball"
XSS = '<img src=x onerror=alert(1)> "quoted" $x$'


def args(**kw) -> dict:
    """Query arguments as Bokeh hands them to a session: names to lists of bytes."""
    return {k: [v.encode()] for k, v in kw.items()}


def href_of(html: str) -> dict:
    href = unescape(re.search(r'href="([^"]*)"', html).group(1))
    assert href.startswith("?")
    return parse_qs(href[1:])


def test_the_example_stays_until_the_page_uses_the_readers_sentence():
    assert reader_sentence(EXAMPLE) == EXAMPLE                                     # outside a session
    assert reader_sentence(EXAMPLE, args(chapter="attention")) == EXAMPLE
    assert reader_sentence(EXAMPLE, args(chapter="attention", sentence=MINE)) == EXAMPLE
    assert reader_sentence(EXAMPLE, args(chapter="attention", sentence=MINE, mine="1")) == MINE
    assert reader_sentence(EXAMPLE, args(sentence="   ", mine="1")) == EXAMPLE    # nothing to use
    assert reader_sentence(EXAMPLE, args(sentence="x" * 5000, mine="1")) == "x" * SENTENCE_LIMIT
    assert reader_sentence(EXAMPLE, args(sentence=MINE, mine="0")) == EXAMPLE
    assert carried_sentence(args(chapter="tokens")) is None and not uses_mine(args(mine="no"))


def test_no_sentence_or_the_examples_own_shows_no_control():
    for a in (args(chapter="attention"), args(chapter="attention", sentence=EXAMPLE),
              args(chapter="attention", sentence=EXAMPLE, mine="1")):
        html = choice_html(EXAMPLE, a)
        assert '<div class="sc-row" hidden>' in html       # there, hidden: the page script shows it on typing


def test_the_control_offers_the_readers_sentence_then_the_way_back():
    a = args(chapter="attention", sentence=MINE, theme="dark")
    use = choice_html(EXAMPLE, a)
    assert "hidden" not in use.split(">")[0] and "Use my sentence:" in use and f"“{MINE}”" in use
    assert href_of(use) == {"chapter": ["attention"], "sentence": [MINE], "theme": ["dark"], "mine": ["1"]}
    back = choice_html(EXAMPLE, {**a, "mine": [b"1"]})
    assert "Back to the chapter&#x27;s example" in back and f"“{MINE}”" not in back
    assert href_of(back) == {"chapter": ["attention"], "sentence": [MINE], "theme": ["dark"]}   # mine cleared
    assert f'data-example="{EXAMPLE}"' in use


def test_a_long_sentence_is_cut_in_the_label_and_whole_in_its_name():
    long = "word " * 40
    html = choice_html(EXAMPLE, args(sentence=long))
    shown = re.search(r'<span class="sc-text">([^<]*)</span>', html).group(1)
    assert shown.endswith("…”") and len(shown) < 70
    assert f'aria-label="Use my sentence: “{long}”"' in html


def test_reader_text_stays_text_in_the_label_the_name_and_the_link():
    html = choice_html(EXAMPLE, args(chapter="attention", sentence=XSS))
    assert "<img" not in html and '"quoted"' not in html and "$x$" not in html
    assert href_of(html)["sentence"] == [XSS]
    assert page_href({"sentence": [XSS.encode()]}, True).count("?") == 1     # quoted: one query


def test_the_base_class_places_the_control_under_the_status_line(monkeypatch):
    from tests.helpers.fakes import FakeHandle
    from widgets.attention_heatmap.widget import AttentionHeatmap
    from widgets.common.handle import EngineStatus
    monkeypatch.setattr(sentence_mod, "session_args", lambda: args(chapter="attention", sentence=MINE))
    w = AttentionHeatmap(FakeHandle(EngineStatus.LOADING))
    assert w._box.value != MINE                                    # the chapter's example, not the reader's
    objects = list(w.__panel__().objects)
    at = next(i for i, o in enumerate(objects) if o is w.gate.pane)
    assert objects[at + 1] is w.sentence_choice and "Use my sentence:" in w.sentence_choice.object
    assert sum(o is w.sentence_choice for o in w.__panel__().objects) == 1
    monkeypatch.setattr(sentence_mod, "session_args",
                        lambda: args(chapter="attention", sentence=MINE, mine="1"))
    w2 = AttentionHeatmap(FakeHandle(EngineStatus.LOADING))
    assert w2._box.value == MINE and "Back to the chapter" in w2.sentence_choice.object
