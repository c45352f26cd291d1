"""The forward-pass widget (chapters 8–9) against the model: the block's stages rebuild the model's own
residual stream, every shape is the config's, the logit lens ends at the model's logits, the saved
example is fresh, and the widget steps, follows tokens and keeps reader text as text."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("panel")
import param  # noqa: E402

from engine import SamplingParams  # noqa: E402
from widgets.common.testing import LoadedEngine, assert_example_fresh  # noqa: E402
from widgets.forward_pass.compute import block_stages, lens_logits, logit_lens, residual_norms  # noqa: E402
from widgets.forward_pass.widget import ForwardPassWidget  # noqa: E402

TEXT = "The capital of France is"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def ins(llm, one_torch_thread):
    return llm.inspect(TEXT)


@pytest.mark.parametrize("layer", [0, 13, 29])
def test_the_stages_rebuild_the_models_own_stream(llm, ins, layer):
    n = len(ins.token_ids)
    for token in (0, n - 1):
        stages = {s.key: torch.tensor(s.vector) for s in block_stages(llm, ins, layer, token)}
        x = ins.hidden_states[layer, token]
        assert torch.equal(stages["x"], x)
        # RMSNorm by its formula, with the model's learned weights
        g = llm.model.layers[layer].attention_norm.weight.float()
        assert torch.allclose(stages["norm1"], x / x.pow(2).mean().add(1e-5).sqrt() * g, atol=1e-4)
        # the two residual adds, and the block's output is what the model fed the next block
        assert torch.allclose(stages["add1"], x + stages["attention"], atol=1e-4)
        assert torch.allclose(stages["add2"], stages["add1"] + stages["mlp"], atol=1e-4)
        assert torch.allclose(stages["add2"], ins.hidden_states[layer + 1, token], atol=1e-3)


def test_every_shape_is_the_models_config(llm, ins):
    c, n = llm.config, len(ins.token_ids)
    stages = block_stages(llm, ins, 4, n - 1)
    shapes = {s.key: dict(s.shapes) for s in stages}
    assert [s.key for s in stages] == ["x", "norm1", "attention", "add1", "norm2", "mlp", "add2"]
    for key in ("x", "norm1", "add1", "norm2", "add2"):
        assert list(shapes[key].values()) == [[n, c.hidden_size]]
    assert shapes["attention"] == {"q": [n, c.num_heads, c.head_dim], "k": [n, c.num_kv_heads, c.head_dim],
                                   "v": [n, c.num_kv_heads, c.head_dim], "probabilities": [c.num_heads, n, n],
                                   "output": [n, c.hidden_size]}
    assert list(shapes["mlp"].values()) == [[n, c.intermediate_size]] * 3 + [[n, c.hidden_size]]
    # ...and the shapes are the tensors' own: inspect's tensors have them
    assert list(ins.q.shape[1:]) == shapes["attention"]["q"] and list(ins.v.shape[1:]) == shapes["attention"]["v"]
    assert list(ins.mlp_activations.shape[1:]) == shapes["mlp"]["silu(gate) ⊙ up"]
    assert all(len(s.vector) == c.hidden_size for s in stages)


def test_the_logit_lens_ends_at_the_models_logits(llm, ins):
    n = len(ins.token_ids)
    for token in (1, n - 1):
        lens = lens_logits(ins, token)
        assert lens.shape == (llm.config.num_layers + 1, llm.config.vocab_size)
        assert torch.allclose(lens[-1], ins.logits[token], atol=1e-4)
    rows = logit_lens(ins, n - 1)
    assert rows[-1].answer_rank == 1 and rows[-1].top[0][0] == int(ins.logits[-1].argmax())
    # the lens's last row is what the serving engine writes: its greedy first token
    out = llm.generate(TEXT, SamplingParams(temperature=0.0, max_tokens=1))[0].outputs[0]
    assert out.token_ids[0] == rows[-1].top[0][0] and llm.tokenizer.decode(out.token_ids) == " Paris"
    # layer 0 is the embedding itself: with tied weights a token's own row scores highest
    assert rows[0].top[0][0] == ins.token_ids[-1]


def test_residual_norms_start_at_the_embedding_rows(llm, ins):
    norms = torch.tensor(residual_norms(ins))
    assert norms.shape == (llm.config.num_layers + 1, len(ins.token_ids))
    assert torch.allclose(norms[0], llm.embedding_table()[ins.token_ids].float().norm(dim=-1), atol=1e-4)


def test_saved_example_is_fresh(llm, one_torch_thread):
    assert_example_fresh("forward-pass", llm, ranks={"answer_rank"})


def test_an_invisible_token_is_shown_with_a_mark_not_an_escape():
    """Block 1's second guess for "The capital of France is" is token 15442, a no-break space: chapter 9
    printed it as Python's "\\xa0" (and the table as a blank). It must read as a visible mark."""
    from widgets.common.examples import load_example
    from widgets.forward_pass.view import layer_html, lens_table_html

    d = load_example("forward-pass").data
    assert any(text == "\xa0" for _i, text, _p in d["lens"][1]["top"])       # the case the review found
    html = layer_html(d, 1, "x") + lens_table_html(d, 1)
    assert "&#92;x" not in html and "\\x" not in html and "\xa0" not in html
    assert "⍽" in html and 'title="⍽ = no-break space (U+00A0)"' in html    # the mark is named on hover


