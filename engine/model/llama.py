"""The Llama forward pass, top to bottom (SmolLM2 is a small Llama).

    token ids ──► embed ──► [ TransformerBlock ] x num_layers ──► RMSNorm ──► LM head ──► logits
                              │
                              ├─ h = x + Attention(RMSNorm(x))      queries see keys/values of earlier tokens
                              └─ out = h + MLP(RMSNorm(h))          SwiGLU, each token on its own

The code computes exactly that, but carries the residual stream `h` beside the branch outputs so each
skip-connection add happens inside the RMSNorm that follows it (one kernel, `kernels.rms_norm`):

    block i gets (x, residual):   a, residual = rms_norm(x, w_attn, residual)    residual += x; a = norm
                                  x = attention(a)
                                  m, residual = rms_norm(x, w_ffn, residual)     residual += x; m = norm
                                  x = mlp(m)                                     out = x + residual
    after the last block:         hidden, _ = rms_norm(x, w_final, residual)

The small ops (RMSNorm with its add, RoPE on q and k, SwiGLU's silu(gate) * up) go through `kernels`:
one Triton launch each on a GPU, and on the CPU PyTorch references that do this file's arithmetic
operation for operation (kernels/reference_small_ops.py), so CPU results are bit for bit what the
unfused formula gives. Projections stay separate matmuls (wq, wk, wv; w1, w3): docs/ARCHITECTURE.md
says why.

Where keys and values are *kept* is not the model's business: every attention layer hands its
q, k, v (RoPE already applied) to an `AttentionBackend`, which stores k/v wherever its cache
lives and returns the attention output. The reference backend in this file keeps one contiguous
tensor per sequence; the paged engine passes a backend that writes into KV-cache blocks.
"""
from __future__ import annotations

import math
from typing import Protocol

import torch
from torch import nn

import kernels

from ..config import ModelConfig


