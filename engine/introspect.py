"""Look inside one forward pass: every intermediate the chapters talk about, for the widgets.

Runs the reference path (contiguous KV, float math) over one text and keeps, per layer, the hidden
state entering it, q/k/v after RoPE, the attention probabilities, and the MLP's gated activations.
Hooks observe the ordinary forward pass, so what you see is exactly what generation computes.
The model is shared: the engine loop (and widgets' private engines) may run forward passes on other
threads while the hooks are in place, so each hook records only on the thread that called inspect().
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from .model.llama import ContiguousKV, Llama, causal_attention_probs
from .loader.tokenizer import TextTokenizer


@dataclass(slots=True)
class Inspection:
    tokens: list[str]              # each token's text, for labels
    token_ids: list[int]
    hidden_states: torch.Tensor    # [layers + 1, T, hidden]: the embeddings, then each block's output
    q: torch.Tensor                # [layers, T, heads, head_dim], RoPE applied
    k: torch.Tensor                # [layers, T, kv_heads, head_dim], RoPE applied
    v: torch.Tensor                # [layers, T, kv_heads, head_dim]
    attention: torch.Tensor        # [layers, heads, T, T]: row i = how query token i spreads its attention
    mlp_activations: torch.Tensor  # [layers, T, intermediate]: silu(w1 x) * w3 x, the input of w2
    logits: torch.Tensor           # [T, vocab]: row i predicts token i + 1


class _RecordingKV(ContiguousKV):
    def __init__(self, num_layers: int):
        super().__init__(num_layers)
        self.q, self.probs = [None] * num_layers, [None] * num_layers

    def __call__(self, layer, q, k, v):
        out = super().__call__(layer, q, k, v)
        self.q[layer], self.probs[layer] = q, causal_attention_probs(q, self.k[layer])
        return out


@torch.inference_mode()
def inspect(model: Llama, tokenizer: TextTokenizer, text: str, max_tokens: int = 256) -> Inspection:
    ids = tokenizer.encode(text).ids[:max_tokens]
    if not ids:
        raise ValueError("nothing to inspect: the text has no tokens")
    device = model.embed.weight.device
    kv = _RecordingKV(model.config.num_layers)
    hidden, acts = [], []
    me = threading.get_ident()

    def ours(record):          # a hook that ignores forward passes running on other threads
        return lambda *args: record(*args) if threading.get_ident() == me else None

    hooks = [model.embed.register_forward_hook(ours(lambda m, i, o: hidden.append(o.float().cpu())))]
    for block in model.layers:
        # A block returns (mlp_out, residual): its output, the next block's input, is their sum (which
        # the next RMSNorm adds, in the model's dtype, exactly as here).
        hooks.append(block.register_forward_hook(ours(lambda m, i, o: hidden.append((o[0] + o[1]).float().cpu()))))
        hooks.append(block.mlp.w2.register_forward_pre_hook(ours(lambda m, i: acts.append(i[0].float().cpu()))))
    try:
        out = model(torch.tensor(ids, device=device), torch.arange(len(ids), device=device), kv)
        logits = model.compute_logits(out).cpu()
    finally:
        for h in hooks:
            h.remove()
    stack = lambda xs: torch.stack([x.float().cpu() for x in xs])  # noqa: E731
    return Inspection(
        tokens=[tokenizer.decode([i]) for i in ids], token_ids=ids, hidden_states=torch.stack(hidden),
        q=stack(kv.q), k=stack(kv.k), v=stack(kv.v), attention=stack(kv.probs),
        mlp_activations=torch.stack(acts), logits=logits,
    )
