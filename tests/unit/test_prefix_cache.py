"""Prefix caching through the whole engine: a shared system prompt is computed once."""
from __future__ import annotations

import random

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model import Llama
from engine.reference import reference_generate
from engine.sampling_params import SamplingParams
from tiny import TINY

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=3).eval()


def run(engine: LLMEngine, request_id: str, prompt: list[int]) -> list[int]:
    engine.add_request(request_id, prompt, GREEDY)
    while engine.has_unfinished():
        engine.step()
    return engine.take_output(request_id).token_ids


@pytest.mark.parametrize("chunked", [True, False])
def test_second_request_computes_only_its_new_blocks(model, chunked):
    rng = random.Random(0)
    system = [rng.randrange(256) for _ in range(200)]
    first = system + [rng.randrange(256) for _ in range(30)]
    second = system + [rng.randrange(256) for _ in range(45)]
    engine = LLMEngine(model, EngineConfig(block_size=16, enable_chunked_prefill=chunked,
                                           max_num_batched_tokens=64 if chunked else 512))
    assert run(engine, "first", first) == reference_generate(model, first, 8)
    assert run(engine, "second", second) == reference_generate(model, second, 8)

    prefill = [e for r in engine.trace for e in r.entries if e.request_id == "second" and e.kind == "prefill"]
    cached = 200 // 16 * 16                      # the 12 full blocks of the system prompt
    assert prefill[0].num_cached_tokens == cached
    assert prefill[0].num_computed_before == cached
    assert sum(e.num_tokens for e in prefill) == len(second) - cached
    hit = [r for r in engine.trace if any(e.request_id == "second" and e.num_cached_tokens for e in r.entries)]
    assert hit[0].prefix_hit_tokens == cached and hit[0].blocks_shared == cached // 16


def test_without_prefix_caching_everything_is_recomputed(model):
    rng = random.Random(1)
    system = [rng.randrange(256) for _ in range(200)]
    engine = LLMEngine(model, EngineConfig(block_size=16, enable_prefix_caching=False))
    run(engine, "first", system + [1, 2, 3])
    run(engine, "second", system + [4, 5, 6])
    prefill = [e for r in engine.trace for e in r.entries if e.request_id == "second" and e.kind == "prefill"]
    assert sum(e.num_tokens for e in prefill) == 203 and prefill[0].num_cached_tokens == 0


def test_fully_cached_prompt_still_recomputes_its_last_token(model):
    prompt = list(range(32))                      # exactly two full blocks
    engine = LLMEngine(model, EngineConfig(block_size=16))
    out = run(engine, "a", prompt)
    assert run(engine, "b", prompt) == out
    entry = [e for r in engine.trace for e in r.entries if e.request_id == "b"][0]
    # the second block ends on the last prompt token, whose logits are needed: only block one is reused
    assert entry.num_cached_tokens == 16 and entry.num_tokens == 16
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
