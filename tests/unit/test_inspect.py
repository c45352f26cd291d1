"""inspect(): the intermediates it reports are the ones the forward pass really computes."""
from __future__ import annotations

import torch

from engine.model import ContiguousKV


def test_inspection_is_consistent_with_the_forward_pass(llm):
    text = "The cat sat on the mat because it was warm"
    ins = llm.inspect(text)
    T, c = len(ins.token_ids), llm.config
    assert ins.hidden_states.shape == (c.num_layers + 1, T, c.hidden_size)
    assert ins.attention.shape == (c.num_layers, c.num_heads, T, T)
    assert ins.q.shape == (c.num_layers, T, c.num_heads, c.head_dim)
    assert ins.k.shape == ins.v.shape == (c.num_layers, T, c.num_kv_heads, c.head_dim)
    assert ins.mlp_activations.shape == (c.num_layers, T, c.intermediate_size)
    # attention rows are probability distributions over the past only
    assert torch.allclose(ins.attention.sum(-1), torch.ones(c.num_layers, c.num_heads, T), atol=1e-5)
    assert torch.all(ins.attention.triu(diagonal=1) == 0)
    # the logits are those of a plain forward pass, and the embeddings those of the table
    with torch.inference_mode():
        ids = torch.tensor(ins.token_ids)
        logits = llm.model.compute_logits(llm.model(ids, torch.arange(T), ContiguousKV(c.num_layers)))
        embeddings = llm.model.embed.weight[ids].float()
    assert torch.allclose(ins.logits, logits, atol=1e-4)
    assert torch.allclose(ins.hidden_states[0], embeddings)
    assert "".join(ins.tokens) == text
