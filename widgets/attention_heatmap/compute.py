"""The numbers behind the attention heatmap (chapters 4–5), pure functions of one `llm.inspect` pass
(kept per server by `widgets.common.cache.inspection`: layer, head and row only reslice it).

A head's picture is its T x T matrix, row = query token, column = key token. Only the lower
triangle exists: the causal mask gives later keys weight exactly 0, so those cells are not drawn.

        key → The ␣capital ␣of ␣France ␣is
    query The   1.0
     ␣capital   .93   .07
          ␣of   ...                                 each row sums to 1 (softmax)
       ␣France  ...
          ␣is   .05   .89   .03   .01   .01        ← layer 14 (index 13), head 8: "is" looks back at "capital"

Two views of the same cells: the softmax weights (`inspect`'s attention probabilities), and the
scaled scores q·k/√d they come from, recomputed from `inspect`'s queries and keys (RoPE applied).
With grouped-query attention, query head h reads KV head h // (heads / kv_heads).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(slots=True)
class LayerView:
    """One layer of one sentence: what the heatmap draws, for every head of the layer."""
    tokens: list[str]           # token texts
    layer: int
    probs: np.ndarray           # [heads, T, T] softmax weights (0 above the diagonal)
    scores: np.ndarray          # [heads, T, T] q·k/√d (NaN above the diagonal: masked)
    kv_group: int               # query heads per KV head

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def to_json(self) -> dict:
        """Lower triangles only, row by row (what the saved first example stores)."""
        rows, cols = np.tril_indices(self.num_tokens)
        return {"tokens": self.tokens, "layer": self.layer, "kv_group": self.kv_group,
                "probs": [p[rows, cols].tolist() for p in self.probs],
                "scores": [s[rows, cols].tolist() for s in self.scores]}

    @classmethod
    def from_json(cls, d: dict) -> "LayerView":
        T, heads = len(d["tokens"]), len(d["probs"])
        rows, cols = np.tril_indices(T)
        probs, scores = np.zeros((heads, T, T)), np.full((heads, T, T), np.nan)
        for h in range(heads):
            probs[h, rows, cols], scores[h, rows, cols] = d["probs"][h], d["scores"][h]
        return cls(d["tokens"], d["layer"], probs, scores, d["kv_group"])


def layer_view(ins, layer: int) -> LayerView:
    """Every head of ``layer`` from an Inspection: the probabilities as `inspect` reports them, and
    the scaled scores from its q and k (the input of the softmax that produced them)."""
    q, k = ins.q[layer], ins.k[layer]                   # [T, heads, d], [T, kv_heads, d]
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)               # query head h reads KV head h // group
    scores = np.einsum("thd,shd->hts", q.numpy(), k.numpy()) / math.sqrt(q.shape[-1])
    T = q.shape[0]
    scores[:, ~np.tri(T, dtype=bool)] = np.nan          # the causal mask: later keys do not exist
    return LayerView(list(ins.tokens), layer, ins.attention[layer].numpy().astype(np.float64),
                     scores.astype(np.float64), group)


# -- chapter 5: what grouped-query attention saves --------------------------------------------------
def kv_bytes_rows(config, num_tokens: int, bytes_per_value: int = 2) -> list[dict]:
    """KV-cache bytes per token of this model's shapes with every query head keeping its own K and V
    (MHA), with the model's KV heads (GQA), and with one shared KV head (MQA): the engine's own
    arithmetic (ModelConfig.kv_bytes_per_token) on the config with only the KV-head count changed."""
    out = []
    for name, kv_heads in (("MHA", config.num_heads), ("GQA", config.num_kv_heads), ("MQA", 1)):
        per_token = dataclasses.replace(config, num_kv_heads=kv_heads).kv_bytes_per_token(bytes_per_value)
        out.append({"name": name, "kv_heads": kv_heads, "per_token": per_token,
                    "sentence": per_token * num_tokens, "model": kv_heads == config.num_kv_heads,
                    "formula": f"2 × {config.num_layers} × {kv_heads} × {config.head_dim} × {bytes_per_value}"})
    return out
