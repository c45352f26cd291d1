"""LLMEngine end to end: copy-on-write samples, seeded sampling, aborts, streaming, metrics."""
from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.unpaged import unpaged_generate
from engine.sampling_params import SamplingParams
from engine.core.scheduler import Scheduler
from engine.core.sequence import SequenceStatus
from engine.loader.tokenizer import byte_tokenizer
from tests.helpers.tiny import TINY


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=5).eval()


def drain(engine: LLMEngine) -> list:
    events = []
    while engine.has_unfinished():
        events += engine.step()
    return events


def test_n_samples_share_prompt_blocks_until_they_diverge(model):
    prompt = list(range(10, 50))                  # 40 tokens: blocks 0-1 full, block 2 half full
    engine = LLMEngine(model, EngineConfig(block_size=16))
    ids = engine.add_request("r", prompt, SamplingParams(temperature=1.0, n=4, max_tokens=6, seed=0, ignore_eos=True))
    assert ids == ["r:0", "r:1", "r:2", "r:3"]
    engine.step()                                 # prefill once, then fork: four samples, one prompt
    state = engine.allocator_state()
    prompt_blocks = state.tables["r:0"]
    assert len(prompt_blocks) == 3
    for name in ids:
        assert state.tables[name] == prompt_blocks
    for b in prompt_blocks:
        assert state.blocks[b].ref_count == 4 and sorted(state.blocks[b].owners) == ids
    assert engine.block_manager.num_blocks - engine.num_free_blocks() == 3

    engine.step()                                 # each writes its own token into block 2: copy-on-write
    record = engine.trace.records[-1]
    assert record.blocks_copied == 3              # the last writer keeps the original
    state = engine.allocator_state()
    for b in prompt_blocks[:2]:
        assert state.blocks[b].ref_count == 4     # the full prompt blocks are still shared
    tails = {state.tables[name][2] for name in ids}
    assert len(tails) == 4 and all(state.blocks[b].ref_count == 1 for b in tails)
    drain(engine)
    out = engine.take_output("r")                 # one output: the request's four completions
    assert [c.index for c in out.outputs] == [0, 1, 2, 3] and out.prompt_token_ids == prompt
    assert all(len(c.token_ids) == 6 for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1     # they did diverge
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_greedy_n_samples_all_match_the_reference(model):
    prompt = list(range(3, 35))
    engine = LLMEngine(model, EngineConfig(block_size=8), eos_token_ids=())
    engine.add_request("g", prompt, SamplingParams(temperature=0.0, n=3, max_tokens=9))
    drain(engine)
    want = unpaged_generate(model, prompt, 9)
    assert [c.token_ids for c in engine.take_output("g").outputs] == [want] * 3


def sampled_tokens(model, companions: int, seed: int) -> list[int]:
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_batched_tokens=40))
    for i in range(companions):               # other traffic changes batch composition and step order
        engine.add_request(f"other{i}", list(range(i, i + 30)), SamplingParams(temperature=1.0, max_tokens=5))
    engine.add_request("me", list(range(100, 140)),
                       SamplingParams(temperature=0.9, top_k=50, top_p=0.9, max_tokens=12, seed=seed, ignore_eos=True))
    drain(engine)
    return engine.take_output("me").outputs[0].token_ids


def test_seeded_sampling_is_reproducible_whatever_shares_the_batch(model):
    alone = sampled_tokens(model, 0, seed=1234)
    assert sampled_tokens(model, 3, seed=1234) == alone
    assert sampled_tokens(model, 0, seed=99) != alone


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_abort_frees_every_block_wherever_the_request_is(model, mode):
    engine = LLMEngine(model, EngineConfig(block_size=8, num_kv_blocks=24, max_num_batched_tokens=64,
                                           preemption_mode=mode))
    for i in range(6):
        engine.add_request(str(i), list(range(i, i + 50)), SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True))
    for _ in range(40):
        engine.step()
    statuses = {seq.status for seq in engine.scheduler.seqs.values()}
    assert {SequenceStatus.RUNNING, SequenceStatus.WAITING} <= statuses     # some admitted, some queued
    if mode == "swap":
        assert SequenceStatus.SWAPPED in statuses                            # and one in the swap space
    for i in range(6):
        engine.abort(str(i))
    assert not engine.has_unfinished()
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
    swap_blocks = engine.config.swap_space_blocks if mode == "swap" else 0
    assert not engine.block_manager.swapped and len(engine.block_manager.swap_free) == swap_blocks
    assert engine.take_output("0").outputs[0].finish_reason == "abort"


