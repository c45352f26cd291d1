"""Look inside one forward pass: every intermediate the chapters talk about, for the widgets.

Runs the reference path (contiguous KV, float math) over one text and keeps, per layer, each stage of
the block as the model computed it:

    x ─► RMSNorm ─► attention ─► (+) ─► RMSNorm ─► w1 (gate), w3 (up) ─► silu(gate)·up ─► w2 ─► (+) ─► next x
    hidden_states  attention_in  attention_out  mid_states  mlp_in  gate, up  mlp_activations  mlp_out
                   q, k, v, attention (the probabilities)

and, for the logit lens, ``logit_lens(position)``: the final RMSNorm and the LM head applied to the
stream after each layer. Hooks observe the ordinary forward pass, so what you see is exactly what
generation computes; a widget reads these records instead of running the model's layers itself.
Everything is float32 on the CPU: about 1.1 MB a token (a 64-token pass holds ~70 MB, most of it the
MLP's three [T, 1536] records per layer). The logits ([T, 49152], another 0.2 MB a token and a fifth of
the pass's arithmetic) are computed the first time they are read: the attention heatmap never reads them.
The model is shared: the engine loop (and widgets' private engines) may run forward passes on other
threads while the hooks are in place, so each hook records only on the thread that called inspect().
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

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
    attention_in: torch.Tensor     # [layers, T, hidden]: RMSNorm(x), what attention reads
    attention_out: torch.Tensor    # [layers, T, hidden]: wo · (the heads' mixed values), what attention adds
    mid_states: torch.Tensor       # [layers, T, hidden]: h = x + attention_out, the stream between the two adds
    mlp_in: torch.Tensor           # [layers, T, hidden]: RMSNorm(h), what the MLP reads
    gate: torch.Tensor             # [layers, T, intermediate]: w1 · mlp_in, before SiLU
    up: torch.Tensor               # [layers, T, intermediate]: w3 · mlp_in
    mlp_activations: torch.Tensor  # [layers, T, intermediate]: silu(gate) * up, the input of w2
    mlp_out: torch.Tensor          # [layers, T, hidden]: w2 · mlp_activations, what the MLP adds (h + it = next x)
    _model: Llama = field(repr=False, compare=False)  # for logit_lens: the final norm and the LM head
    _logits: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def logits(self) -> torch.Tensor:
        """[T, vocab]: row i predicts token i + 1 (the final RMSNorm and the LM head on the last hidden
        state, exactly as the forward pass computes them; once, on first read)."""
        if self._logits is None:
            with torch.inference_mode():
                w = self._model.embed.weight
                out = self._model.norm(self.hidden_states[-1].to(w.device, w.dtype))
                self._logits = self._model.compute_logits(out).float().cpu()
        return self._logits

    @torch.inference_mode()
    def logit_lens(self, position: int) -> torch.Tensor:
        """[layers + 1, vocab]: the final RMSNorm and the LM head applied to the stream of ``position``
        after each layer (row 0: the embedding) — what the model would predict if it stopped there.
        The last row is the model's own logits for that position."""
        w = self._model.embed.weight
        stream = self.hidden_states[:, position].to(w.device, w.dtype)
        return self._model.compute_logits(self._model.norm(stream)).float().cpu()


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
    names = ("hidden", "attention_in", "attention_out", "mid", "mlp_in", "gate", "up", "acts", "mlp_out")
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    me = threading.get_ident()

    def ours(record):          # a hook that ignores forward passes running on other threads
        return lambda *args: record(*args) if threading.get_ident() == me else None

    def keep(name: str, tensor: torch.Tensor) -> None:
        seen[name].append(tensor.float().cpu())

    def block_out(m, i, o) -> None:      # (returning anything would replace the block's output)
        keep("mlp_out", o[0])
        keep("mid", o[1])
        keep("hidden", o[0] + o[1])

    hooks = [model.embed.register_forward_hook(ours(lambda m, i, o: keep("hidden", o)))]
    for block in model.layers:
        a, mlp = block.attention, block.mlp
        # Attention(layer, RMSNorm(x), cos, sin, backend) -> wo · heads: the norm is its second argument.
        hooks.append(a.register_forward_pre_hook(ours(lambda m, i: keep("attention_in", i[1]))))
        hooks.append(a.register_forward_hook(ours(lambda m, i, o: keep("attention_out", o))))
        hooks.append(mlp.register_forward_pre_hook(ours(lambda m, i: keep("mlp_in", i[0]))))
        hooks.append(mlp.w1.register_forward_hook(ours(lambda m, i, o: keep("gate", o))))
        hooks.append(mlp.w3.register_forward_hook(ours(lambda m, i, o: keep("up", o))))
        hooks.append(mlp.w2.register_forward_pre_hook(ours(lambda m, i: keep("acts", i[0]))))
        # A block returns (mlp_out, h): h = x + attention is the residual stream between its two adds, and
        # its output, the next block's input, is their sum (which the next RMSNorm adds, in the model's
        # dtype, exactly as here).
        hooks.append(block.register_forward_hook(ours(block_out)))
    try:
        model(torch.tensor(ids, device=device), torch.arange(len(ids), device=device), kv)
    finally:
        for h in hooks:
            h.remove()
    stack = lambda xs: torch.stack([x.float().cpu() for x in xs])  # noqa: E731
    rec = {name: torch.stack(xs) for name, xs in seen.items()}
    return Inspection(
        tokens=[tokenizer.decode([i]) for i in ids], token_ids=ids, hidden_states=rec["hidden"],
        q=stack(kv.q), k=stack(kv.k), v=stack(kv.v), attention=stack(kv.probs),
        attention_in=rec["attention_in"], attention_out=rec["attention_out"], mid_states=rec["mid"],
        mlp_in=rec["mlp_in"], gate=rec["gate"], up=rec["up"], mlp_activations=rec["acts"], mlp_out=rec["mlp_out"],
        _model=model,
    )
