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
    assert ins.gate.shape == ins.up.shape == ins.mlp_activations.shape
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
    from tests.helpers.tiny import TINY
    from tests.helpers.unfused_llama import _norm, _rope

    model, tok = Llama.random(TINY, seed=3).eval(), byte_tokenizer()
    ins = inspect(model, tok, "hello, paged world")
    T = len(ins.token_ids)
    cos, sin = rope_cos_sin(torch.arange(T), TINY.head_dim, TINY.rope_theta)
    with torch.inference_mode():
        x = model.embed(torch.tensor(ins.token_ids))
        for i, block in enumerate(model.layers):
            kv, a, mlp = ContiguousKV(1), block.attention, block.mlp
            n = _norm(x, block.attention_norm)
            q = _rope(a.wq(n).view(T, a.num_heads, a.head_dim), cos, sin)
            k = _rope(a.wk(n).view(T, a.num_kv_heads, a.head_dim), cos, sin)
            attn = a.wo(kv(0, q, k, a.wv(n).view(T, a.num_kv_heads, a.head_dim)).reshape(T, -1))
            h = x + attn
            m = _norm(h, block.ffn_norm)
            gate, up = mlp.w1(m), mlp.w3(m)
            acts = F.silu(gate) * up
            out = mlp.w2(acts)
            x = h + out
            # every stage inspect records is the textbook block's, bit for bit
            for name, want in (("attention_in", n), ("attention_out", attn), ("mid_states", h), ("mlp_in", m),
                               ("gate", gate), ("up", up), ("mlp_activations", acts), ("mlp_out", out)):
                assert torch.equal(getattr(ins, name)[i], want.float()), (i, name)
            assert torch.equal(ins.hidden_states[i + 1], x.float()), i
        logits = model.compute_logits(model.norm(x))
    assert torch.equal(ins.logits, logits) and torch.equal(ins.logit_lens(T - 1)[-1], logits[-1])


def test_the_recorded_stages_chain_into_the_next_hidden_state(llm):
    """On the real model, each layer's records compose: RMSNorm(x) is what attention read, x plus what
    attention added is h, RMSNorm(h) went through w1 and w3 to the gate and up values, silu(gate) × up
    through w2 plus the residual h is the next hidden state; and the logit lens ends at the logits."""
    import torch.nn.functional as F

    ins = llm.inspect("The capital of France is Paris, and the capital of Italy is Rome")
    T, c = len(ins.token_ids), llm.config
    for name in ("attention_in", "attention_out", "mid_states", "mlp_in", "mlp_out"):
        assert getattr(ins, name).shape == (c.num_layers, T, c.hidden_size), name
    assert ins.gate.shape == ins.up.shape == (c.num_layers, T, c.intermediate_size)

    def rms(x, weight):                     # the chapter's formula, in float64
        x = x.double()
        return x / x.pow(2).mean(-1, keepdim=True).add(c.rms_norm_eps).sqrt() * weight.double()

    with torch.inference_mode():
        for layer in (0, 13, 29):
            block = llm.model.layers[layer]
            x, h = ins.hidden_states[layer], ins.mid_states[layer]
            assert torch.allclose(ins.attention_in[layer].double(), rms(x, block.attention_norm.weight), atol=1e-4)
            assert torch.equal(h, x + ins.attention_out[layer])
            # attention's output is wo applied to the heads' probability-weighted values (GQA: 3 heads a KV head)
            v = ins.v[layer].repeat_interleave(c.num_heads // c.num_kv_heads, dim=1)
            mixed = torch.einsum("hts,shd->thd", ins.attention[layer], v).reshape(T, -1)
            assert torch.allclose(block.attention.wo(mixed), ins.attention_out[layer], atol=1e-4)
            assert torch.allclose(ins.mlp_in[layer].double(), rms(h, block.ffn_norm.weight), atol=1e-4)
            m = ins.mlp_in[layer]
            assert torch.equal(ins.gate[layer], block.mlp.w1(m)) and torch.equal(ins.up[layer], block.mlp.w3(m))
            assert torch.allclose(F.silu(ins.gate[layer]) * ins.up[layer], ins.mlp_activations[layer], atol=1e-5)
            down = block.mlp.w2(F.silu(ins.gate[layer]) * ins.up[layer])
            assert torch.allclose(down, ins.mlp_out[layer], atol=1e-4)
            assert torch.allclose(h + down, ins.hidden_states[layer + 1], atol=1e-3)
            assert torch.equal(h + ins.mlp_out[layer], ins.hidden_states[layer + 1])
    lens = ins.logit_lens(T - 1)
    assert lens.shape == (c.num_layers + 1, c.vocab_size)
    assert torch.allclose(lens[-1], ins.logits[-1], atol=1e-4)


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
    for name in ("mlp_activations", "attention_in", "attention_out", "mid_states", "mlp_in", "gate", "up", "mlp_out"):
        assert torch.equal(getattr(shared, name), getattr(alone, name)), name
