"""The numbers behind the RoPE widget (chapter 6), computed with the model's own rotation, `llm.rope`
(no Panel here: widget.py shows them with view.py).

One head's query and key are 64 numbers each, read as 32 pairs; the model pairs dimension i with
dimension i + 32 and turns pair i by (position × θ_i), θ_i = 100,000^(-2i/64):

    q = [q0 q1 … q31 | q32 q33 … q63]          pair 0 = (q0, q32): fastest, 1 radian per position
                                                 pair 31 = (q31, q63): slowest, ~1.4e-5 radian
    score(m, n) = rope(q, m) · rope(k, n) / √64  depends on m − n only

The content is real: the query of ‘␣is’ and the key of ‘␣France’ in "The capital of France is",
layer 14 (index 13), head 8 (the head chapter 4's heatmap opens on), with their rotation undone (turned back by
their own positions, which `llm.rope` does with a negative position).
"""
from __future__ import annotations

import math

import torch

from widgets.common.cache import cached, inspection

SOURCE = {"text": "The capital of France is", "query": 4, "key": 3, "layer": 13, "head": 8}
CURVE = 128                  # distances the score curve covers
SHIFTS = (100, 1000)         # "the same distance elsewhere": both positions moved by these


def content(llm) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """(q, k, speeds): the unrotated query and key [1, 1, 64] and each pair's turn per position,
    read off the model's rope function (computed once per server)."""
    return cached(llm, "rope-content", (), lambda: _read_content(llm))


def _read_content(llm) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    # Chapter 4's sentence: its pass is shared with the widgets that inspect it (the heatmap opens on it).
    s = SOURCE
    ins, _, _ = inspection(llm, s["text"])
    group = llm.config.num_heads // llm.config.num_kv_heads
    q = llm.rope(ins.q[s["layer"], s["query"], s["head"]][None, None], [-s["query"]])
    k = llm.rope(ins.k[s["layer"], s["key"], s["head"] // group][None, None], [-s["key"]])
    return q, k, pair_speeds(llm)


def pair_speeds(llm) -> list[float]:
    """Radians each pair turns per position: rotate a unit arrow in every pair from position 0 to
    1 with the model's rope and measure the angle (so this is the model's θ_i, not a formula)."""
    half = llm.config.head_dim // 2
    unit = torch.zeros(half, 1, 2 * half)
    unit[torch.arange(half), 0, torch.arange(half)] = 1.0              # a = 1, b = 0 in pair i
    turned = llm.rope(unit, [1] * half)[:, 0]
    idx = torch.arange(half)
    return torch.atan2(turned[idx, idx + half], turned[idx, idx]).tolist()


def _pair(x: torch.Tensor, i: int) -> list[float]:
    half = x.shape[-1] // 2
    return [float(x[0, 0, i]), float(x[0, 0, i + half])]


def score(llm, q, k, m: int, n: int) -> float:
    """The head's attention score q·k/√d with the query at position m and the key at n."""
    qm, kn = llm.rope(q, [m]), llm.rope(k, [n])
    return float((qm * kn).sum()) / math.sqrt(q.shape[-1])


def rope_view(llm, m: int, n: int, pairs: tuple[int, int]) -> dict:
    """Everything the widget draws for query position m, key position n and two chosen pairs."""
    q, k, speeds = content(llm)
    qm, kn = llm.rope(q, [m]), llm.rope(k, [n])
    out_pairs = []
    for i in pairs:
        a, b = _pair(qm, i), _pair(kn, i)
        out_pairs.append({"pair": i, "speed": speeds[i], "q": a, "k": b, "dot": a[0] * b[0] + a[1] * b[1],
                          "q_angle": math.atan2(a[1], a[0]), "k_angle": math.atan2(b[1], b[0])})
    # The score for every distance 0 … CURVE-1: the query at position d, the key at 0.
    d = torch.arange(CURVE)
    curve = (llm.rope(q.expand(CURVE, 1, -1), d) * k).sum(-1)[:, 0] / math.sqrt(q.shape[-1])
    limit = llm.config.max_position_embeddings - 1
    same = [{"m": m + s, "n": n + s, "score": score(llm, q, k, m + s, n + s)}
            for s in SHIFTS if max(m, n) + s <= limit]
    return {"m": m, "n": n, "score": score(llm, q, k, m, n), "pairs": out_pairs,
            "curve": curve.tolist(), "same": same}
