"""The engine on a GPU: Triton kernels inside the full loop give the reference model's tokens."""
from __future__ import annotations

import random

import pytest
import torch

import kernels
from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.unpaged import unpaged_generate
from tests.helpers.tiny import SMALL
from engine.sampling_params import SamplingParams

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or kernels.paged_attention_triton is None,
                       reason="needs CUDA and triton"),
]



@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_greedy_parity_on_cuda_with_chunking_prefix_cache_and_preemption(preemption):
    model = Llama.random(SMALL, seed=0).to("cuda").eval()
    assert kernels.backend_for(torch.device("cuda")) == "triton"
    rng = random.Random(0)
    shared = [rng.randrange(3, 512) for _ in range(64)]
    prompts = [(shared if i % 3 == 0 else []) + [rng.randrange(3, 512) for _ in range(rng.randint(5, 700))]
               for i in range(16)]
    want = [unpaged_generate(model, p, 16) for p in prompts]
    engine = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=120, max_num_batched_tokens=256,
                                           preemption_mode=preemption), eos_token_ids=())
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0.0, max_tokens=16))
    while engine.has_unfinished():
        engine.step()
    assert [engine.take_output(str(i)).outputs[0].token_ids for i in range(16)] == want
    assert any(r.preempted for r in engine.trace) and any(r.prefix_hit_tokens for r in engine.trace)
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_bf16_real_shapes_run_and_free_everything():
    model = Llama.random(ModelConfig(), seed=0).to("cuda", torch.bfloat16).eval()
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_batched_tokens=512))
    for i in range(8):
        engine.add_request(str(i), list(range(100 + 50 * i)), SamplingParams(temperature=0.8, top_p=0.9, max_tokens=32, seed=i))
    while engine.has_unfinished():
        engine.step()
    assert all(len(engine.take_output(str(i)).outputs[0].token_ids) >= 1 for i in range(8))
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_kv_cache_is_sized_from_measured_free_memory():
    """gpu_memory_utilization caps weights + a step's activations + the KV cache together."""
    import gc
    gc.collect()
    torch.cuda.empty_cache()
    model = Llama.random(ModelConfig(), seed=0).to("cuda", torch.bfloat16).eval()
    free, total = torch.cuda.mem_get_info()
    # 5% more than what is already in use (other tests in this process may still hold memory): small
    # enough that the batch cap (max_num_seqs x max_model_len) does not bind
    utilization = (total - free) / total + 0.05
    engine = LLMEngine(model, EngineConfig(gpu_memory_utilization=utilization, max_num_batched_tokens=512))
    plan = engine.kv_plan
    assert plan.source == "measured" and plan.num_blocks >= 1
    assert plan.num_blocks < engine.config.max_num_seqs * -(-engine.max_model_len // engine.config.block_size)
    free, total = torch.cuda.mem_get_info()
    assert engine.kv_cache.total_bytes <= plan.budget_bytes
    # after the cache is allocated, this process (and whatever else runs) uses about the share asked for
    assert total - free <= utilization * total + 256 * 2**20
    engine.add_request("a", list(range(300)), SamplingParams(temperature=0.0, max_tokens=8))
    while engine.has_unfinished():
        engine.step()
    assert len(engine.take_output("a").outputs[0].token_ids) == 8
