"""Kernel tests on CPU: the references against plain attention, the Triton kernels against the references.

The Triton kernels run under triton's interpreter; triton_interpreter.py says how (and why the
interpreted tests may run in a subprocess instead).
"""

from __future__ import annotations

from tests.helpers import triton_interpreter  # TRITON_INTERPRET is set by tests/conftest.py

import os
import random
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels import reference
from kernels.bench.scenarios import make_paged_batch

# ||out - ref|| / ||ref||: fp32 arithmetic is exact to rounding; bf16/fp16 round p and the output.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "NaN in output (an unwritten or masked-out row?)"
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


def _probe():
    from kernels import triton_attention
    return triton_attention._paged_attention_kernel


@pytest.fixture(scope="module")
def interpreted():
    yield from triton_interpreter.kernels_or_skip(kernels.paged_attention_triton is not None, _probe,
                                                  paged_attention=kernels.paged_attention_triton,
                                                  write_kv=kernels.write_kv_triton)


def test_interpreted_tests_in_a_fresh_process():
    triton_interpreter.rerun_if_not_interpreted(kernels.paged_attention_triton is not None, _probe, __file__)


def random_seqs(rng: random.Random, num_seqs: int, max_len: int) -> list[tuple[int, int]]:
    """A mix of fresh prefills, chunks starting mid-sequence, decodes and length-1 sequences."""
    seqs = [(1, 1)]
    while len(seqs) < num_seqs:
        seq_len = rng.randint(2, max_len)
        kind = rng.choice(["prefill", "chunk", "decode"])
        q_len = {"prefill": seq_len, "chunk": rng.randint(2, seq_len - 1) if seq_len > 2 else 1,
                 "decode": 1}[kind]
        seqs.append((seq_len, q_len))
    rng.shuffle(seqs)
    return seqs


# ---------------------------------------------------------------- references against plain attention

def test_reference_attention_matches_sdpa_on_contiguous_kv():
    g = torch.Generator().manual_seed(1)
    seqs = [(37, 37), (50, 13), (20, 1), (1, 1)]
    b = make_paged_batch(seqs, block_size=16, dtype=torch.float64, generator=g)
    out = reference.paged_attention(*b.args())
    qsl = b.query_start_loc.tolist()
    for s, (seq_len, q_len) in enumerate(seqs):
        k = reference.gather_kv(b.k_cache, b.block_tables[s], seq_len).repeat_interleave(3, dim=1)
        v = reference.gather_kv(b.v_cache, b.block_tables[s], seq_len).repeat_interleave(3, dim=1)
        q = b.q[qsl[s]:qsl[s + 1]]
        # Bottom-right causal: query j sits at seq_len - q_len + j.
        allowed = torch.arange(seq_len)[None, :] <= torch.arange(seq_len - q_len, seq_len)[:, None]
        want = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              attn_mask=allowed, scale=b.scale).transpose(0, 1)
        torch.testing.assert_close(out[qsl[s]:qsl[s + 1]], want)


def test_reference_write_kv_fills_exactly_the_given_slots():
    g = torch.Generator().manual_seed(2)
    k_cache = torch.randn(6, 16, 3, 64, generator=g)
    v_cache = torch.randn(6, 16, 3, 64, generator=g)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    k, v = torch.randn(5, 3, 64, generator=g), torch.randn(5, 3, 64, generator=g)
    slots = torch.tensor([17, -1, 95, 0, -1])
    reference.write_kv(k, v, k_cache, v_cache, slots)
    flat_k, flat_v = k_cache.view(-1, 3, 64), v_cache.view(-1, 3, 64)
    for i, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat_k[slot], k[i]) and torch.equal(flat_v[slot], v[i])
    untouched = torch.ones(96, dtype=torch.bool)
    untouched[[17, 95, 0]] = False
    assert torch.equal(flat_k[untouched], before_k.view(-1, 3, 64)[untouched])
    assert torch.equal(flat_v[untouched], before_v.view(-1, 3, 64)[untouched])


