"""CUDA graphs and the sync-free step on a real GPU (marker gpu): same tokens with and without graphs,
logits within bf16 noise of the CPU's float32 model, one host sync per step, a failed capture falls back.
"""
from __future__ import annotations

import copy
import os
import random

import pytest
import torch
from tests.helpers.host_waits import host_waits_per_step
from tests.helpers.unfused_llama import forward_unfused

import kernels
from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import ContiguousKV, Llama
from engine.sampling_params import SamplingParams
from engine.unpaged import unpaged_generate
from tests.helpers.tiny import SMALL

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or kernels.paged_attention_triton is None,
                       reason="needs CUDA and triton"),
]



@pytest.fixture(autouse=True)
def _restore_backend():
    yield
    kernels.force_backend(os.environ.get("KERNELS_BACKEND"))


def run(engine: LLMEngine, prompts, params) -> list[list[int]]:
    params = params if isinstance(params, list) else [params] * len(prompts)
    for i, (p, sp) in enumerate(zip(prompts, params)):
        engine.add_request(str(i), p, sp)
    while engine.has_unfinished():
        engine.step()
    return [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(prompts))]


def small_prompts(n=16, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, SMALL.vocab_size) for _ in range(rng.randint(5, 300))] for _ in range(n)]


def test_greedy_tokens_with_cuda_graphs_equal_eager_and_the_unpaged_loop():
    model = Llama.random(SMALL, seed=0).to("cuda").eval()     # float32: no bf16 ties to break differently
    prompts = small_prompts()
    params = [SamplingParams(temperature=0.0, max_tokens=8 + 2 * i) for i in range(len(prompts))]
    knobs = dict(block_size=16, num_kv_blocks=800, max_num_seqs=16, max_num_batched_tokens=1024)
    graphed = LLMEngine(model, EngineConfig(**knobs), eos_token_ids=())
    assert graphed.runner.graphs is not None, graphed.runner
    with_graphs = run(graphed, prompts, params)
    without = run(LLMEngine(model, EngineConfig(enforce_eager=True, **knobs), eos_token_ids=()), prompts, params)
    assert with_graphs == without == [unpaged_generate(model, p, sp.max_tokens) for p, sp in zip(prompts, params)]
    sizes = {r.cuda_graph_batch for r in graphed.trace if r.cuda_graph_batch}
    assert len(sizes) >= 4, sizes                                 # the batch shrank through several rungs
    assert all(r.gpu_forward_s is not None and r.gpu_forward_s > 0 for r in graphed.trace if r.cuda_graph_batch)


def _record_logits(engine: LLMEngine) -> dict[int, list[torch.Tensor]]:
    """Every sampled row's logits, by sequence, as the runner hands them to the sampler."""
    seen: dict[int, list[torch.Tensor]] = {}
    original = engine.runner.sample

    def sample(out, inputs, logits, result, timer=None):
        rows = inputs.sampling.rows.tolist()
        for seq_id, row in zip(inputs.draw_seq_ids, rows):
            seen.setdefault(seq_id, []).append(logits[row].float().cpu())
        return original(out, inputs, logits, result, timer)

    engine.runner.sample = sample
    return seen


def test_bf16_logits_with_graphs_stay_within_bf16_noise_of_the_cpu_float32_model():
    cfg = ModelConfig()
    cpu32 = Llama.random(cfg, seed=0).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in cpu32.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
    gpu16 = copy.deepcopy(cpu32).to("cuda", torch.bfloat16)
    rng = random.Random(2)
    prompts = [[rng.randrange(3, cfg.vocab_size) for _ in range(rng.randint(60, 200))] for _ in range(6)]
    engine = LLMEngine(gpu16, EngineConfig(block_size=16, num_kv_blocks=256, max_num_seqs=8, max_model_len=1024),
                       eos_token_ids=())
    seen = _record_logits(engine)
    tokens = run(engine, prompts, SamplingParams(temperature=0.0, max_tokens=12))
    assert any(r.cuda_graph_batch for r in engine.trace)

    def rel(a, b):
        return ((a - b).norm() / b.norm()).item()

    with torch.inference_mode():
        for seq_id, (prompt, out) in enumerate(zip(prompts, tokens)):
            ids = prompt + out[:-1]                                 # teacher-forced: the engine's own tokens
            positions = slice(len(prompt) - 1, len(ids))
            want = cpu32.compute_logits(cpu32(torch.tensor(ids), torch.arange(len(ids)), ContiguousKV(cfg.num_layers)))
            ref16 = forward_unfused(gpu16, torch.tensor(ids, device="cuda"), torch.arange(len(ids), device="cuda"),
                                    ContiguousKV(cfg.num_layers))
            ref16 = gpu16.compute_logits(ref16).float().cpu()[positions]
            got = torch.stack(seen[seq_id])
            want = want[positions]
            assert got.shape == want.shape
            # The yardstick is bf16's own noise, measured here: plain PyTorch bf16 against float32.
            assert rel(got, want) <= 2 * rel(ref16, want) + 1e-3, (seq_id, rel(got, want), rel(ref16, want))
            assert (got.argmax(-1) == torch.tensor(out)).all()      # the engine sampled what it computed


def test_one_host_sync_per_step():
    """set_sync_debug_mode flags every operation that makes the host wait for the device."""
    model = Llama.random(ModelConfig(), seed=0).to("cuda", torch.bfloat16).eval()
    engine = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=512, max_num_seqs=16, max_model_len=2048,
                                           max_num_batched_tokens=4096), eos_token_ids=())
    rng = random.Random(3)
    params = [SamplingParams(temperature=0.0, max_tokens=20), SamplingParams(temperature=0.8, top_p=0.9, max_tokens=20),
              SamplingParams(temperature=1.0, top_k=40, seed=7, max_tokens=20)]
    for i in range(12):
        if i == 9:
            engine.step()                                           # first step: lazy initialisation may sync
        engine.add_request(str(i), [rng.randrange(3, 40000) for _ in range(rng.randint(20, 300))], params[i % 3])
    counts = host_waits_per_step(engine)                            # (the next step mixes prefills and decodes)
    assert counts and all(n == 1 for n, _ in counts), [(n, r.cuda_graph_batch, r.num_prefill_tokens) for n, r in counts]
    assert sum(1 for _, r in counts if r.cuda_graph_batch) >= 10
    assert any(r.num_prefill_tokens and r.num_decode_tokens for _, r in counts)   # an eager mixed step too


def test_a_capture_that_fails_on_the_gpu_falls_back_to_eager(capsys):
    """The reference attention reads seq_lens on the host (.tolist()): not allowed while capturing."""
    kernels.force_backend("reference")
    model = Llama.random(SMALL, seed=0).to("cuda").eval()
    engine = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=200, max_num_seqs=4), eos_token_ids=())
    assert engine.runner.graphs is None
    assert "CUDA graphs off" in capsys.readouterr().err
    prompts = small_prompts(4, seed=5)
    assert run(engine, prompts, SamplingParams(temperature=0.0, max_tokens=6)) == \
        [unpaged_generate(model, p, 6) for p in prompts]
