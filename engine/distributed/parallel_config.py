"""Which sizes split a model, and who is who: ranks, tensor-parallel ranks, pipeline stages.

    world = tensor_parallel_size x pipeline_parallel_size processes, one GPU each (or CPU processes)

        rank = stage * tp + tp_rank            tp = 3, pp = 2:   stage 0: ranks 0 1 2   layers  0-14
                                                                 stage 1: ranks 3 4 5   layers 15-29

Rank 0 runs the scheduler; it is tensor-parallel rank 0 of the first stage. The ranks of one stage
hold the same layers, each a slice of every matrix; consecutive stages hold consecutive layers.

Any tensor-parallel size t that divides the query heads works: each rank gets num_heads / t whole
query heads, and holds the KV heads they read. Where a rank's query heads would straddle KV groups
unevenly, it holds copies of KV heads so that its own heads group evenly (as vLLM's QKVParallelLinear
replicates KV heads when t exceeds them):

    t divides num_kv_heads        each rank holds num_kv_heads / t KV heads      (Llama-3-8B, 8 KV: t = 2, 4, 8)
    num_kv_heads divides t        each KV head is copied to t / num_kv_heads ranks (SmolLM2, 3 KV: t = 9)
    neither (12 q, 4 KV, t = 6)   rank 1's query heads 2, 3 read KV heads 0 and 1: it holds both

The MLP's inner features need not divide evenly (1,536 / 9 is not whole): ranks get 171 or 170 of
them, and the row-parallel sum is exact either way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ModelConfig


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    micro_batches: int | None = None      # per step, pipeline only; None = one per stage

    def __post_init__(self) -> None:
        for name in ("tensor_parallel_size", "pipeline_parallel_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {getattr(self, name)!r}")
        if self.micro_batches is not None and self.micro_batches < 1:
            raise ValueError(f"micro_batches must be >= 1, got {self.micro_batches}")

    @property
    def tp(self) -> int:
        return self.tensor_parallel_size

    @property
    def pp(self) -> int:
        return self.pipeline_parallel_size

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def num_micro_batches(self) -> int:
        return 1 if self.pp == 1 else (self.micro_batches or self.pp)

    def rank(self, stage: int, tp_rank: int) -> int:
        return stage * self.tp + tp_rank

    def coords(self, rank: int) -> tuple[int, int]:
        """(stage, tp_rank) of a rank."""
        return divmod(rank, self.tp)

    def tp_group_ranks(self, stage: int) -> list[int]:
        return [self.rank(stage, t) for t in range(self.tp)]

    @property
    def sampling_rank(self) -> int:
        """Who computes logits and samples: tensor-parallel rank 0 of the last stage."""
        return self.rank(self.pp - 1, 0)

    def describe(self) -> str:
        parts = [f"tp={self.tp}"] if self.tp > 1 else []
        parts += [f"pp={self.pp}"] if self.pp > 1 else []
        return " x ".join(parts) or "single process"


def tensor_parallel_sizes(cfg: ModelConfig) -> list[int]:
    """Every size that gives each rank whole query heads (KV heads are copied where needed)."""
    return [t for t in range(1, cfg.num_heads + 1) if cfg.num_heads % t == 0]


def check_parallel(cfg: ModelConfig, pc: ParallelConfig) -> None:
    """Refuse a split that does not fit the model, naming the sizes that do."""
    sizes = tensor_parallel_sizes(cfg)
    if pc.tp not in sizes:
        raise ValueError(
            f"tensor-parallel size {pc.tp} does not split {cfg.name}'s {cfg.num_heads} query heads and "
            f"{cfg.num_kv_heads} KV heads evenly; sizes that work: {', '.join(map(str, sizes))}")
    if pc.pp > cfg.num_layers:
        raise ValueError(f"pipeline-parallel size {pc.pp} exceeds {cfg.name}'s {cfg.num_layers} layers; "
                         f"sizes that work: 1 to {cfg.num_layers}")


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """Consecutive layers per stage, as even as possible; the first stages take the remainder
    (30 layers: 2 stages of 15, 3 of 10, 5 of 6, 6 of 5; 6 layers over 5 stages: 2 1 1 1 1)."""
    base, extra = divmod(num_layers, pp)
    bounds, start = [], 0
    for s in range(pp):
        stop = start + base + (s < extra)
        bounds.append(range(start, stop))
        start = stop
    return bounds


def even_slices(n: int, parts: int) -> list[slice]:
    """n items over `parts` ranks, as even as possible (1,536 over 9: 171 x 6, then 170 x 3)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for r in range(parts):
        stop = start + base + (r < extra)
        out.append(slice(start, stop))
        start = stop
    return out


@dataclass(frozen=True, slots=True)
class HeadShard:
    """One tensor-parallel rank's heads: query heads q and the KV heads it holds, kv (global indices;
    a KV head may appear twice: local query head j reads local KV head j // (len(q) // len(kv)))."""
    q: range
    kv: tuple[int, ...]

    @property
    def num_heads(self) -> int:
        return len(self.q)

    @property
    def num_kv_heads(self) -> int:
        return len(self.kv)


def head_shard(cfg: ModelConfig, tp: int, tp_rank: int) -> HeadShard:
    """Rank tp_rank's query heads, and the fewest KV heads (copies included) under which they group
    evenly: split its query heads into runs by the KV head they read; the local group is the greatest
    common divisor of the run lengths, and each local group keeps the KV head its heads read."""
    h, kv = cfg.num_heads, cfg.num_kv_heads
    if h % tp:
        raise ValueError(f"tensor-parallel size {tp} does not divide {h} query heads")
    q = range(tp_rank * h // tp, (tp_rank + 1) * h // tp)
    reads = [j // (h // kv) for j in q]                 # the KV head each of my query heads reads
    runs = [reads.count(k) for k in dict.fromkeys(reads)]
    group = math.gcd(*runs)
    return HeadShard(q, tuple(reads[::group]))
