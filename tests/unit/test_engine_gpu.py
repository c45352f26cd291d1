"""The engine on a GPU: Triton kernels inside the full loop give the reference model's tokens."""
from __future__ import annotations

import random

import pytest
import torch

import kernels
from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.model import Llama
from engine.reference import reference_generate
from engine.sampling_params import SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or kernels.paged_attention_triton is None,
                       reason="needs CUDA and triton"),
]

SMALL = ModelConfig(num_layers=4, hidden_size=128, num_heads=4, num_kv_heads=2, head_dim=32,
                    intermediate_size=256, vocab_size=512, max_position_embeddings=4096, name="small-random")


@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_greedy_parity_on_cuda_with_chunking_prefix_cache_and_preemption(preemption):
    model = Llama.random(SMALL, seed=0).to("cuda").eval()
    assert kernels.backend_for(torch.device("cuda")) == "triton"
    rng = random.Random(0)
    shared = [rng.randrange(3, 512) for _ in range(64)]
    prompts = [(shared if i % 3 == 0 else []) + [rng.randrange(3, 512) for _ in range(rng.randint(5, 700))]
               for i in range(16)]
    want = [reference_generate(model, p, 16) for p in prompts]
    engine = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=120, max_num_batched_tokens=256,
                                           preemption_mode=preemption))
    engine.eos_token_ids = frozenset()
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0.0, max_tokens=16))
    while engine.has_unfinished():
        engine.step()
    assert [engine.take_output(str(i)).token_ids for i in range(16)] == want
    assert any(r.preempted for r in engine.trace) and any(r.prefix_hit_tokens for r in engine.trace)
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_bf16_real_shapes_run_and_free_everything():
    model = Llama.random(ModelConfig(), seed=0).to("cuda", torch.bfloat16).eval()
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_batched_tokens=512))
    for i in range(8):
        engine.add_request(str(i), list(range(100 + 50 * i)), SamplingParams(temperature=0.8, top_p=0.9, max_tokens=32, seed=i))
    while engine.has_unfinished():
        engine.step()
    assert all(len(engine.take_output(str(i)).token_ids) >= 1 for i in range(8))
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
