"""The distributed path with NCCL on one GPU (world size 1): what can run without a second GPU.

Tensor/pipeline parallelism over several GPUs is exercised by the multi-GPU commands in
docs/ARCHITECTURE.md ("Parallel workers"); on one GPU this checks that the NCCL process group, the gloo
group for records, the executor and the shard runner give the same tokens as the plain engine, and that
an NCCL all-reduce is counted (bytes) and timed with CUDA events.
"""
from __future__ import annotations

import os
from functools import partial

import pytest
import torch
import torch.distributed as dist

from engine.config import EngineConfig, ModelConfig
from engine.distributed import parallel_engine
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SMOL = ModelConfig()
CUDA, BF16 = torch.device("cuda", 0), torch.bfloat16


def greedy(engine, prompts, max_tokens=24):
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", p, params)
    while engine.has_unfinished():
        engine.step()
    return [engine.take_output(f"r{i}").outputs[0].token_ids for i in range(len(prompts))]


def test_nccl_world_of_one_gives_the_plain_engines_tokens_and_counts_an_all_reduce():
    build = partial(Llama.random, SMOL, 0)
    # eager both ways: the shard runner has no CUDA graphs, and bf16 ties must break the same way
    cfg = EngineConfig(device="cuda", num_kv_blocks=512, max_num_batched_tokens=256, enforce_eager=True)
    prompts = [list(range(10, 10 + n)) for n in (5, 300, 37)]      # 300: a prefill in two chunks
    want = greedy(LLMEngine(build().to(CUDA, BF16).eval().requires_grad_(False), cfg), prompts)
    engine = parallel_engine(build(), build, EngineConfig(**{**{f: getattr(cfg, f) for f in cfg.__slots__},
                                                             "tensor_parallel_size": 1}), CUDA, BF16)
    try:
        assert dist.get_backend() == "nccl" and os.environ["NCCL_NVLS_ENABLE"] == "0"
        assert greedy(engine, prompts) == want
        steps = [r.parallel for r in engine.trace]
        assert steps and all(p.ranks[0].comm["control"].calls == 1 for p in steps)      # the record, broadcast
        assert all(p.ranks[0].intervals and p.window_s > 0 for p in steps if p.micro_batch_tokens)
        comm = engine.runner.comm
        comm.start_step()
        x = torch.randn(128, SMOL.hidden_size, device=CUDA, dtype=BF16)
        y = comm.all_reduce(x.clone())                                   # NCCL, a world of one: the sum is x
        counted = comm.take_step().comm["all_reduce"]
        assert torch.equal(x, y)
        assert counted.calls == 1 and counted.bytes == 128 * SMOL.hidden_size * 2
        assert counted.seconds >= 0.0          # CUDA events around it (a world of one may do no work at all)
    finally:
        engine.close()
    assert not dist.is_initialized()


# -- several GPUs (one per rank): skipped unless the machine has them -----------------------------------
@pytest.mark.parametrize("tp,pp", [(3, 1), (1, 2), (1, 3)], ids=["tp3", "pp2", "pp3"])
def test_split_over_gpus_gives_the_single_gpu_tokens(tp, pp):
    """float32, so the partial sums' order cannot flip a greedy choice of the tiny model: the same tokens."""
    if torch.cuda.device_count() < tp * pp:
        pytest.skip(f"needs {tp * pp} GPUs")
    from tests.helpers.parallel_tiny import PROMPTS, T3, tiny3
    cfg = EngineConfig(device="cuda", num_kv_blocks=64, max_num_batched_tokens=32)
    want = greedy(LLMEngine(tiny3().to(CUDA).eval().requires_grad_(False), cfg), PROMPTS, 8)
    split = EngineConfig(**{**{f: getattr(cfg, f) for f in cfg.__slots__},
                            "tensor_parallel_size": tp, "pipeline_parallel_size": pp})
    engine = parallel_engine(tiny3(), tiny3, split, CUDA, torch.float32)
    try:
        assert greedy(engine, PROMPTS, 8) == want
        for rec in engine.trace:
            p = rec.parallel
            if tp > 1:
                assert p.all_reduce.calls == 2 * T3.num_layers
                assert p.all_reduce.bytes == p.all_reduce.calls * rec.num_batched_tokens * T3.hidden_size * 4
                assert p.all_reduce.seconds > 0                      # CUDA events around each NCCL call
            if pp > 1:
                assert p.total("send").bytes == (pp - 1) * rec.num_batched_tokens * T3.hidden_size * 4
    finally:
        engine.close()
    assert not dist.is_initialized()
