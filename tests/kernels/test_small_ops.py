"""RMSNorm (+ residual), RoPE and SwiGLU: the references are engine/model/llama.py's arithmetic bit for bit, and
the Triton kernels (interpreted on CPU, see triton_interpreter.py) match the references.

"Match" is ulps.assert_matches: float32 equal to rounding; bf16/fp16 at most one unit in the last place
apart (two where the eager arithmetic rounds twice), on at most 1% of the elements.
"""

from __future__ import annotations

from tests.helpers import triton_interpreter  # TRITON_INTERPRET is set by tests/conftest.py

import copy
import os

import pytest
import torch
from tests.helpers.unfused_llama import forward_unfused
from tests.helpers.tiny import TINY
from tests.helpers.ulps import assert_matches

import kernels
from engine.config import ModelConfig
from engine.model.llama import MLP, ContiguousKV, Llama, RMSNorm, apply_rope, rope_cos_sin
from tests.helpers.unfused_llama import _norm, _rope
from kernels import reference_small_ops as ref

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# Positions from the first token to far past SmolLM2's 8,192 (angles of hundreds of thousands of radians).
POSITIONS = [0, 1, 2, 17, 255, 4095, 8191, 32767, 100_000, 1 << 20]


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


# ---------------------------------------------------------------- references are the model's arithmetic

@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_rms_norm_is_the_models_rmsnorm_bit_for_bit(dtype):
    norm = RMSNorm(576, eps=1e-5).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(1 + randn(576, seed=1, scale=0.1))
    x, branch = randn(7, 576, dtype=dtype, seed=2), randn(7, 576, dtype=dtype, seed=3)
    with torch.no_grad():
        normed, stream = ref.rms_norm(x, norm.weight, norm.eps)
        assert torch.equal(normed, _norm(x, norm)) and stream is x  # no residual: the stream starts at x
        h = x + branch  # the block's skip connection, then the next norm
        normed, stream = ref.rms_norm(branch, norm.weight, norm.eps, residual=x)
        assert torch.equal(stream, h) and torch.equal(normed, _norm(h, norm))
        assert all(torch.equal(a, b) for a, b in zip(norm.add_norm(branch, x), (normed, stream)))  # the model's module
        assert torch.equal(norm(x), _norm(x, norm))                 # alone: the textbook norm (widgets call it)


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_rope_is_the_models_apply_rope_bit_for_bit(dtype):
    cos, sin = rope_cos_sin(torch.tensor(POSITIONS), 64, 100000.0)
    q, k = randn(len(POSITIONS), 9, 64, dtype=dtype, seed=4), randn(len(POSITIONS), 3, 64, dtype=dtype, seed=5)
    q_rot, k_rot = ref.rope(q, k, cos, sin)
    assert torch.equal(q_rot, _rope(q, cos, sin)) and torch.equal(k_rot, _rope(k, cos, sin))
    assert torch.equal(apply_rope(k, cos, sin), k_rot)  # the one-tensor helper the widgets call


@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_swiglu_is_the_models_mlp_activation_bit_for_bit(dtype):
    mlp = MLP(ModelConfig()).to(dtype)
    x = randn(5, 576, dtype=dtype, seed=6)
    with torch.no_grad():
        gate, up = mlp.w1(x), mlp.w3(x)
        assert torch.equal(ref.swiglu(gate, up), torch.nn.functional.silu(gate) * up)
        assert torch.equal(mlp(x), mlp.w2(torch.nn.functional.silu(gate) * up))


def _prefill_then_decode(forward, model: Llama, ids: list[int], steps: int) -> list[torch.Tensor]:
    """Hidden states of a prefill and `steps` decode steps (fed fixed tokens), through one KV store."""
    kv, outs, pos, device = ContiguousKV(model.config.num_layers), [], 0, model.embed.weight.device
    chunks = [ids[:-steps]] + [[t] for t in ids[-steps:]]
    with torch.no_grad():
        for chunk in chunks:
            positions = torch.arange(pos, pos + len(chunk), device=device)
            outs.append(forward(model, torch.tensor(chunk, device=device), positions, kv))
            pos += len(chunk)
    return outs


