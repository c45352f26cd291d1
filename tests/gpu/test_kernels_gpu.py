"""The compiled Triton kernels against the PyTorch references, on a real GPU (skipped without CUDA)."""

from __future__ import annotations

import random

import pytest
import torch

import kernels
from kernels import reference
from kernels.bench.scenarios import make_paged_batch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or kernels.paged_attention_triton is None,
                       reason="needs CUDA and triton"),
]

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "NaN in output (an unwritten or masked-out row?)"
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def random_seqs(rng: random.Random, num_seqs: int, max_len: int) -> list[tuple[int, int]]:
    seqs = [(1, 1)]
    while len(seqs) < num_seqs:
        seq_len = rng.randint(2, max_len)
        q_len = rng.choice([seq_len, rng.randint(1, seq_len - 1), 1])  # prefill, chunk, decode
        seqs.append((seq_len, q_len))
    rng.shuffle(seqs)
    return seqs


def cuda_batch(seqs, seed, **kw):
    return make_paged_batch(seqs, device="cuda", generator=torch.Generator().manual_seed(seed), **kw)


def test_dispatch_runs_triton_on_cuda(monkeypatch):
    monkeypatch.delenv("KERNELS_BACKEND", raising=False)
    assert kernels.backend_for(torch.device("cuda")) == "triton"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block_size", [16, 32])
def test_mixed_batch_matches_reference(dtype, block_size):
    rng = random.Random(block_size * 7 + len(str(dtype)))
    b = cuda_batch(random_seqs(rng, 24, 1500), seed=rng.randint(0, 10**6), dtype=dtype,
                   block_size=block_size, table_fill=rng.choice([-1, 0]))
    ref = reference.paged_attention(*b.args())
    assert rel_err(kernels.paged_attention(*b.args()), ref) < TOLERANCE[dtype]
    out = kernels.paged_attention_triton(*b.args(), kv_per_program=3)
    assert rel_err(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("batch,context", [(1, 9000), (3, 5000), (64, 700), (200, 33)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_matches_reference(batch, context, dtype):
    rng = random.Random(batch + context)
    seqs = [(rng.randint(1, context), 1) for _ in range(batch)]
    b = cuda_batch(seqs, seed=batch, dtype=dtype, block_size=16)
    ref = reference.paged_attention(*b.args())
    assert rel_err(kernels.paged_attention(*b.args()), ref) < TOLERANCE[dtype]
    for splits in (1, 8):  # the split-KV path and the direct one, whatever the heuristic picked
        for kv_per_program in (1, 3):  # one kv head per program, or all of them
            out = kernels.paged_attention_triton(*b.args(), num_splits=splits, kv_per_program=kv_per_program)
            assert rel_err(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_heads,num_kv_heads,head_dim", [(9, 3, 64), (8, 1, 128), (4, 4, 32), (12, 4, 64)])
def test_gqa_ratios(num_heads, num_kv_heads, head_dim):
    rng = random.Random(num_heads * 100 + num_kv_heads)
    b = cuda_batch(random_seqs(rng, 10, 600), seed=num_heads, num_heads=num_heads, num_kv_heads=num_kv_heads,
                   head_dim=head_dim, dtype=torch.bfloat16, block_size=16)
    ref = reference.paged_attention(*b.args())
    assert rel_err(kernels.paged_attention(*b.args()), ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_write_kv_matches_reference(dtype, index_dtype):
    g = torch.Generator().manual_seed(5)
    k_cache = torch.randn(64, 16, 3, 64, generator=g).to(dtype).cuda()
    v_cache = torch.randn(64, 16, 3, 64, generator=g).to(dtype).cuda()
    k = torch.randn(300, 3, 64, generator=g).to(dtype).cuda()
    v = torch.randn(300, 3, 64, generator=g).to(dtype).cuda()
    slots = torch.randperm(64 * 16, generator=g)[:300]
    slots[torch.randperm(300, generator=g)[:40]] = -1  # padding tokens
    slots = slots.to(index_dtype).cuda()
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(k, v, want_k, want_v, slots)
    kernels.write_kv(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
