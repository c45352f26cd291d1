"""inspect(): the intermediates it reports are the ones the forward pass really computes."""
from __future__ import annotations

import torch

from engine.model.llama import ContiguousKV


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


def test_each_hidden_state_is_the_unfused_blocks_output():
    """The model carries the residual beside each block's output (the next RMSNorm adds them); inspect
    reports their sum, which must be exactly the textbook block's output h + mlp(norm(h))."""
    import torch.nn.functional as F

    from engine.introspect import inspect
    from engine.loader.tokenizer import byte_tokenizer
    from engine.model.llama import Llama, rope_cos_sin
    from tiny import TINY
    from unfused_llama import _norm, _rope

    model, tok = Llama.random(TINY, seed=3).eval(), byte_tokenizer()
    ins = inspect(model, tok, "hello, paged world")
    T = len(ins.token_ids)
    cos, sin = rope_cos_sin(torch.arange(T), TINY.head_dim, TINY.rope_theta)
    with torch.inference_mode():
        x = model.embed(torch.tensor(ins.token_ids))
        for i, block in enumerate(model.layers):
            kv, a = ContiguousKV(1), block.attention
            n = _norm(x, block.attention_norm)
            q = _rope(a.wq(n).view(T, a.num_heads, a.head_dim), cos, sin)
            k = _rope(a.wk(n).view(T, a.num_kv_heads, a.head_dim), cos, sin)
            h = x + a.wo(kv(0, q, k, a.wv(n).view(T, a.num_kv_heads, a.head_dim)).reshape(T, -1))
            m = _norm(h, block.ffn_norm)
            x = h + block.mlp.w2(F.silu(block.mlp.w1(m)) * block.mlp.w3(m))
            assert torch.equal(ins.hidden_states[i + 1], x.float()), i


def test_forward_passes_on_other_threads_do_not_leak_into_an_inspection(llm):
    """The engine loop and widgets' private engines share the model: a forward pass on another thread
    while inspect()'s hooks are in place must not add its activations to the inspection."""
    import threading

    text = "Paged attention keeps the KV cache in blocks"
    alone = llm.inspect(text)
    other_ids = torch.tensor(llm.tokenizer.encode("An unrelated sentence on another thread").ids)

    def other_forward():
        with torch.inference_mode():
            n = len(other_ids)
            llm.model(other_ids, torch.arange(n), ContiguousKV(llm.config.num_layers))

    main_thread = threading.get_ident()

    def run_other_thread(module, args):     # in the middle of inspect's pass: a whole pass elsewhere
        if threading.get_ident() != main_thread:
            return                          # the other thread's own pass goes through this hook too
        t = threading.Thread(target=other_forward)
        t.start()
        t.join(timeout=120)
        assert not t.is_alive(), "the other thread's forward pass did not finish"

    hook = llm.model.layers[3].register_forward_pre_hook(run_other_thread)
    try:
        shared = llm.inspect(text)
    finally:
        hook.remove()
    assert shared.hidden_states.shape == alone.hidden_states.shape
    assert shared.mlp_activations.shape == alone.mlp_activations.shape
    assert torch.equal(shared.hidden_states, alone.hidden_states)
    assert torch.equal(shared.mlp_activations, alone.mlp_activations)