@pytest.fixture(autouse=True)
def _restore_backend():
    """Tests force a backend with kernels.force_backend; put back what the environment asked for."""
    yield
    kernels.force_backend(os.environ.get("KERNELS_BACKEND"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_wired_to_the_fused_ops_equals_the_unfused_formula_bit_for_bit_on_cpu(dtype, monkeypatch):
    kernels.force_backend("reference")
    model = Llama.random(TINY, seed=0).to(dtype).eval()
    ids = [int(t) for t in torch.randint(3, TINY.vocab_size, (40,), generator=torch.Generator().manual_seed(7))]
    want = _prefill_then_decode(forward_unfused, model, ids, steps=4)
    got = _prefill_then_decode(lambda m, i, p, kv: m(i, p, kv), model, ids, steps=4)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_dispatch_picks_the_backend_for_each_small_op(monkeypatch):
    if kernels.rms_norm_triton is None:
        pytest.skip("triton is not installed")
    calls = []
    for op in ("rms_norm", "rope", "swiglu"):
        for backend in ("reference", "triton"):
            monkeypatch.setattr(kernels, f"{op}_{backend}", lambda *a, _n=f"{op}_{backend}": calls.append(_n))
    x = torch.zeros(2, 8)
    for backend in ("reference", "triton"):
        kernels.force_backend(backend)
        kernels.rms_norm(x, x[0], 1e-5), kernels.rope(x, x, x, x), kernels.swiglu(x, x)
    kernels.force_backend(None)
    kernels.rms_norm(x, x[0], 1e-5), kernels.rope(x, x, x, x), kernels.swiglu(x, x)  # CPU tensors
    assert calls == ["rms_norm_reference", "rope_reference", "swiglu_reference",
                     "rms_norm_triton", "rope_triton", "swiglu_triton",
                     "rms_norm_reference", "rope_reference", "swiglu_reference"]


# ---------------------------------------------------------------- Triton (interpreted) against references

def _probe():
    from kernels import triton_rms_norm
    return triton_rms_norm._rms_norm_kernel


@pytest.fixture(scope="module")
def interpreted():
    yield from triton_interpreter.kernels_or_skip(kernels.rms_norm_triton is not None, _probe,
                                                  rms_norm=kernels.rms_norm_triton, rope=kernels.rope_triton,
                                                  swiglu=kernels.swiglu_triton)


def test_interpreted_tests_in_a_fresh_process():
    triton_interpreter.rerun_if_not_interpreted(kernels.rms_norm_triton is not None, _probe, __file__)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("tokens,hidden", [(1, 576), (13, 576), (3, 100), (2, 1), (4, 2048)])
def test_triton_rms_norm_matches_reference(interpreted, dtype, with_residual, tokens, hidden):
    x = randn(tokens, hidden, dtype=dtype, seed=tokens, scale=3.0)
    residual = randn(tokens, hidden, dtype=dtype, seed=hidden, scale=3.0) if with_residual else None
    weight = (1 + randn(hidden, seed=8, scale=0.2)).to(dtype)
    normed, stream = interpreted.rms_norm(x, weight, 1e-5, residual)
    want_normed, want_stream = ref.rms_norm(x, weight, 1e-5, residual)
    assert_matches(normed, want_normed, max_ulps=2)          # eager rounds twice (ulps.py)
    assert_matches(stream, want_stream)
    assert (stream is x) == (not with_residual)  # without a residual the stream is x itself, not a copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_rms_norm_reads_strided_rows_and_leading_dims(interpreted, dtype):
    wide = randn(6, 700, dtype=dtype, seed=9)
    x, residual = wide[:, :576], randn(576, 6, dtype=dtype, seed=10).t()  # row stride 700; a transpose
    weight = randn(576, dtype=dtype, seed=11)
    got, want = interpreted.rms_norm(x, weight, 1e-6, residual), ref.rms_norm(x, weight, 1e-6, residual)
    assert_matches(got[0], want[0], max_ulps=2)              # normed: rounded twice (ulps.py)
    assert_matches(got[1], want[1])                          # the stream x + residual: rounded once
    x3 = randn(2, 3, 576, dtype=dtype, seed=12)  # [batch, tokens, hidden]
    assert_matches(interpreted.rms_norm(x3, weight, 1e-5)[0], ref.rms_norm(x3, weight, 1e-5)[0], max_ulps=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (5, 1, 48), (4, 4, 16)])
@pytest.mark.parametrize("theta", [10000.0, 100000.0])
def test_triton_rope_matches_reference(interpreted, dtype, heads, kv_heads, head_dim, theta):
    cos, sin = rope_cos_sin(torch.tensor(POSITIONS), head_dim, theta)
    q = randn(len(POSITIONS), heads, head_dim, dtype=dtype, seed=heads)
    k = randn(len(POSITIONS), kv_heads, head_dim, dtype=dtype, seed=kv_heads + 100)
    for got, want in zip(interpreted.rope(q, k, cos, sin), ref.rope(q, k, cos, sin)):
        # x*cos - y*sin may cancel (ulps.py): float32's error is set by the inputs, ~1.5 eps × |x| ≤ 1e-6
        # for unit-normal x (|x| < 6), inside atol 1e-5
        assert_matches(got, want, atol=1e-5)
        assert got.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_rope_reads_q_and_k_as_views_of_one_fused_qkv(interpreted, dtype):
    T, H, KV, D = 6, 9, 3, 64
    qkv = randn(T, (H + 2 * KV) * D, dtype=dtype, seed=13)  # what one fused wqkv projection would give
    q = qkv[:, : H * D].view(T, H, D)
    k = qkv[:, H * D: (H + KV) * D].view(T, KV, D)
    assert not q.is_contiguous() and not k.is_contiguous()
    cos, sin = rope_cos_sin(torch.tensor([3, 90, 91, 92, 5000, 8000]), D, 100000.0)
    before = qkv.clone()
    for got, want in zip(interpreted.rope(q, k, cos, sin), ref.rope(q, k, cos, sin)):
        assert_matches(got, want, atol=1e-5)                 # cancels: as above
    assert torch.equal(qkv, before)  # inputs untouched: the rotated q, k are new tensors


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's numpy, as intended
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens,width", [(1, 1536), (5, 1000), (2, 3000), (3, 1)])
def test_triton_swiglu_matches_reference(interpreted, dtype, tokens, width):
    gate = randn(tokens, width, dtype=dtype, seed=width, scale=6.0)
    gate[0, 0], gate[-1, -1] = -100.0, 100.0  # exp(-gate) overflows / vanishes
    up = randn(tokens, width, dtype=dtype, seed=tokens)
    assert_matches(interpreted.swiglu(gate, up), ref.swiglu(gate, up), max_ulps=2)   # silu rounds, then the product


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_swiglu_on_the_halves_of_a_fused_gate_up(interpreted, dtype):
    gate_up = randn(4, 2 * 1536, dtype=dtype, seed=14, scale=3.0)
    gate, up = gate_up[:, :1536], gate_up[:, 1536:]
    assert_matches(interpreted.swiglu(gate, up), ref.swiglu(gate, up), max_ulps=2)


def test_triton_small_ops_accept_zero_tokens(interpreted):
    x, w = torch.empty(0, 576), torch.ones(576)
    normed, stream = interpreted.rms_norm(x, w, 1e-5, torch.empty(0, 576))
    assert normed.shape == stream.shape == (0, 576)
    q, k = interpreted.rope(torch.empty(0, 9, 64), torch.empty(0, 3, 64), torch.empty(0, 32), torch.empty(0, 32))
    assert q.shape == (0, 9, 64) and k.shape == (0, 3, 64)
    assert interpreted.swiglu(torch.empty(0, 1536), torch.empty(0, 1536)).shape == (0, 1536)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_model_wired_to_interpreted_triton_matches_the_model(interpreted, dtype, monkeypatch):
    kernels.force_backend("triton")
    model = Llama.random(TINY, seed=1).to(dtype).eval()
    ids = [int(t) for t in torch.randint(3, TINY.vocab_size, (24,), generator=torch.Generator().manual_seed(8))]
    got = _prefill_then_decode(lambda m, i, p, kv: m(i, p, kv), model, ids, steps=2)
    want = _prefill_then_decode(forward_unfused, model, ids, steps=2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), rtol=1e-5 if dtype == torch.float32 else 2e-2,
                                   atol=1e-5 if dtype == torch.float32 else 2e-2)