class AttentionBackend(Protocol):
    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, num_heads, head_dim]; k, v: [T, num_kv_heads, head_dim] -> [T, num_heads, head_dim]."""
        ...


class RMSNorm(nn.Module):
    """Scale each vector to unit root-mean-square, then by a learned per-channel weight.

    The mean of squares is taken in float32 even for bf16 weights. `norm(x)` is the textbook norm (the
    widgets call it); the model calls `add_norm`, which does the skip connection's add first, in the
    same kernel: returns (RMSNorm(x + residual), x + residual)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.rms_norm(x, self.weight, self.eps)[0]

    def add_norm(self, x: torch.Tensor, residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        return kernels.rms_norm(x, self.weight, self.eps, residual)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotation angles for each position: pair i of a head turns by position * theta^(-2i/head_dim)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device).float() / head_dim))
    angles = positions.float()[:, None] * inv_freq[None, :]          # [T, head_dim/2]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each (x[i], x[i + head_dim/2]) pair of every head; x: [T, heads, head_dim].

    One tensor at a time, for the widgets; the model rotates q and k together with kernels.rope (the
    reference rotates a pair, so x goes in as both and one comes back)."""
    return kernels.rope_reference(x, x, cos, sin)[0]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.hidden_size, cfg.num_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=False)

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        T = x.shape[0]
        q = self.wq(x).view(T, self.num_heads, self.head_dim)
        k = self.wk(x).view(T, self.num_kv_heads, self.head_dim)
        v = self.wv(x).view(T, self.num_kv_heads, self.head_dim)
        q, k = kernels.rope(q, k, cos, sin)                            # both rotated in one launch
        return q, k, v

    def forward(self, layer: int, x, cos, sin, attn: AttentionBackend) -> torch.Tensor:
        q, k, v = self.qkv(x, cos, sin)
        out = attn(layer, q, k, v)                                    # [T, num_heads, head_dim]
        return self.wo(out.reshape(x.shape[0], -1))


class MLP(nn.Module):
    """SwiGLU: w2( silu(w1 x) * w3 x ). w1 is the gate, w3 the up projection, w2 the down projection."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.w3 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.w2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(kernels.swiglu(self.w1(x), self.w3(x)))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, layer: int, x, residual, cos, sin, attn: AttentionBackend) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, residual) -> (mlp_out, residual): the block's output is mlp_out + residual, added by the
        next RMSNorm. The first block gets residual=None: the stream starts at the embeddings."""
        a, residual = self.attention_norm.add_norm(x, residual)               # residual = x + residual
        x = self.attention(layer, a, cos, sin, attn)
        m, residual = self.ffn_norm.add_norm(x, residual)                     # residual around attention
        return self.mlp(m), residual                                   # (the add around the MLP: next norm)


class Llama(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Tied embeddings: the LM head reuses the embedding matrix, so "which token is this vector?"
        # and "which vector is this token?" are answered by the same numbers.
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionBackend,
                hidden: torch.Tensor | None = None, layers: range | None = None,
                num_layers: int | None = None) -> torch.Tensor:
        """input_ids, positions: [T] (the tokens of every scheduled sequence, concatenated) -> hidden [T, hidden].

        A pipeline stage runs only its `layers`, starting from the `hidden` state the previous stage
        sent (the first stage embeds input_ids); only the stage with the last layer applies the norm.
        num_layers: stop after the first few layers and apply the final norm there (an early-exit draft,
        engine/spec_decode/early_exit.py)."""
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta)
        x, residual = self.embed(input_ids) if hidden is None else hidden, None
        if layers is None:
            layers = range(len(self.layers) if num_layers is None else num_layers)
        for i in layers:
            x, residual = self.layers[i](i, x, residual, cos, sin, attn)
        if layers.stop == len(self.layers) or num_layers is not None:
            return self.norm.add_norm(x, residual)[0]
        # A stage that hands on: its last block's whole output, (out + residual), the add the next
        # stage's first norm would have done (the same add, so the numbers are the same).
        return x if residual is None else x + residual

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return (hidden @ weight.T).float()

    @classmethod
    def random(cls, cfg: ModelConfig, seed: int = 0, device: torch.device | str | None = None,
               dtype: torch.dtype | None = None) -> "Llama":
        """Same shapes as the real model, random values (std 0.02): for speed tests, not for text.

        By default drawn on the CPU in float32 (the same numbers for a seed on every machine). With a
        device, the parameters are allocated there in `dtype` and drawn by that device's generator: the
        same distribution, other numbers, and no float32 copy of a large model on the CPU."""
        device = torch.device(device or "cpu")
        if device.type == "cpu" and dtype in (None, torch.float32):
            gen = torch.Generator().manual_seed(seed)
            model = cls(cfg)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith("norm.weight"):
                        p.fill_(1.0)
                    else:
                        p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            return model
        with torch.device("meta"):
            model = cls(cfg)
        model = model.to(dtype=dtype or torch.float32).to_empty(device=device)
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02, generator=gen)
        return model


class ContiguousKV:
    """The reference backend: one sequence, K/V appended to a growing tensor per layer (no paging).

    Queries are the newest tokens; each attends to every cached token up to and including itself.
    """

    def __init__(self, num_layers: int):
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers

    def __len__(self) -> int:
        return 0 if self.k[0] is None else self.k[0].shape[0]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat([self.k[layer], k])
            self.v[layer] = torch.cat([self.v[layer], v])
        return causal_attention(q, self.k[layer], self.v[layer])


def causal_attention_probs(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) for one sequence whose T queries are its last T positions: [heads, T, S].

    With grouped-query attention each KV head serves num_heads / num_kv_heads query heads.
    """
    T, S, group = q.shape[0], k.shape[0], q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    scores = torch.einsum("thd,shd->hts", q.float(), k.float()) / math.sqrt(q.shape[-1])
    query_pos = torch.arange(S - T, S, device=q.device)[:, None]
    key_pos = torch.arange(S, device=q.device)[None, :]
    scores = scores.masked_fill(key_pos > query_pos, float("-inf"))  # no looking at the future
    return torch.softmax(scores, dim=-1)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The attention output: each query's probability-weighted mix of the values, [T, heads, head_dim]."""
    probs = causal_attention_probs(q, k)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    return torch.einsum("hts,shd->thd", probs, v.float()).to(q.dtype)