def test_streaming_events_text_and_metrics(model):
    engine = LLMEngine(model, EngineConfig(block_size=16), tokenizer=byte_tokenizer())
    engine.add_request("s", "hello paged world", SamplingParams(temperature=0.0, max_tokens=7))
    events = [e for e in drain(engine) if e.request_id == "s"]
    out = engine.take_output("s")
    completion = out.outputs[0]
    assert [e.token_id for e in events] == completion.token_ids
    assert events[-1].finished and not any(e.finished for e in events[:-1])
    assert "".join(e.text_delta for e in events) == completion.text
    m = out.metrics
    assert 0 < m.ttft_s <= m.e2e_s and len(m.itl_s) == len(completion.token_ids) - 1 and all(x >= 0 for x in m.itl_s)
    assert out.prompt == "hello paged world" and out.finished


def test_stop_string_and_eos_end_a_request(model):
    tok = byte_tokenizer()
    free_run = unpaged_generate(model, tok.encode("abc").ids, 12)
    stop_token = free_run[4]
    engine = LLMEngine(model, EngineConfig(block_size=16), tokenizer=tok, eos_token_ids={stop_token})
    engine.add_request("e", "abc", SamplingParams(temperature=0.0, max_tokens=12))
    drain(engine)
    out = engine.take_output("e").outputs[0]
    first = free_run.index(stop_token)
    assert out.finish_reason == "stop" and out.stop_reason is None and out.token_ids == free_run[:first + 1]

    text = tok.decode(free_run[:6])
    stop = text[-2:]
    engine = LLMEngine(model, EngineConfig(block_size=16), tokenizer=tok, eos_token_ids=())
    engine.add_request("s", "abc", SamplingParams(temperature=0.0, max_tokens=12, stop=[stop]))
    drain(engine)
    out = engine.take_output("s").outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop and stop not in out.text and len(out.token_ids) <= 6


def test_requests_that_can_never_fit_are_refused(model):
    engine = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=4))
    with pytest.raises(ValueError):
        engine.add_request("big", list(range(60)), SamplingParams(max_tokens=10))
    engine = LLMEngine(model, EngineConfig(block_size=16, enable_chunked_prefill=False, max_num_batched_tokens=32))
    with pytest.raises(ValueError):
        engine.add_request("long", list(range(30)), SamplingParams(max_tokens=10))


def test_kv_cache_is_sized_from_a_block_count_or_a_memory_budget(model):
    from engine.worker.kv_cache import bytes_per_block

    per_block = bytes_per_block(TINY, 16, torch.float32)
    assert per_block == 2 * TINY.num_layers * 16 * TINY.num_kv_heads * TINY.head_dim * 4
    by_bytes = LLMEngine(model, EngineConfig(block_size=16, kv_cache_bytes=37 * per_block + 5))
    assert by_bytes.block_manager.num_blocks == 37
    k_cache, v_cache = by_bytes.kv_cache.layer(0)
    assert k_cache.shape == v_cache.shape == (37, 16, TINY.num_kv_heads, TINY.head_dim)
    by_count = LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=11))
    assert by_count.block_manager.num_blocks == 11 and by_count.kv_cache.total_bytes == 11 * per_block