def drift_from_float32(device: str) -> dict[str, float]:
    """How far bf16 logits move from the float32 model's, through the unfused formula (plain PyTorch) and
    through the model, whose small ops go to whatever backend `device` dispatches to: SmolLM2's shapes, random
    weights (norm weights too), a 128-token prefill and 8 decode steps.

    In bf16 any one-ulp change anywhere (a float32 sum in another order, an FMA) spreads to the level of bf16's
    own rounding noise within a few layers, so the yardstick is that noise, measured in the same run: the
    unfused bf16 formula against the float32 one. A wrong rotation angle or a lost residual lands far outside it.
    """
    cfg = ModelConfig()
    model32 = Llama.random(cfg, seed=0).to(device).eval()
    gen = torch.Generator().manual_seed(10)
    with torch.no_grad():
        for name, p in model32.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
    model16 = copy.deepcopy(model32).to(torch.bfloat16)
    ids = [int(t) for t in torch.randint(3, cfg.vocab_size, (136,), generator=torch.Generator().manual_seed(9))]

    def model_forward(m, i, p, kv):
        return m(i, p, kv)

    with torch.no_grad():
        want32 = model32.compute_logits(torch.cat(_prefill_then_decode(forward_unfused, model32, ids, steps=8)))
        eager16 = model16.compute_logits(torch.cat(_prefill_then_decode(forward_unfused, model16, ids, steps=8)))
        fused16 = model16.compute_logits(torch.cat(_prefill_then_decode(model_forward, model16, ids, 8)))

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    def same_greedy(a, b):
        return (a.argmax(-1) == b.argmax(-1)).float().mean().item()

    return {"eager_rel": rel(eager16, want32), "fused_rel": rel(fused16, eager16),
            "eager_greedy": same_greedy(eager16, want32), "fused_greedy": same_greedy(fused16, want32)}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or kernels.rms_norm_triton is None, reason="needs CUDA and triton")
def test_model_wired_to_the_triton_kernels_stays_within_bf16_noise_on_cuda(monkeypatch):
    kernels.force_backend(None)
    assert kernels.backend_for(torch.device("cuda")) == "triton"
    d = drift_from_float32("cuda")
    # Logits: the kernels move them no further from eager bf16 than bf16 itself is from float32 (x2 slack);
    # greedy tokens (teacher-forced, 136 positions): as often the float32 model's as eager bf16's, less 5%.
    # Simulated on CPU: feeding rope the previous token's angles gave 3.4x and 97% -> 79% (fails both);
    # random one-ulp flips in 0.01% of the kernels' outputs gave 0.8x and 98% (passes).
    assert d["fused_rel"] <= 2 * d["eager_rel"], d
    assert d["fused_greedy"] >= d["eager_greedy"] - 0.05, d
