"""The embedding explorer against the embedding table itself: cosines, neighbours and the PCA map equal
a direct computation; split words say what was compared; the chapter's figures are the widget's."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("panel")

from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.embeddings.compute import (Inputs, compute, cosine, nearest, own_words, pca_2d, table_facts,  # noqa: E402
                                        word_vector)
from widgets.embeddings.widget import EmbeddingsWidget  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


def test_cosine_and_neighbours_equal_a_direct_computation(llm):
    table = llm.embedding_table().float()
    king = llm.tokenizer.encode(" king").ids
    assert len(king) == 1
    w = word_vector(llm, "king")
    assert torch.equal(w.vector, table[king[0]])
    unit = table / table.norm(dim=1, keepdim=True)
    sims = unit @ unit[king[0]]
    sims[king[0]] = -2
    expected = torch.topk(sims, 10)
    got = nearest(llm, w)
    assert [i for i, _, _ in got] == expected.indices.tolist()
    assert [c for _, _, c in got] == pytest.approx(expected.values.tolist(), abs=1e-5)
    queen = table[llm.tokenizer.encode(" queen").ids[0]]
    assert cosine(w.vector, queen) == pytest.approx(float(unit[king[0]] @ (queen / queen.norm())), abs=1e-6)


def test_a_split_word_says_which_pieces_were_averaged(llm):
    w = word_vector(llm, "unbelievable")
    assert len(w.ids) > 1 and "".join(w.pieces) == " unbelievable"
    assert torch.allclose(w.vector, llm.embedding_table()[w.ids].float().mean(0))
    assert f"is {len(w.ids)} tokens" in w.how and f"the average of their {len(w.ids)} rows" in w.how
    start = word_vector(llm, "king", leading_space=False)      # "king" at the start of a text: another token
    assert start.ids != word_vector(llm, "king").ids
    with pytest.raises(ValueError):
        word_vector(llm, "   ")


def test_pca_is_the_top_two_directions_of_spread():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 8, generator=g) * torch.tensor([5.0, 3.0, 1, 1, 1, 1, 1, 1])
    coords, share = pca_2d(x)
    centred = x - x.mean(0)
    u, s, vh = torch.linalg.svd(centred, full_matrices=False)
    ref = centred @ vh[:2].T
    for j in range(2):                     # equal up to the sign of each direction
        assert torch.allclose(coords[:, j].abs(), ref[:, j].abs(), atol=1e-4)
    assert share == pytest.approx((s[:2] ** 2 / (s ** 2).sum()).tolist(), abs=1e-5) and share[0] >= share[1]
    again, _ = pca_2d(x.clone())
    assert torch.equal(coords, again)      # the same words land on the same side every time


def test_table_facts(llm):
    f = table_facts(llm)
    assert (f.vocab, f.hidden) == (llm.config.vocab_size, llm.config.hidden_size) == (49152, 576)
    assert f.bytes_here == 49152 * 576 * 4 and f.bytes_bf16 == 49152 * 576 * 2
    assert f.bytes_q8_0 == 49152 * 576 // 32 * 34 == 30_081_024


def test_chapter_3_quotes_the_widgets_own_numbers(llm):
    chapter = (Path(__file__).resolve().parents[2] / "content" / "03-embeddings.md").read_text()
    rows = re.findall(r"\| `␣(\w+)` / `␣(\w+)` \| (-?[\d.]+) \|", chapter)
    assert len(rows) == 6
    for a, b, quoted in rows:
        assert round(cosine(word_vector(llm, a).vector, word_vector(llm, b).vector), 2) == float(quoted)
    king = [text for _, text, _ in nearest(llm, word_vector(llm, "king"), 5)]
    assert king == [" King", "King", " kings", " queen", " Queen"]
    assert "Q8_0" in chapter and "4-bit file" not in chapter


def test_saved_example_is_fresh(llm):
    assert_example_fresh("embeddings", llm)


def test_own_words():
    assert own_words("tea, coffee , ,Tea") == ["tea", "coffee"]          # commas: one entry each, no repeats
    assert own_words("Why is the sky blue?") == ["Why", "is", "the", "sky", "blue"]
    assert len(own_words(", ".join(f"w{i}" for i in range(30)))) == 12


def test_widget_escapes_reader_words_and_explains_empty_ones(llm):
    from tests.helpers.fakes import FakeHandle
    w = EmbeddingsWidget(FakeHandle(_llm=llm))
    # 120 s: a deadline, not a speed target (a loaded 2-core CI machine can be many times slower)
    assert w.jobs.wait_idle(120) and "0.62" in w._compare.object and "measured on" in w._compare.object
    w._a.value_input = XSS
    w._own.value_input = f"tea, {XSS}"
    assert w.jobs.wait_idle(120)
    assert "<img" not in w._compare.object and "&lt;img" in w._compare.object
    assert any(XSS in words for words in w._map.sources["your words"].data["word"])   # Bokeh draws it as text
    w._near.value = ""
    assert w.jobs.wait_idle(120)
    assert "Type a word to list its neighbours" in w.notes.object and w._neighbours.object == ""


def test_compute_without_sets_has_an_empty_map(llm):
    out = compute(llm, Inputs(sets=()))
    assert out["map"]["points"] == [] and out["compare"]["cos"] == pytest.approx(0.62, abs=0.005)


def test_loading_shows_the_saved_example_not_a_blank():
    from widgets.common.handle import EngineStatus
    from tests.helpers.fakes import FakeHandle
    w = EmbeddingsWidget(FakeHandle(EngineStatus.LOADING))
    assert 'data-state="loading"' in w.gate.pane.object
    assert "0.62" in w._compare.object and "recorded on" in w._compare.object
    assert "␣King" in w._neighbours.object and len(w._map.sources["royalty"].data["word"]) == 8


def test_map_labels_are_placed_in_the_browser_from_every_set():
    """ux review ch. 3: labels overlapped (dog over cat, queen/emperor/prince). One LabelSet draws the
    words from a label source that _PLACE_LABELS fills in the browser, where the plot's pixel size is
    known; it runs when any set's points or either range change (tests/ui checks it places no overlap)."""
    from bokeh.models import LabelSet
    from widgets.common.handle import EngineStatus
    from tests.helpers.fakes import FakeHandle
    w = EmbeddingsWidget(FakeHandle(EngineStatus.LOADING))
    fig = w._map.fig
    [labels] = fig.select(LabelSet)
    assert labels.source is w._map.labels and labels.x_offset == "xo" and labels.text_align == "align"
    for model, attr in [*((src, "data") for src in w._map.sources.values()),
                        (fig.x_range, "start"), (fig.x_range, "end"), (fig.y_range, "start"), (fig.y_range, "end")]:
        assert model.js_property_callbacks.get(f"change:{attr}"), (model, attr)