class GuessingScheduler(Scheduler):
    """A stand-in for a draft proposer: it guesses the next three tokens from a known continuation,
    wrong on purpose every few steps, so that the engine must keep some drafts and roll others back."""
    continuation: list[int] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.num_speculative_tokens = 3       # verify rows with 3 lookahead slots, drafts filled in below

    def _request(self, seq, num_new, num_cached=0, lookahead=None):
        r = super()._request(seq, num_new, num_cached, lookahead)
        if r.kind == "verify":
            n = seq.num_output_tokens
            r.draft_token_ids = list(self.continuation[n:n + r.num_lookahead_tokens])
            if n % 3 == 1 and len(r.draft_token_ids) > 1:
                r.draft_token_ids[1] = (r.draft_token_ids[1] + 1) % TINY.vocab_size
        return r


def test_rejected_draft_tokens_roll_back(model):
    prompt = list(range(60, 85))
    want = unpaged_generate(model, prompt, 24)
    GuessingScheduler.continuation = want
    engine = LLMEngine(model, EngineConfig(block_size=4), scheduler_cls=GuessingScheduler)
    engine.add_request("s", prompt, SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))
    drain(engine)
    assert engine.take_output("s").outputs[0].token_ids == want[:20]
    verify = [e for r in engine.trace for e in r.entries if e.kind == "verify"]
    assert verify and all(e.num_draft_tokens for e in verify)
    assert len(verify) < 19                                   # some steps kept several tokens
    # the K/V left behind is exactly the accepted tokens': a request that reuses it through the prefix
    # cache continues as the unpaged loop does
    longer = prompt + want[:20]
    engine2_want = unpaged_generate(model, longer, 4)
    GuessingScheduler.continuation = engine2_want
    engine.add_request("t", longer, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    drain(engine)
    assert engine.take_output("t").outputs[0].token_ids == engine2_want
    assert any(e.num_cached_tokens >= 40 for r in engine.trace for e in r.entries if e.request_id == "t")
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_seeded_outputs_are_pinned(model):
    """n = 3 forked samples, companions and a preemption: seeded requests write these tokens, whatever
    process samples them and however the steps are cut (each draw is named by seed and draw count)."""
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_batched_tokens=40, num_kv_blocks=12))
    for i in range(3):
        engine.add_request(f"other{i}", list(range(i, i + 30)), SamplingParams(temperature=1.0, max_tokens=5, seed=100 + i))
    engine.add_request("me", list(range(100, 140)), SamplingParams(temperature=0.9, top_k=50, top_p=0.9, max_tokens=12,
                                                                   seed=1234, n=3, ignore_eos=True))
    drain(engine)
    assert sum(len(r.preempted) for r in engine.trace) == 1
    me = [c.token_ids for c in engine.take_output("me").outputs]
    assert {**{f"me:{i}": t for i, t in enumerate(me)},
            **{k: engine.take_output(k).outputs[0].token_ids for k in ["other0", "other1", "other2"]}} == {
        "me:0": [18, 83, 66, 87, 18, 186, 18, 104, 161, 74, 200, 121],
        "me:1": [65, 83, 237, 126, 209, 82, 132, 239, 193, 124, 13, 225],
        "me:2": [26, 26, 132, 210, 115, 48, 44, 186, 119, 226, 9, 106],
        "other0": [29, 208, 65, 121, 171], "other1": [48, 115, 24, 227, 75], "other2": [1, 197, 15, 107, 157]}


def test_max_model_len_comes_from_the_model_or_from_what_the_cache_holds(model):
    from engine.worker.memory import measured_kv_bytes

    assert LLMEngine(model, EngineConfig(block_size=16)).max_model_len == TINY.max_position_embeddings
    assert LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=4)).max_model_len == 64
    limited = LLMEngine(model, EngineConfig(block_size=16, max_model_len=100))
    with pytest.raises(ValueError, match="max_model_len 100"):
        limited.add_request("x", list(range(90)), SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match="model's context"):
        LLMEngine(model, EngineConfig(max_model_len=TINY.max_position_embeddings + 1))
    with pytest.raises(ValueError, match="more KV blocks"):
        LLMEngine(model, EngineConfig(block_size=16, num_kv_blocks=4, max_model_len=100))
    # on CUDA: utilization x total, minus what is in use (weights, context, others) and a step's activations
    assert measured_kv_bytes(total=1000, in_use=200, peak_activation=50, utilization=0.9) == 650