# -- the widget, without a browser ----------------------------------------------------------------
def settle(w: ForwardPassWidget) -> None:
    assert w.jobs.wait_idle(120)


def test_block_view_steps_follows_tokens_and_escapes(llm, one_torch_thread):
    w = ForwardPassWidget(LoadedEngine(llm), view="block", text=TEXT)
    settle(w)
    assert w.gate.state == "live" and len(w._token.options) == 5 and w._token.value == 4
    assert "Input" in w._detail.object and "[5, 576]" in w._detail.object
    w._stepper.value = 2
    assert "Step 2 of 6" in w._detail.object and "[5, 9, 64]" in w._detail.object
    assert len(w._strip_src.data["value"]) == 576
    with param.edit_constant(w._block):                             # the slider let go at block 15
        w._block.param.update(value=15, value_throttled=15)
    settle(w)
    assert "in block 15" in w._detail.object and w._norms_mark.location == 15
    w._token.value = 1
    settle(w)
    assert w._data["token"] == 1 and "“␣capital”" in w._detail.object
    w._box.param.update(value=XSS + " is", value_input=XSS + " is")   # both in one message, as a browser may
    settle(w)
    assert w._token.value == len(w._token.options) - 1          # a new text follows its last token
    w._token.value = 0                                          # the token "<": shown as text
    settle(w)
    assert "token 0 “&lt;”" in w._detail.object and "<img" not in w._detail.object


def test_model_view_steps_through_the_layers(llm, one_torch_thread):
    w = ForwardPassWidget(LoadedEngine(llm), view="model", text=TEXT)
    settle(w)
    assert 'data-layer="30"' in w._detail.object and "real prediction" in w._detail.object
    assert "␣Paris" in w._detail.object and w._table.object.count("<tr") == 32     # header + 31 layers
    w._stepper.value = 0
    assert "embedding" in w._detail.object and '<tr class="on"><th scope="row">emb' in w._table.object
    assert w._answer_src.data["p"][-1] == pytest.approx(w._data["lens"][-1]["answer_p"])
    with pytest.raises(ValueError):
        ForwardPassWidget(LoadedEngine(llm), view="sideways")


def test_a_block_chosen_while_a_new_sentence_waits_still_gets_the_new_sentence(llm, one_torch_thread):
    w = ForwardPassWidget(LoadedEngine(llm), view="block", text=TEXT)
    settle(w)
    w._box.value = "My favourite colour is"      # debounced: its job is still waiting...
    with param.edit_constant(w._block):          # ...when the slider's job replaces it
        w._block.param.update(value=7, value_throttled=7)
    settle(w)
    assert w._data["text"] == "My favourite colour is" and w._data["block"] == 7
    assert "␣colour" in "".join(w._token.options) and "in block 7" in w._detail.object
