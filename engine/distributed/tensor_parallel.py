"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) by module substitution.

Every rank starts from the whole model and keeps its slice of each matrix. Per layer:

    attention   wq, wk, wv   column-parallel: rank r keeps the rows (output features) of its heads
                             [hidden] -> [its heads x head_dim]; attention runs on its heads alone
                wo           row-parallel: rank r keeps the columns (input features) of its heads,
                             [its heads x head_dim] -> a partial [hidden] ... ALL-REDUCE -> the sum
    MLP         w1, w3       column-parallel: rank r keeps its share of the inner features
                w2           row-parallel: a partial [hidden] from its features ... ALL-REDUCE

So two all-reduces per layer, each of [batch tokens, hidden] values; between them every rank works
alone. The RMSNorms and residual adds are repeated on every rank (they see the whole, summed vector).

The embedding and the LM head are REPLICATED, not split by vocabulary. SmolLM2 ties them (one
49,152 x 576 table, 28 M of its 135 M parameters: 113 MB in float32 per rank), and keeping a whole
copy means no third collective: vocabulary-parallel embedding costs an all-reduce after the lookup,
and a vocabulary-parallel LM head an all-gather of the logits. Only the sampling rank computes
logits at all. vLLM splits both by vocabulary (VocabParallelEmbedding, ParallelLMHead), which pays
off at Llama-3-70B's 128,256 x 8,192 untied tables (2 x 2.1 GB in bf16).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..model.llama import Llama
from .parallel_config import even_slices, head_shard


class ColumnParallelLinear(nn.Module):
    """y[:, mine] = x @ W[mine].T: this rank's slice of the output features; no communication."""

    def __init__(self, full: nn.Linear, rows: list[int] | slice):
        super().__init__()
        self.weight = nn.Parameter(full.weight.detach()[rows].clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x[:, mine] @ W[:, mine].T: a partial product here, summed by an all-reduce.

    `comm` is the rank's Comm (None: return the partial sum, for tests that add the shards up)."""

    def __init__(self, full: nn.Linear, cols: list[int] | slice, comm=None):
        super().__init__()
        self.weight = nn.Parameter(full.weight.detach()[:, cols].clone(), requires_grad=False)
        self.comm = comm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)
        return partial if self.comm is None else self.comm.all_reduce(partial)


def _head_rows(heads, head_dim: int) -> slice | list[int]:
    """The weight rows of these heads: a slice when they are consecutive, else (KV heads copied or
    skipped) the row numbers, head by head."""
    heads = list(heads)
    if heads == list(range(heads[0], heads[-1] + 1)):
        return slice(heads[0] * head_dim, (heads[-1] + 1) * head_dim)
    return [k * head_dim + i for k in heads for i in range(head_dim)]


def shard_layer(block: nn.Module, cfg: ModelConfig, tp: int, tp_rank: int, comm) -> None:
    """Replace one TransformerBlock's projections by this rank's column/row-parallel slices."""
    heads = head_shard(cfg, tp, tp_rank)
    att, mlp = block.attention, block.mlp
    q_rows, kv_rows = _head_rows(heads.q, cfg.head_dim), _head_rows(heads.kv, cfg.head_dim)
    att.wq, att.wk, att.wv = (ColumnParallelLinear(att.wq, q_rows), ColumnParallelLinear(att.wk, kv_rows),
                              ColumnParallelLinear(att.wv, kv_rows))
    att.wo = RowParallelLinear(att.wo, q_rows, comm)
    att.num_heads, att.num_kv_heads = heads.num_heads, heads.num_kv_heads
    inner = even_slices(cfg.intermediate_size, tp)[tp_rank]
    mlp.w1, mlp.w3 = ColumnParallelLinear(mlp.w1, inner), ColumnParallelLinear(mlp.w3, inner)
    mlp.w2 = RowParallelLinear(mlp.w2, inner, comm)


def shard_tensor_parallel(model: Llama, tp: int, tp_rank: int, comm, layers: range | None = None) -> Llama:
    """Turn a whole model into tensor-parallel rank tp_rank's shard, in place (only `layers`: a
    pipeline stage's). The embedding, norms and LM head stay whole on every rank."""
    if tp == 1:
        return model
    for i in layers if layers is not None else range(len(model.layers)):
        shard_layer(model.layers[i], model.config, tp, tp_rank, comm)
    return model


def weight_splits(cfg: ModelConfig, tp: int) -> list[dict]:
    """How each matrix of one layer (and the shared tables) is split over `tp` ranks: for the widget
    and the chapter. shape is [out, in] as nn.Linear stores it; per_rank lists each rank's slice."""
    heads = [head_shard(cfg, tp, r) for r in range(tp)]
    q = [(h.q.start * cfg.head_dim, h.q.stop * cfg.head_dim) for h in heads]
    kv = [(min(h.kv) * cfg.head_dim, (max(h.kv) + 1) * cfg.head_dim) for h in heads]   # copies: its span
    inner = [(s.start, s.stop) for s in even_slices(cfg.intermediate_size, tp)]
    h, qd, kvd, f = cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim, cfg.intermediate_size
    rows = [("wq", "q_proj", (qd, h), "column", q), ("wk", "k_proj", (kvd, h), "column", kv),
            ("wv", "v_proj", (kvd, h), "column", kv), ("wo", "o_proj", (h, qd), "row", q),
            ("w1", "gate_proj", (f, h), "column", inner), ("w3", "up_proj", (f, h), "column", inner),
            ("w2", "down_proj", (h, f), "row", inner)]
    out = [{"name": n, "hf_name": hf, "shape": list(shape), "split": split,
            "per_rank": [list(r) for r in ranges] if tp > 1 else [[0, shape[0] if split == "column" else shape[1]]],
            "all_reduce_after": split == "row" and tp > 1}
           for n, hf, shape, split, ranges in rows]
    table = {"name": "embed", "hf_name": "embed_tokens" + (" = lm_head" if cfg.tie_word_embeddings else ""),
             "shape": [cfg.vocab_size, h], "split": "replicated", "per_rank": [[0, cfg.vocab_size]] * tp,
             "all_reduce_after": False}
    return out + [table]
