"""The attention heatmap against the engine: its cells are `inspect`'s probabilities (rows sum to 1, the
upper triangle is masked), its scores are what the softmax saw, heads read the right KV head, the KV
bytes are the config's arithmetic, the saved example is fresh, and the widget follows its inputs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("panel")

from widgets.common.handle import EngineStatus  # noqa: E402
from tests.helpers.fakes import FakeHandle  # noqa: E402
from widgets.attention_heatmap.compute import LayerView, kv_bytes_rows, layer_view  # noqa: E402
from widgets.attention_heatmap.view import cells, strip_html  # noqa: E402
from widgets.attention_heatmap.widget import AttentionHeatmap  # noqa: E402
from widgets.common.cache import MAX_TOKENS, inspection  # noqa: E402
from widgets.common.testing import assert_example_fresh  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"
TEXT = "The keys that she left on the table are"


def matrix(data: dict, T: int, column: str) -> np.ndarray:
    m = np.full((T, T), np.nan)
    m[data["y"], data["x"]] = data[column]
    return m


def test_heatmap_rows_sum_to_one_and_equal_inspect(llm):
    ins = llm.inspect(TEXT)
    T = len(ins.tokens)
    for layer in (0, 13, 29):
        view = layer_view(ins, layer)
        for head in range(llm.config.num_heads):
            data = cells(view, head, "probs")
            assert len(data["x"]) == T * (T + 1) // 2             # only what the causal mask allows
            probs = matrix(data, T, "value")
            assert np.all(np.isnan(probs[np.triu_indices(T, 1)]))  # the upper triangle is not drawn
            lower = np.nan_to_num(probs)
            np.testing.assert_allclose(lower.sum(axis=1), 1.0, atol=1e-5)
            np.testing.assert_allclose(lower, ins.attention[layer, head].numpy(), atol=1e-6)


def test_scaled_scores_are_what_the_softmax_saw(llm):
    """Softmax over each row of the widget's scores gives inspect's probabilities: the scores use the
    right queries, the right (grouped) keys and the 1/sqrt(d) scale."""
    ins = llm.inspect(TEXT)
    view = layer_view(ins, 13)
    assert view.kv_group == llm.config.num_heads // llm.config.num_kv_heads == 3
    for head in range(llm.config.num_heads):
        scores = torch.tensor(matrix(cells(view, head, "scores"), len(ins.tokens), "value"))
        probs = torch.softmax(scores.nan_to_num(float("-inf")), dim=-1)
        torch.testing.assert_close(probs, ins.attention[13, head].double(), atol=1e-5, rtol=1e-5)
    # Heads of one GQA group share keys: head 1's scores with head 0's query would differ from head 0's.
    assert not np.allclose(np.nan_to_num(view.scores[0]), np.nan_to_num(view.scores[1]))


def test_saved_view_round_trips():
    rng = np.random.default_rng(0)
    probs = np.tril(rng.random((2, 4, 4)))
    scores = np.where(np.tri(4, dtype=bool), rng.normal(size=(2, 4, 4)), np.nan)
    view = LayerView(list("abcd"), 3, probs, scores, 2)
    back = LayerView.from_json(view.to_json())
    np.testing.assert_allclose(back.probs, probs)
    np.testing.assert_allclose(back.scores, scores)
    assert back.tokens == view.tokens and back.layer == 3 and back.kv_group == 2


def test_kv_bytes_per_token_for_mha_gqa_mqa_are_the_configs_arithmetic(llm):
    rows = {r["name"]: r for r in kv_bytes_rows(llm.config, 9)}
    assert rows["GQA"]["per_token"] == llm.config.kv_bytes_per_token(2) == 23_040
    assert rows["MHA"]["per_token"] == 69_120 and rows["MQA"]["per_token"] == 7_680
    assert rows["GQA"]["model"] and not rows["MHA"]["model"]
    assert rows["MHA"]["sentence"] == 9 * 69_120


def test_strip_shades_the_hovered_rows_weights_and_escapes(llm):
    ins, _, _ = inspection(llm, "Hi " + XSS)
    view = layer_view(ins, 13)
    last = view.num_tokens - 1
    html = strip_html(view, 8, 2)
    assert "<img" not in html and "␣&lt;" in html and ")&gt;" in html        # the pieces, as text
    assert html.count("as-masked") == last - 2                  # tokens after the query are masked
    best = int(np.argmax(view.probs[8, 2, :3]))
    assert f"weight {view.probs[8, 2, best]:.3f}" in html


def test_saved_example_is_fresh(llm):
    assert_example_fresh("attention-heatmap", llm)


def _live_widget(llm, **args) -> AttentionHeatmap:
    handle = FakeHandle(EngineStatus.LOADING, _llm=llm)
    w = AttentionHeatmap(handle, **args)
    assert 'data-state="loading"' in w.gate.pane.object and w._heat.source.data["x"]    # saved example painted
    handle.status = EngineStatus.READY
    w.gate.check()
    assert w.jobs.wait_idle(60)
    return w


def test_widget_follows_text_layer_head_mode_and_row(llm):
    w = _live_widget(llm, setup="heads")
    ins = llm.inspect(TEXT)
    T = len(ins.tokens)
    assert w._query.value == T - 1 and "‘␣keys’ 0.77" in w._strip.object     # layer 14, head 8: are → keys
    assert w._layer.value == 14 and "Layer 14, head 8" in w._caption.object   # named 1-30, as chapter 4 says
    for h, src in enumerate(w._grid.sources):                                 # small multiples: all 9 heads
        np.testing.assert_allclose(np.nan_to_num(matrix(src.data, T, "prob")), ins.attention[13, h].numpy(), atol=1e-6)
    w._layer.value = 3                                     # the third layer: the engine's index 2
    assert w.jobs.wait_idle(60)
    w._head.value = 4
    w._mode.value = "scaled scores q·k/√d"
    data = w._heat.source.data
    np.testing.assert_allclose(np.nan_to_num(matrix(data, T, "prob")), ins.attention[2, 4].numpy(), atol=1e-6)
    assert data["value"] == data["score"] and "scaled scores" in w._caption.object and "Layer 3," in w._caption.object
    assert w._heat.mapper.low == min(data["score"]) and w._heat.mapper.high == max(data["score"])
    w._heat.row_source.data = {"row": [3]}                 # what the browser sends when a row is hovered
    assert w._query.value == 3 and "(token 3, head 4)" in w._strip.object
    w._box.value = " ".join(["word"] * 100)
    assert w.jobs.wait_idle(60)
    assert w._view.num_tokens == MAX_TOKENS and "only the first 64" in w.notes.object
    w._box.value = "   "
    assert w.jobs.wait_idle(60)
    assert 'data-state="error"' in w.gate.pane.object and "empty" in w.gate.pane.object


def test_unknown_setup_is_refused():
    with pytest.raises(ValueError, match="setup"):
        AttentionHeatmap(FakeHandle(EngineStatus.LOADING), setup="nope")
