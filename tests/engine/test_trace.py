"""The step trace: one record per step, bounded, and consistent with what the engine did."""
from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from engine.core.step_trace import StepRecord, StepTrace
from tests.helpers.tiny import TINY


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_ring_buffer_keeps_the_newest_records():
    trace = StepTrace(capacity=3)
    for i in range(5):
        trace.append(StepRecord(step=i, start_s=0.0, schedule_s=0.0, forward_s=0.0, sample_s=0.0))
    assert [r.step for r in trace] == [2, 3, 4] and trace.num_steps == 5
    assert [r.step for r in trace.since(3)] == [3, 4]


def test_trace_accounts_for_every_token_and_block():
    model = Llama.random(TINY, seed=4).eval()
    engine = LLMEngine(model, EngineConfig(block_size=8, num_kv_blocks=20, max_num_batched_tokens=40,
                                           trace_capacity=10_000))
    prompts = [list(range(i, i + 30 + 7 * i)) for i in range(5)]
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    records = list(engine.trace)
    assert [r.step for r in records] == list(range(len(records)))
    preempted = {name for r in records for name, _ in r.preempted}
    for i, p in enumerate(prompts):
        name, out = str(i), engine.take_output(str(i))
        entries = [e for r in records for e in r.entries if e.request_id == name]
        # each step continues where the last one stopped, unless a recompute started it over
        for prev, cur in zip(entries, entries[1:]):
            assert cur.num_computed_before == prev.num_computed_before + prev.num_tokens or \
                (name in preempted and cur.num_computed_before == cur.num_cached_tokens)
        # K/V for the prompt and every generated token but the last (it is never fed back)
        needed = len(p) + len(out.outputs[0].token_ids) - 1 - entries[0].num_cached_tokens
        total = sum(e.num_tokens for e in entries)
        assert total == needed if name not in preempted else total >= needed
    assert any(r.preempted for r in records)
    allocated = sum(r.blocks_allocated for r in records)
    freed = sum(r.blocks_freed for r in records)
    shared = sum(r.blocks_shared for r in records)
    assert allocated + shared >= freed and records[-1].num_free_blocks == 20
    assert all(0.0 <= r.kv_usage <= 1.0 and r.wall_s >= 0 for r in records)
    assert sum(len(r.finished) for r in records) == 5
