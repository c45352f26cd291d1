"""The compiled RMSNorm / RoPE / SwiGLU kernels against their PyTorch references, on a real GPU.

"Match" is tests/helpers/ulps.py's criterion, shared with the interpreted tests: float32 equal to rounding;
bf16/fp16 at most one unit in the last place apart on at most 1% of the elements (float32 summation order,
FMA contraction and the GPU's exp/rsqrt may move a value across a rounding boundary, never further).
The model-level check (the whole forward wired to these kernels) is in tests/kernels/test_small_ops.py.
"""

from __future__ import annotations


import pytest
import torch

from tests.helpers.ulps import assert_matches  # noqa: E402

import kernels
from kernels import reference_small_ops as ref

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or kernels.rms_norm_triton is None,
                       reason="needs CUDA and triton"),
]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)


def cos_sin(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """engine/model/llama.py's rope_cos_sin (kernels must not import the engine, tests may)."""
    from engine.model.llama import rope_cos_sin
    return rope_cos_sin(positions, head_dim, theta)


def test_dispatch_runs_the_small_ops_in_triton_on_cuda(monkeypatch):
    monkeypatch.delenv("KERNELS_BACKEND", raising=False)
    x, w = randn(4, 576, dtype=torch.bfloat16), randn(576, dtype=torch.bfloat16)
    assert kernels.backend_for(x.device) == "triton"
    assert_matches(kernels.rms_norm(x, w, 1e-5, x)[0], ref.rms_norm(x, w, 1e-5, x)[0], max_ulps=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("tokens", [1, 64, 256, 4097])
@pytest.mark.parametrize("hidden", [576, 100, 4096])
def test_rms_norm_matches_reference(dtype, with_residual, tokens, hidden):
    x = randn(tokens, hidden, dtype=dtype, seed=tokens, scale=3.0)
    residual = randn(tokens, hidden, dtype=dtype, seed=hidden, scale=3.0) if with_residual else None
    weight = (1 + randn(hidden, seed=1, scale=0.2)).to(dtype)
    got, want = kernels.rms_norm_triton(x, weight, 1e-5, residual), ref.rms_norm(x, weight, 1e-5, residual)
    assert_matches(got[0], want[0], max_ulps=2)     # normed: rounded twice (see ulps.py)
    assert_matches(got[1], want[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_reads_strided_rows(dtype):
    x = randn(33, 700, dtype=dtype, seed=2)[:, :576]
    residual = randn(576, 33, dtype=dtype, seed=3).t()
    weight = randn(576, dtype=dtype, seed=4)
    got, want = kernels.rms_norm_triton(x, weight, 1e-5, residual), ref.rms_norm(x, weight, 1e-5, residual)
    assert_matches(got[0], want[0], max_ulps=2)     # normed: rounded twice (see ulps.py)
    assert_matches(got[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (32, 8, 128), (5, 1, 48)])
@pytest.mark.parametrize("tokens", [1, 64, 256, 4096])
def test_rope_matches_reference(dtype, heads, kv_heads, head_dim, tokens):
    g = torch.Generator(device="cuda").manual_seed(tokens)
    positions = torch.randint(0, 1 << 20, (tokens,), device="cuda", generator=g)
    positions[: min(tokens, 3)] = torch.tensor([0, 8191, 100_000], device="cuda")[: min(tokens, 3)]
    cos, sin = cos_sin(positions, head_dim, 100000.0)
    q = randn(tokens, heads, head_dim, dtype=dtype, seed=5)
    k = randn(tokens, kv_heads, head_dim, dtype=dtype, seed=6)
    # Both compute x*cos - y*sin in float32 (an FMA or not) and round once. Measured on an H200: the
    # largest flip is one ulp at a rounding midpoint (-1.0 vs -1.0078 for a true -1.00390630), and where
    # the two products cancel, float32's error (~1e-7 x |x|) can be several ulps of a near-zero result.
    for got, want in zip(kernels.rope_triton(q, k, cos, sin), ref.rope(q, k, cos, sin)):
        assert_matches(got, want, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rope_reads_views_of_one_fused_qkv(dtype):
    T, H, KV, D = 300, 9, 3, 64
    qkv = randn(T, (H + 2 * KV) * D, dtype=dtype, seed=7)
    q, k = qkv[:, : H * D].view(T, H, D), qkv[:, H * D: (H + KV) * D].view(T, KV, D)
    cos, sin = cos_sin(torch.arange(1000, 1000 + T, device="cuda"), D, 100000.0)
    for got, want in zip(kernels.rope_triton(q, k, cos, sin), ref.rope(q, k, cos, sin)):
        assert_matches(got, want, atol=1e-5)            # x*cos - y*sin cancels: as in the test above


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens", [1, 64, 256, 4097])
@pytest.mark.parametrize("width", [1536, 1000, 14336])
def test_swiglu_matches_reference(dtype, tokens, width):
    gate = randn(tokens, width, dtype=dtype, seed=width, scale=6.0)
    gate[0, 0], gate[-1, -1] = -100.0, 100.0
    up = randn(tokens, width, dtype=dtype, seed=tokens)
    # silu(gate) is rounded to the narrow type before the product is rounded again (see ulps.py)
    assert_matches(kernels.swiglu_triton(gate, up), ref.swiglu(gate, up), max_ulps=2)


def test_swiglu_on_the_halves_of_a_fused_gate_up():
    gate_up = randn(129, 2 * 1536, dtype=torch.bfloat16, seed=8, scale=3.0)
    gate, up = gate_up[:, :1536], gate_up[:, 1536:]
    assert_matches(kernels.swiglu_triton(gate, up), ref.swiglu(gate, up), max_ulps=2)


def test_small_ops_replay_in_a_cuda_graph_with_new_inputs():
    """Decode steps will run as CUDA graphs over persistent buffers: captured once, fed new data."""
    dt, T = torch.bfloat16, 64
    x, res, w = randn(T, 576, dtype=dt, seed=9), randn(T, 576, dtype=dt, seed=10), randn(576, dtype=dt, seed=11)
    q, k = randn(T, 9, 64, dtype=dt, seed=12), randn(T, 3, 64, dtype=dt, seed=13)
    cos, sin = cos_sin(torch.arange(T, device="cuda"), 64, 100000.0)
    gate, up = randn(T, 1536, dtype=dt, seed=14), randn(T, 1536, dtype=dt, seed=15)

    def step():
        return (*kernels.rms_norm_triton(x, w, 1e-5, res), *kernels.rope_triton(q, k, cos, sin),
                kernels.swiglu_triton(gate, up))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # compile outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for seed in (20, 30):  # new values in the same buffers, then replay
        for i, buf in enumerate((x, res, q, k, gate, up)):
            buf.copy_(randn(*buf.shape, dtype=dt, seed=seed + i))
        cos_new, sin_new = cos_sin(torch.arange(seed * 100, seed * 100 + T, device="cuda"), 64, 100000.0)
        cos.copy_(cos_new), sin.copy_(sin_new)
        graph.replay()
        want = (*ref.rms_norm(x, w, 1e-5, res), *ref.rope(q, k, cos, sin), ref.swiglu(gate, up))
        # normed and swiglu round twice; the rotation cancels (see ulps.py)
        rules = [dict(max_ulps=2), {}, dict(atol=1e-5), dict(atol=1e-5), dict(max_ulps=2)]
        for got, expected, rule in zip(outs, want, rules):
            assert_matches(got, expected, **rule)
