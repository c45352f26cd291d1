"""EngineLoop: many threads streaming through one engine, batched together, aborts on early exit."""
from __future__ import annotations

import threading

import pytest

from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.model import Llama
from engine.reference import reference_generate
from engine.sampling_params import SamplingParams
from tiny import TINY

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_coroutine(coro):
    """asyncio.run on a fresh thread: the browser tests' Playwright keeps an event loop running on this one."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture
def loop():
    model = Llama.random(TINY, seed=6).eval()
    loop = EngineLoop(LLMEngine(model, EngineConfig(block_size=8, num_kv_blocks=64)))
    yield loop
    loop.close()


def test_concurrent_streams_are_batched_and_exact(loop):
    prompts = [list(range(i, i + 20 + 9 * i)) for i in range(6)]
    results: dict[int, list[int]] = {}

    def consume(i):
        results[i] = [ev.token_id for ev in loop.stream(prompts[i], GREEDY)]

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    model = loop.engine.model
    assert [results[i] for i in range(6)] == [reference_generate(model, p, 12) for p in prompts]
    assert max(len(r.entries) for r in loop.engine.trace) > 1          # they shared steps
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_stopping_early_aborts_and_frees_blocks(loop):
    stream = loop.stream(list(range(40)), SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))
    first = [next(stream) for _ in range(3)]
    assert not first[-1].finished
    stream.close()                                   # the reader went away
    assert not loop.engine.has_unfinished()
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_generate_returns_outputs_in_prompt_order_with_n_samples(loop):
    outs = loop.generate([(list(range(30)), "a"), (list(range(50, 60)), "b")],
                         SamplingParams(temperature=1.0, n=2, max_tokens=5, seed=3))
    assert [o.request_id.split(":")[1] for o in outs] == ["0", "1", "0", "1"]
    assert [o.prompt for o in outs] == ["a", "a", "b", "b"]
    assert all(len(o.token_ids) == 5 and o.metrics.ttft_s > 0 for o in outs)
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_a_failing_step_fails_the_open_requests_and_the_loop_keeps_serving(loop, monkeypatch):
    real_step = loop.engine.step
    monkeypatch.setattr(loop.engine, "step", lambda: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(RuntimeError):
        list(loop.stream(list(range(10)), GREEDY))
    monkeypatch.setattr(loop.engine, "step", real_step)
    assert len(list(loop.stream(list(range(10)), GREEDY))) == 12
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_state_can_be_read_between_steps_while_streams_run(loop):
    # long enough (400 steps) that the request is surely still running when the state is read
    stream = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    next(stream)
    state = loop.read(loop.engine.allocator_state)
    owned = [b for b in state.blocks if b.ref_count]
    assert owned and all(b.owners for b in owned)
    stream.close()
    assert loop.read(loop.engine.allocator_state).num_free == loop.engine.block_manager.num_blocks


def test_async_stream_yields_the_same_tokens_and_aborts_when_cancelled(loop):

    async def collect(limit=None):
        tokens = []
        agen = loop.astream(list(range(25)), GREEDY)
        async for ev in agen:
            tokens.append(ev.token_id)
            if limit and len(tokens) == limit:
                await agen.aclose()
                break
        return tokens

    full = run_coroutine(collect())
    assert full == [ev.token_id for ev in loop.stream(list(range(25)), GREEDY)]
    assert run_coroutine(collect(limit=3)) == full[:3]
    assert not loop.engine.has_unfinished()
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_cancelling_an_async_stream_mid_wait_frees_its_blocks(loop):
    import asyncio

    async def main():
        async def consume():
            async for _ in loop.astream(list(range(25)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)):
                pass
        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    run_coroutine(main())
    assert loop.read(lambda: not loop.engine.has_unfinished())
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_a_new_request_joins_a_running_batch_instead_of_waiting_for_it(loop):
    """The loop must not starve callers: a request submitted mid-stream of a long one joins the next
    step and finishes first, instead of waiting until the long one is done."""
    long = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    next(long)
    short = [ev.token_id for ev in loop.stream(list(range(5, 25)), GREEDY)]
    assert len(short) == GREEDY.max_tokens
    assert loop.read(lambda: loop.engine.has_unfinished())   # the long request is still running
    long.close()
