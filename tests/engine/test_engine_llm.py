"""LLM on top of the engine: concurrent callers share steps and get what they would get alone."""
from __future__ import annotations

import threading

import pytest

from engine import LLM, SamplingParams


@pytest.fixture(scope="module")
def random_llm():
    """SmolLM2's shapes with random values (mechanics only; the real model is the `llm` fixture)."""
    random_llm = LLM(random_weights=True, device="cpu", max_num_batched_tokens=64)
    yield random_llm
    random_llm.close()


def test_concurrent_streams_match_one_at_a_time_generation(random_llm):
    prompts = ["a b c d e f g", "hello there, paged attention", "x" * 40]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    alone = [random_llm.generate(p, params)[0].outputs[0].token_ids for p in prompts]
    start = random_llm.engine.trace.num_steps
    got: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i: got.__setitem__(i, [e.token_id for e in random_llm.stream(prompts[i], params)]))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [got[i] for i in range(3)] == alone
    records = random_llm.trace_since(start)
    assert records and max(len({e.request_id for e in r.entries}) for r in records) >= 2   # batched together
    assert random_llm.allocator_state().num_free == random_llm.engine.block_manager.num_blocks


def test_generate_batches_prompts_and_keeps_their_order(random_llm):
    prompts = ["one", "two two", "three three three"]
    outs = random_llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    assert [o.prompt for o in outs] == prompts and all(len(o.outputs[0].token_ids) == 4 for o in outs)
    assert all(o.metrics.ttft_s > 0 and len(o.metrics.itl_s) == 3 for o in outs)


def test_leaving_a_stream_early_frees_its_blocks(random_llm):
    stream = random_llm.stream("some prompt", SamplingParams(temperature=0.0, max_tokens=50, ignore_eos=True))
    next(stream)
    stream.close()
    assert not random_llm.engine.has_unfinished()
    assert random_llm.allocator_state().num_free == random_llm.engine.block_manager.num_blocks


def test_stream_takes_token_ids_as_the_exact_prompt(random_llm):
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    ids = random_llm.tokenizer.encode("a b c d e f g").ids
    start = random_llm.num_steps()
    by_ids = [e.token_id for e in random_llm.stream({"prompt_token_ids": ids}, params)]
    assert by_ids == random_llm.generate("a b c d e f g", params)[0].outputs[0].token_ids
    prefill = [e for r in random_llm.trace_since(start) for e in r.entries if e.kind == "prefill"][0]
    assert prefill.num_tokens + prefill.num_cached_tokens == len(ids)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        next(random_llm.stream({"prompt_token_ids": [random_llm.config.vocab_size]}, params))
    with pytest.raises(TypeError, match="chat=True"):
        next(random_llm.stream({"prompt_token_ids": ids}, params, chat=True))


def test_sandbox_shares_the_weights_and_nothing_else(random_llm):
    box = random_llm.sandbox(num_kv_blocks=8, max_num_seqs=2, enable_prefix_caching=False)
    assert box.model is random_llm.model                                     # the same module ...
    assert box.model.embed.weight.data_ptr() == random_llm.model.embed.weight.data_ptr()   # ... the same tensors
    assert box.block_manager is not random_llm.engine.block_manager and box.block_manager.num_blocks == 8
    assert box.kv_cache.kv[0].data_ptr() != random_llm.engine.kv_cache.kv[0].data_ptr()
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    ids = random_llm.tokenizer.encode("the sandbox steps when told").ids
    box.add_request("mine", ids, params)
    shared_before = random_llm.allocator_state()
    tokens = [e.token_id for e in box.step()]                        # the prefill: blocks taken in the sandbox only
    assert box.allocator_state().tables["mine"] and random_llm.allocator_state().tables == shared_before.tables
    assert random_llm.allocator_state().num_free == shared_before.num_free
    while box.has_unfinished():
        tokens += [e.token_id for e in box.step()]
    assert len(tokens) == 5 and box.num_free_blocks() == 8             # finished: its blocks are back
    assert box.take_output("mine").outputs[0].token_ids == [e.token_id for e in random_llm.stream({"prompt_token_ids": ids}, params)]   # same model, same tokens
    assert box.trace.num_steps == 5                                    # its own trace: 1 prefill + 4 decodes


def test_sandbox_limits_and_static_batching(random_llm):
    with pytest.raises(ValueError):
        random_llm.sandbox(num_kv_blocks=0)
    with pytest.raises(ValueError, match="MiB"):                     # the pool is bounded in bytes
        random_llm.sandbox(num_kv_blocks=100_000)
    with pytest.raises(ValueError):
        random_llm.sandbox(device="cpu")
    with pytest.raises(TypeError):
        random_llm.sandbox(no_such_knob=1)
    box = random_llm.sandbox(num_kv_blocks=2, block_size=4)
    with pytest.raises(ValueError):                                   # 2 blocks of 4 cannot hold 9 tokens
        box.add_request("long", list(range(5, 10)), SamplingParams(max_tokens=4))
    static = random_llm.sandbox(num_kv_blocks=8, static_batching=True)
    assert type(static.scheduler).__name__ == "StaticBatchScheduler"
    assert type(random_llm.sandbox().scheduler) is type(random_llm.engine.scheduler)
