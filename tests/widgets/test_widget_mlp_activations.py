"""The MLP widget against the model: products are `inspect`'s activations, gate and up are what the
layer really computed (caught with a hook on the MLP), SiLU(gate) × up gives the product back, the
neuron profile is inspect's column, and the widget follows layer, token and neuron."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("panel")

from widgets.common.handle import EngineStatus  # noqa: E402
from tests.helpers.fakes import FakeHandle  # noqa: E402
from widgets.common.testing import assert_example_fresh  # noqa: E402
from widgets.common.cache import inspection  # noqa: E402
from widgets.mlp_activations.compute import compute, neuron_profile, strongest_tokens, swiglu_path  # noqa: E402
from widgets.mlp_activations.widget import MLPActivations  # noqa: E402

TEXT = "In 1989, 3 of the 12 jurors voted 7 to 5."


def test_swiglu_path_is_what_the_layer_computed(llm):
    layer = 11
    seen = {}
    mlp = llm.model.layers[layer].mlp
    hook = mlp.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0].detach().clone()))
    try:
        ins = llm.inspect(TEXT)                # the hook sees the real input of this MLP
    finally:
        hook.remove()
    with torch.inference_mode():
        gate, up = mlp.w1(seen["x"]), mlp.w3(seen["x"])
    for token in (0, 5, len(ins.tokens) - 1):
        path = swiglu_path(ins, layer, token)
        np.testing.assert_array_equal(path.product, ins.mlp_activations[layer, token].numpy())
        np.testing.assert_allclose(path.gate, gate[token].numpy(), atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(path.up, up[token].numpy(), atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(path.silu, F.silu(torch.tensor(path.gate)).numpy(), atol=1e-6)
        np.testing.assert_allclose(path.silu * path.up, path.product, atol=2e-4, rtol=1e-3)
        top = path.top(10)
        assert abs(path.product[top[0]]) == np.abs(path.product).max()
        assert all(abs(path.product[a]) >= abs(path.product[b]) for a, b in zip(top, top[1:]))


def test_neuron_profile_is_inspects_column_and_its_strongest_tokens(llm):
    ins, _, _ = inspection(llm, TEXT)
    prof = neuron_profile(ins, 20, 816)
    np.testing.assert_array_equal(prof, ins.mlp_activations[20, :, 816].numpy())
    best = strongest_tokens(prof, 3)
    assert abs(prof[best[0]]) == np.abs(prof).max() and len(set(best)) == 3


def test_compute_defaults_to_the_last_token_and_its_strongest_neuron(llm):
    d, note, took = compute(llm, TEXT, 20, None, None)
    ins, _, _ = inspection(llm, TEXT)
    assert d["token"] == len(ins.tokens) - 1 and note is None and took > 0
    assert d["neuron"] == d["top"][0]
    np.testing.assert_allclose(d["product"], ins.mlp_activations[20, -1].numpy())
    np.testing.assert_allclose(d["profile"], ins.mlp_activations[20, :, d["neuron"]].numpy())
    d2, _, _ = compute(llm, TEXT, 3, 99, 1535)                     # out-of-range token: clamped
    assert d2["token"] == len(ins.tokens) - 1 and d2["neuron"] == 1535


def test_saved_example_is_fresh(llm):
    assert_example_fresh("mlp-activations", llm)


def test_widget_follows_layer_token_and_neuron(llm):
    handle = FakeHandle(EngineStatus.LOADING, _llm=llm)
    w = MLPActivations(handle)
    assert w._plots.neurons.data["neuron"] and w._layer.disabled           # saved example, controls wait
    handle.status = EngineStatus.READY
    w.gate.check()
    assert w.jobs.wait_idle(60) and not w._layer.disabled
    w._box.value = TEXT
    assert w.jobs.wait_idle(60)
    ins, _, _ = inspection(llm, TEXT)
    w._layer.value = 15                                                     # named 1-30: the engine's index 14
    assert w.jobs.wait_idle(60)
    w._token.value = 3                                                      # the token "9"
    assert w.jobs.wait_idle(60)
    assert "‘<b>9</b>’ in layer 15" in w._flow.object
    np.testing.assert_allclose(w._plots.neurons.data["product"], ins.mlp_activations[14, 3].numpy(), atol=1e-6)
    w._pick_neuron(42)                                                      # what tapping a dot does
    assert w.jobs.wait_idle(60)
    assert w._neuron.value == 42 and "Neuron <b>42</b> of layer 15" in w._profile_text.object
    np.testing.assert_allclose(w._plots.bars.data["top"], ins.mlp_activations[14, :, 42].numpy(), atol=1e-6)
    w._pick_token(0)                                                        # tapping a bar
    assert w.jobs.wait_idle(60)
    assert "‘<b>In</b>’ in layer 15" in w._flow.object
    w._box.value = "a <b>bold</b> claim"
    assert w.jobs.wait_idle(60)
    shown = w._profile_text.object + w._flow.object                        # the sentence's < and > come escaped
    assert "<b>bold" not in shown and ("&lt;" in shown or "&gt;" in shown)


def test_both_plots_keep_a_border_at_their_left_edge():
    """ux review ch. 7: stray marks clipped at the left edge of both plots."""
    from widgets.common.theme import MIN_BORDER
    w = MLPActivations(FakeHandle(EngineStatus.LOADING))
    assert w._plots.neurons.data["neuron"]                                  # drawn: the saved example
    for fig in (w._plots.scatter, w._plots.profile):
        assert fig.min_border_left >= MIN_BORDER and fig.min_border_right >= MIN_BORDER
