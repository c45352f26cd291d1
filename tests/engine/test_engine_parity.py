"""The paged, continuously batched engine produces exactly the reference model's greedy tokens.

16 concurrent requests with prompts of 5 to 600 tokens, in every combination of prefix caching,
chunked prefill, and (with a KV cache too small for all of them) both preemption modes.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.unpaged import unpaged_generate
from engine.sampling_params import SamplingParams
from tests.helpers.tiny import TINY

EOS = 2
MAX_TOKENS = 10


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model() -> Llama:
    torch.manual_seed(0)
    return Llama.random(TINY, seed=1).eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = random.Random(7)
    lengths = [5, 600] + [rng.randint(5, 600) for _ in range(14)]
    # A few prompts share a long common start, so prefix caching has something to find.
    shared = [rng.randrange(3, 256) for _ in range(100)]
    out = []
    for i, n in enumerate(lengths):
        tokens = [rng.randrange(3, 256) for _ in range(n)]
        if i % 4 == 1 and n > 120:
            tokens[:100] = shared
        out.append(tokens)
    return out


@pytest.fixture(scope="module")
def expected(model, prompts) -> list[list[int]]:
    return [unpaged_generate(model, p, MAX_TOKENS, EOS) for p in prompts]


def run_engine(model, prompts, **knobs) -> tuple[list[list[int]], LLMEngine]:
    engine = LLMEngine(model, EngineConfig(block_size=16, **knobs), eos_token_ids={EOS})
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        assert steps < 5000, "the engine stopped making progress"
    return [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(prompts))], engine


@pytest.mark.parametrize("preemption", [None, "recompute", "swap"])
@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "whole-prefill"])
@pytest.mark.parametrize("caching", [True, False], ids=["prefix-cache", "no-cache"])
def test_greedy_tokens_match_reference(model, prompts, expected, caching, chunked, preemption):
    knobs = dict(enable_prefix_caching=caching, enable_chunked_prefill=chunked,
                 # chunked: a budget far below the longest prompt, so prompts are split across steps;
                 # whole-prefill: the budget must hold a whole prompt (+ outputs, after a recompute).
                 max_num_batched_tokens=96 if chunked else 1024)
    if preemption is not None:
        # 16 requests need ~330 blocks in all; 60 blocks forces preemption while they decode.
        knobs.update(num_kv_blocks=60, preemption_mode=preemption)
    outputs, engine = run_engine(model, prompts, **knobs)
    assert outputs == expected
    records = list(engine.trace)
    if chunked:
        assert any(e.kind == "prefill" and e.num_tokens + e.num_computed_before < 500
                   and e.num_computed_before > 0 for r in records for e in r.entries), "no prompt was chunked"
        assert max(r.num_batched_tokens for r in records) <= 96
    preempted = [mode for r in records for _, mode in r.preempted]
    if preemption is None:
        assert not preempted
    else:
        assert preempted and set(preempted) == {preemption}
    # every step may mix prefill chunks and decodes
    assert any({"prefill", "decode"} <= {e.kind for e in r.entries} for r in records)
    # no leak: every block is free again, and nothing is left in the swap space
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
    assert not engine.block_manager.tables and not engine.block_manager.swapped


@pytest.mark.slow
def test_real_model_greedy_tokens_match_reference():
    from engine.loader.model_loader import load_model

    real, tokenizer = load_model(EngineConfig(device="cpu"))[:2]
    texts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land far away, there"]
    prompts = [tokenizer.encode(t).ids for t in texts]
    want = [unpaged_generate(real, p, 8, tokenizer.eos_token_id) for p in prompts]
    engine = LLMEngine(real, EngineConfig(block_size=4, num_kv_blocks=8, max_num_batched_tokens=8),
                       tokenizer=tokenizer)       # tiny blocks, budget and cache: chunking and preemption
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0.0, max_tokens=8))
    while engine.has_unfinished():
        engine.step()
    assert [engine.take_output(str(i)).outputs[0].token_ids for i in range(3)] == want
    assert any(r.preempted for r in engine.trace)
