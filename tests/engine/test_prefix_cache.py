"""Prefix caching through the whole engine: a shared system prompt is computed once."""
from __future__ import annotations

import random

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.unpaged import unpaged_generate
from engine.sampling_params import SamplingParams
from tests.helpers.tiny import TINY

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=3).eval()


def run(engine: LLMEngine, request_id: str, prompt: list[int]) -> list[int]:
    engine.add_request(request_id, prompt, GREEDY)
    while engine.has_unfinished():
        engine.step()
    return engine.take_output(request_id).outputs[0].token_ids


@pytest.mark.parametrize("chunked", [True, False])
def test_second_request_computes_only_its_new_blocks(model, chunked):
    rng = random.Random(0)
    system = [rng.randrange(256) for _ in range(200)]
    first = system + [rng.randrange(256) for _ in range(30)]
    second = system + [rng.randrange(256) for _ in range(45)]
    engine = LLMEngine(model, EngineConfig(block_size=16, enable_chunked_prefill=chunked,
                                           max_num_batched_tokens=64 if chunked else 512))
    assert run(engine, "first", first) == unpaged_generate(model, first, 8)
    assert run(engine, "second", second) == unpaged_generate(model, second, 8)

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


def test_colliding_hashes_never_give_a_false_hit(model, monkeypatch):
    """Force every block to the same hash: only blocks whose parent hash and tokens match are shared,
    and the engine still computes exactly the reference's tokens."""
    from engine.core import block_manager

    monkeypatch.setattr(block_manager, "hash_block", lambda parent, tokens: 42)
    bm = block_manager.BlockManager(8, 4)
    a, b = [1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 5, 5, 6, 7, 8, 9]     # first blocks differ in one token
    bm.allocate_slots("a", 0, len(a))
    bm.cache_full_blocks("a", a, len(a))
    assert bm.find_cached_prefix(b).num_tokens == 0                      # same hash, other tokens: a miss
    assert bm.find_cached_prefix(a).num_tokens == 4                      # the real owner still hits
    rng = random.Random(5)
    shared = [rng.randrange(256) for _ in range(40)]
    prompts = [shared + [rng.randrange(256) for _ in range(20)], [rng.randrange(256) for _ in range(60)],
               shared[:20] + [rng.randrange(256) for _ in range(40)]]
    engine = LLMEngine(model, EngineConfig(block_size=16))
    for i, prompt in enumerate(prompts):
        assert run(engine, str(i), prompt) == unpaged_generate(model, prompt, 8)
