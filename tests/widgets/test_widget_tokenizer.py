"""The tokenizer playground against the engine's tokenizers: spans tile the text, ids are the engine's,
the saved example is fresh, the chapter's numbers are the widget's, and reader text stays text."""
from __future__ import annotations

import html as html_lib
import re

import pytest

pytest.importorskip("hypothesis")      # the GPU machine has neither (pytest -m gpu must still collect)
pytest.importorskip("panel")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.tokenizer.compute import SAMPLES, TOKENIZERS, count_chars, sample_stats, segments_from_spans, tokenize  # noqa: E402
from widgets.tokenizer.view import render  # noqa: E402
from widgets.tokenizer.widget import LIMIT, TokenizerWidget  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"
# Letters, digits, spaces, line breaks, emoji with skin tones, combining accents, CJK, control characters.
PIECES = list("ab Z9 \n\t.éç日本語\x07\u200d") + ["👋🏽", "e\u0301", "🇫🇷"]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


@pytest.fixture(scope="module")
def toks(llm):
    return [llm.tokenizers.get(k) for k in TOKENIZERS]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_segments_tile_the_text_and_carry_the_engines_ids(toks, text):
    for tok in toks:
        tk = tokenize(tok, text)
        assert "".join(text[s.start:s.end] for s in tk.segments) == text      # spans concatenate back
        assert tk.ids == tok.encode(text).ids                                # the engine's ids, in order
        assert [i for s in tk.segments for i in s.ids] == tk.ids            # every token drawn once
        assert all(s.end > s.start for s in tk.segments)                     # no empty piece on the page


def test_a_split_character_is_one_span_with_all_its_ids(toks):
    for tok in toks:
        tk = tokenize(tok, "hi 👋🏽")
        last = tk.segments[-1]
        assert "👋🏽" in tk.text[last.start:last.end] and len(last.ids) > 1


def test_gpt2_hello_is_15496_and_the_chapters_example(llm):
    assert llm.tokenizers.get("gpt2").encode("Hello").ids == [15496]
    smol = tokenize(llm.tokenizers.get("model"), "What is the capital of France?")
    assert smol.ids == [1780, 314, 260, 3575, 282, 4649, 47] and smol.num_chars == 30


def test_merging_overlapping_spans():
    # tokens 1 and 2 share the character at 3..5 (an emoji cut in two), token 3 follows
    segs = segments_from_spans("ab 😀c", [(0, 2), (2, 4), (3, 4), (4, 5)])
    assert [(s.start, s.end, s.ids) for s in segs] == [(0, 2, [0]), (2, 4, [1, 2]), (4, 5, [3])]
    assert count_chars("e\u0301👋🏽") == 2


def shown_text(markup: str) -> str:
    """What the browser shows in the coloured-span box: tags dropped, entities decoded."""
    out = re.search(r'<div class="tk-out">(.*?)</div>', markup, re.S)[1]
    return html_lib.unescape(re.sub(r"<[^>]+>", "", out))


def test_render_escapes_and_links_every_span_to_its_ids(toks):
    text = f"{XSS} $5 👋🏽"
    tk = tokenize(toks[1], text)
    assert shown_text(render(tk, "g")) == text and "<img" not in render(tk, "g")
    html = render(tk, "g", show_ws=True)
    links = re.findall(r'class="tk c\d" data-link="(g\d+)"', html)
    assert len(links) == len(tk.segments)
    for link in links:                      # hovering a span lights its ids, and the other way round
        assert f'class="tid c' in html and html.count(f'data-link="{link}"') >= 2
    assert '<span class="ws">·</span>' in html


def test_saved_example_is_fresh(llm):
    assert_example_fresh("tokenizer", llm)


def test_chapter_2_quotes_the_widgets_own_sample_numbers(llm):
    from pathlib import Path
    stats = sample_stats(llm)
    smol, gpt2 = (llm.tokenizers.get(k).name for k in TOKENIZERS)
    prose, code = stats["English prose"], stats["Python code"]
    assert prose[smol] == [26, 128] and prose[gpt2] == [26, 128]
    assert code[smol] == [29, 103] and code[gpt2] == [44, 103]
    chapter = (Path(__file__).resolve().parents[2] / "content" / "02-tokens.md").read_text()
    for phrase in ("128 characters", "26 tokens in both", "103 characters", "29 tokens for SmolLM2", "44 for GPT-2"):
        assert phrase in chapter
    assert SAMPLES["English prose"] in chapter and SAMPLES["Python code"].strip() in chapter


def test_widget_types_clips_samples_and_escapes(llm):
    from tests.helpers.fakes import FakeHandle
    w = TokenizerWidget(FakeHandle(_llm=llm))
    # 120 s: a deadline, not a speed target (20,000 characters through two tokenizers on a loaded CI machine)
    assert w.jobs.wait_idle(120) and w.gate.live
    assert "7 tokens" in w._cols.object and "measured on" in w._cols.object and "(26)" in w._samples.object
    w._box.value_input = XSS
    assert w.jobs.wait_idle(120)
    assert "<img" not in w._cols.object and shown_text(w._cols.object) == XSS
    w._box.value_input = "x" * (LIMIT + 5)
    assert w.jobs.wait_idle(120)
    assert "Only the first 20,000 characters are used" in w.notes.object and len(w._text) == LIMIT
    w._use_sample("Python code")
    assert w.jobs.wait_idle(120) and "29 tokens" in w._cols.object and "44 tokens" in w._cols.object
    w._show_ids.value = True
    assert "show-ids" in w._cols.css_classes


def test_loading_shows_the_saved_example_not_a_blank():
    from widgets.common.handle import EngineStatus
    from tests.helpers.fakes import FakeHandle
    w = TokenizerWidget(FakeHandle(EngineStatus.LOADING))
    assert 'data-state="loading"' in w.gate.pane.object
    assert "7 tokens" in w._cols.object and "recorded on" in w._cols.object and "(26)" in w._samples.object