def test_dispatch_uses_reference_on_cpu():
    try:
        kernels.force_backend(None)
        assert kernels.backend_for(torch.device("cpu")) == "reference"
        kernels.force_backend("reference")
        assert kernels.backend_for(torch.device("cuda")) == "reference"
        with pytest.raises(ValueError):
            kernels.force_backend("bogus")
        b = make_paged_batch([(9, 4)], generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(kernels.paged_attention(*b.args()), reference.paged_attention(*b.args()))
    finally:
        kernels.force_backend(os.environ.get("KERNELS_BACKEND"))


def test_backend_environment_variable_is_read_once_at_import():
    code = ("import os, torch, kernels; a = kernels.backend_for(torch.device('cuda')); "
            "os.environ['KERNELS_BACKEND'] = 'triton'; print(a, kernels.backend_for(torch.device('cuda')))")
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KERNELS_BACKEND": "reference"},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["reference", "reference"]     # forced at import; later changes are not read


# ---------------------------------------------------------------- Triton (interpreted) against references

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_triton_write_kv_matches_reference(interpreted, dtype, index_dtype):
    g = torch.Generator().manual_seed(4)
    k_cache = torch.randn(5, 16, 3, 64, generator=g).to(dtype)
    v_cache = torch.randn(5, 16, 3, 64, generator=g).to(dtype)
    k = torch.randn(7, 3, 64, generator=g).to(dtype)
    v = torch.randn(7, 3, 64, generator=g).to(dtype)
    slots = torch.tensor([33, -1, 5, 79, -1, 16, 47], dtype=index_dtype)  # -1: padding
    want_k, want_v = k_cache.clone(), v_cache.clone()
    reference.write_kv(k, v, want_k, want_v, slots)
    interpreted.write_kv(k, v, k_cache, v_cache, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


@pytest.mark.parametrize("dtype,block_size,seed", [
    (torch.float32, 16, 10),
    (torch.bfloat16, 16, 11),
    (torch.float16, 32, 12),
    (torch.bfloat16, 32, 13),
])
def test_triton_attention_mixed_batch_matches_reference(interpreted, dtype, block_size, seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    seqs = random_seqs(rng, num_seqs=5, max_len=70)
    b = make_paged_batch(seqs, block_size=block_size, dtype=dtype, generator=g,
                         table_fill=rng.choice([-1, 0]))
    ref = reference.paged_attention(*b.args())
    assert rel_err(interpreted.paged_attention(*b.args()), ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_decode_with_and_without_split_kv(interpreted, dtype, num_splits):
    # Decode-only batches take the small-tile path; 4 splits over short contexts leave some splits
    # empty, which the merge must weigh as zero. Contexts are not multiples of the block size.
    g = torch.Generator().manual_seed(20 + num_splits)
    b = make_paged_batch([(75, 1), (1, 1), (17, 1), (40, 1)], block_size=16, dtype=dtype, generator=g)
    ref = reference.paged_attention(*b.args())
    out = interpreted.paged_attention(*b.args(), num_splits=num_splits, tile_n=16)
    assert rel_err(out, ref) < TOLERANCE[dtype]


@pytest.mark.parametrize("table_fill", [-1, 0])
def test_triton_decode_single_tile_prefetches_the_table(interpreted, table_fill):
    # Short contexts, no split: the whole block-table row (padding entries included, -1 or 0) is read
    # before the lengths are known; entries past a sequence must not leak into its attention.
    g = torch.Generator().manual_seed(25)
    b = make_paged_batch([(75, 1), (1, 1), (17, 1), (40, 1)], block_size=16, dtype=torch.bfloat16,
                         generator=g, table_fill=table_fill, extra_table_cols=2)
    assert b.block_tables.shape[1] * 16 <= 128  # one 128-position tile covers every row
    ref = reference.paged_attention(*b.args())
    out = interpreted.paged_attention(*b.args(), num_splits=1, tile_n=128)
    assert rel_err(out, ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (8, 1), (6, 2)])
def test_triton_attention_other_gqa_ratios(interpreted, num_heads, num_kv_heads):
    g = torch.Generator().manual_seed(30 + num_heads)
    b = make_paged_batch([(23, 23), (40, 7), (9, 1)], num_heads=num_heads, num_kv_heads=num_kv_heads,
                         head_dim=32, block_size=16, generator=g)
    ref = reference.paged_attention(*b.args())
    assert rel_err(interpreted.paged_attention(*b.args()), ref) < TOLERANCE[torch.float32]


def test_triton_write_then_attend_round_trip(interpreted):
    # The engine's order of operations: write this step's K/V, then attend over the cache.
    g = torch.Generator().manual_seed(40)
    b = make_paged_batch([(30, 6), (12, 1)], block_size=16, dtype=torch.bfloat16, generator=g)
    k_new = torch.randn(7, 3, 64, generator=g).bfloat16()
    v_new = torch.randn(7, 3, 64, generator=g).bfloat16()
    slots = torch.cat([b.slot_mapping[:6], torch.tensor([-1]), b.slot_mapping[6:]])  # one padding token
    k_new = torch.cat([k_new[:6], k_new[6:7], k_new[6:7]])[:8]
    v_new = torch.cat([v_new[:6], v_new[6:7], v_new[6:7]])[:8]
    want_k, want_v = b.k_cache.clone(), b.v_cache.clone()
    reference.write_kv(k_new, v_new, want_k, want_v, slots)
    interpreted.write_kv(k_new, v_new, b.k_cache, b.v_cache, slots)
    assert torch.equal(b.k_cache, want_k) and torch.equal(b.v_cache, want_v)
    ref = reference.paged_attention(b.q, want_k, want_v, *b.args()[3:])
    assert rel_err(interpreted.paged_attention(*b.args()), ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_splits", [1, 2])
def test_triton_decode_layout_survives_a_batch_that_only_looks_like_decode(interpreted, num_splits):
    # As many queries as sequences, yet one sequence has 7 queries (more than one query block) and
    # the others none: the decode fast path must still cover every query.
    g = torch.Generator().manual_seed(50)
    seqs = [(30, 7)] + [(5 + i, 0) for i in range(6)]
    b = make_paged_batch(seqs, block_size=16, generator=g)
    assert b.q.shape[0] == len(seqs)
    ref = reference.paged_attention(*b.args())
    out = interpreted.paged_attention(*b.args(), num_splits=num_splits, tile_n=16)
    assert rel_err(out, ref) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("seqs,num_splits", [
    ([(37, 37), (50, 13), (20, 1), (1, 1)], 1),     # prefill, chunk and decode in one call
    ([(75, 1), (1, 1), (17, 1), (40, 1)], 4),       # decode with split-KV
    ([(30, 7)] + [(5 + i, 0) for i in range(6)], 2),  # looks like decode, is not
])
def test_triton_all_kv_heads_in_one_program(interpreted, seqs, num_splits):
    # The layout where one program reads every kv head of a cache block in one contiguous run and
    # masks each query head to its own kv head's columns.
    g = torch.Generator().manual_seed(60 + num_splits)
    b = make_paged_batch(seqs, block_size=16, dtype=torch.bfloat16, generator=g)
    ref = reference.paged_attention(*b.args())
    out = interpreted.paged_attention(*b.args(), kv_per_program=3, num_splits=num_splits, tile_n=32)
    assert rel_err(out, ref) < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("num_tokens,num_seqs,heads,kv_heads,max_context,sms", [
    (1, 1, 9, 3, 16384, 132), (64, 64, 9, 3, 4096, 132), (256, 256, 9, 3, 16384, 132),
    (256, 256, 9, 3, 128, 132), (8, 8, 32, 8, 4096, 132), (2108, 64, 9, 3, 2048, 132), (5, 5, 8, 1, 40, 8),
])
def test_launch_plan_is_consistent(num_tokens, num_seqs, heads, kv_heads, max_context, sms):
    from kernels.launch_plan import MIN_KEYS_PER_SPLIT, plan_launch

    plan = plan_launch(num_tokens, num_seqs, heads, kv_heads, max_context, sms)
    assert plan.decode == (num_tokens == num_seqs)
    assert kv_heads % plan.kv_per_program == 0
    assert plan.block_m >= heads // kv_heads * plan.kv_per_program  # one query's heads fit a block
    assert plan.num_splits & (plan.num_splits - 1) == 0  # the merge kernel needs a power of two
    assert plan.num_splits == 1 or max_context // plan.num_splits >= MIN_KEYS_PER_SPLIT
