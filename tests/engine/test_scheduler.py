"""Scheduling policy, read back from the step trace: one token budget, running first, chunked
prefill beside decodes, max_num_seqs, and static batching's admit-only-when-empty."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from tests.helpers.tiny import TINY


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=2).eval()


def params(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def drain(engine):
    while engine.has_unfinished():
        engine.step()


def test_budget_and_max_num_seqs_hold_every_step(model):
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_batched_tokens=50, max_num_seqs=3))
    for i in range(7):
        engine.add_request(str(i), list(range(i, i + 20 + 15 * i)), params(5 + i))
    drain(engine)
    for r in engine.trace:
        assert r.num_batched_tokens == sum(e.num_tokens for e in r.entries) <= 50
        assert r.num_running <= 3 and len(r.entries) <= 3
    assert all(len(engine.take_output(str(i)).outputs[0].token_ids) == 5 + i for i in range(7))


def test_long_prompt_is_chunked_while_running_requests_keep_decoding(model):
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_batched_tokens=32, enable_prefix_caching=False))
    for i in range(3):
        engine.add_request(f"chat{i}", list(range(i, i + 10)), params(30))
    engine.step()                                  # the three short prompts, prefilled together
    engine.add_request("doc", [t % 256 for t in range(300)], params(4))
    drain(engine)
    doc_steps = [(r.step, e) for r in engine.trace for e in r.entries if e.request_id == "doc"]
    chunks = [e for _, e in doc_steps if e.kind == "prefill"]
    assert len(chunks) >= 300 // 32 and sum(e.num_tokens for e in chunks) == 300
    for step, _ in doc_steps[:len(chunks)]:
        record = engine.trace.records[step]
        decodes = {e.request_id for e in record.entries if e.kind == "decode"}
        assert decodes == {"chat0", "chat1", "chat2"}          # running requests came first
    # ... and the prompt took whatever budget the three decodes left
    assert all(e.num_tokens == 32 - 3 for e in chunks[:-1])


def test_without_chunking_a_prompt_waits_for_a_whole_budget(model):
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_batched_tokens=120, enable_chunked_prefill=False))
    engine.add_request("a", list(range(100)), params(3))
    engine.add_request("b", list(range(50, 150)), params(3))
    drain(engine)
    prefills = [(r.step, e) for r in engine.trace for e in r.entries if e.kind == "prefill"]
    assert [e.num_tokens for _, e in prefills] == [100, 100]
    assert prefills[0][0] != prefills[1][0]           # both would not fit one budget: b waited


def test_static_batching_admits_only_into_an_empty_batch_and_holds_finished_requests(model):
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_seqs=3), static_batching=True)
    lengths = [2, 12, 4, 3, 9]
    for i, n in enumerate(lengths):
        engine.add_request(str(i), list(range(i, i + 10)), params(n))
    drain(engine)
    outs = [engine.take_output(str(i)) for i in range(5)]
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths       # padding tokens never reach the output
    first_batch, second_batch = outs[:3], outs[3:]
    # no early exit: everyone in a batch is released when its longest member is done
    assert len({o.metrics.finished_s for o in first_batch}) == 1
    assert len({o.metrics.finished_s for o in second_batch}) == 1
    admitted = {e.request_id: r.step for r in engine.trace for e in reversed(r.entries) if e.kind == "prefill"}
    release = [r.step for r in engine.trace if r.finished]
    assert admitted["3"] > release[0] and admitted["4"] > release[0]
    # the finished members kept computing (padding) until the batch ended
    assert all(len(r.entries) == 3 for r in engine.trace if r.step <= release[0])
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_continuous_batching_lets_finished_requests_leave_at_once(model):
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_seqs=3))
    for i, n in enumerate([2, 12, 4, 3, 9]):
        engine.add_request(str(i), list(range(i, i + 10)), params(n))
    drain(engine)
    finished_at = {name: r.step for r in engine.trace for name in r.finished}
    admitted = {e.request_id: r.step for r in engine.trace for e in reversed(r.entries) if e.kind == "prefill"}
    assert finished_at["0"] < finished_at["1"]
    assert admitted["3"] == finished_at["0"] + 1               # the freed seat is taken the very next step


def test_static_batch_fills_every_seat_before_it_decodes(model):
    """A long prompt does not run alone: the batch takes all its seats at once, chunks the long prompt
    over several steps beside the short ones, and decodes only once every prompt is in the cache."""
    budget, seats = 32, 4
    engine = LLMEngine(model, EngineConfig(block_size=8, max_num_seqs=seats, max_num_batched_tokens=budget),
                       static_batching=True)
    prompts = [[t % 256 for t in range(150)]] + [list(range(i, i + 10)) for i in range(1, 6)]
    lengths = [3, 6, 2, 5, 4, 3]
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        engine.add_request(str(i), p, params(n))
    drain(engine)
    records = list(engine.trace)
    assert records[0].num_running == seats                  # every seat taken in the first step
    first_decode = min(r.step for r in records if any(e.kind == "decode" for e in r.entries))
    prefill = [e for r in records if r.step < first_decode for e in r.entries]
    assert all(e.kind == "prefill" for e in prefill)
    assert {e.request_id for e in prefill} == {"0", "1", "2", "3"}
    assert sum(e.num_tokens for e in prefill if e.request_id == "0") == 150    # chunked, all of it
    assert first_decode >= 150 // budget                     # several steps of chunks before anyone decodes
    assert all(r.num_batched_tokens <= budget for r in records)
    release = min(r.step for r in records if r.finished)
    batch = [r for r in records if r.step <= release]
    assert all(len(r.entries) == seats for r in batch if r.step >= first_decode)    # seats held
    assert sum(r.num_padding_tokens for r in batch) > 0 and all(
        e.padding == (e.kind == "decode" and e.num_computed_before >= len(prompts[int(e.request_id)]) + lengths[int(e.request_id)] - 1)
        for r in batch for e in r.entries)
    outs = [engine.take_output(str(i)) for i in range(6)]
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths
    assert len({o.metrics.finished_s for o in outs[:seats]}) == 1
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
