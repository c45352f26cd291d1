"""LLM on top of the engine: concurrent callers share steps and get what they would get alone."""
from __future__ import annotations

import threading

import pytest

from engine import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm():
    llm = LLM(random_weights=True, device="cpu", max_num_batched_tokens=64)
    yield llm
    llm.close()


def test_concurrent_streams_match_one_at_a_time_generation(llm):
    prompts = ["a b c d e f g", "hello there, paged attention", "x" * 40]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    alone = [llm.generate(p, params)[0].token_ids for p in prompts]
    start = llm.engine.trace.num_steps
    got: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, [e.token_id for e in llm.stream(prompts[i], params)]))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [got[i] for i in range(3)] == alone
    records = llm.trace_since(start)
    assert records and max(len({e.request_id for e in r.entries}) for r in records) >= 2   # batched together
    assert llm.allocator_state().num_free == llm.engine.block_manager.num_blocks


def test_generate_batches_prompts_and_keeps_their_order(llm):
    prompts = ["one", "two two", "three three three"]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    assert [o.prompt for o in outs] == prompts and all(len(o.token_ids) == 4 for o in outs)
    assert all(o.metrics.ttft_s > 0 and len(o.metrics.itl_s) == 3 for o in outs)


def test_leaving_a_stream_early_frees_its_blocks(llm):
    stream = llm.stream("some prompt", SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True))
    next(stream)
    stream.close()
    assert not llm.engine.has_unfinished()
    assert llm.allocator_state().num_free == llm.engine.block_manager.num_blocks
