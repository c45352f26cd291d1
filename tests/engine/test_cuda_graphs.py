"""CUDA-graph decode steps, checked on the CPU with a stand-in for the graph.

A captured graph replays its launches on fixed buffers, writing into the output it had at capture.
`ReplayByRerun` does the same thing in plain PyTorch: it runs the captured function again on the same
buffers and copies into the output it kept. Everything around the graph is then the engine's real code:
the ladder, the padded batch (padding rows writing to slot -1), the fixed-width block table at fixed
addresses, reuse of one buffer across batch sizes, and the fail-safe fallback to eager steps.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.config import EngineConfig
from engine.core.records import ScheduledRequest, SchedulerOutput
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from engine.unpaged import unpaged_generate
from engine.worker import cuda_graphs
from engine.worker.cuda_graphs import DecodeGraphs, graph_batch_sizes
from tests.helpers.tiny import TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


class ReplayByRerun:
    """Stands in for torch.cuda.CUDAGraph: capture runs once; replay reruns into the same output tensor."""
    captures = 0

    def __init__(self, run, pool):
        self.run, self.output = run, run()
        ReplayByRerun.captures += 1

    def replay(self):
        self.output.copy_(self.run())
        return self.output


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=5).eval()


def engine_with_graphs(model, sizes=(1, 2, 4, 8), **knobs) -> LLMEngine:
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=8, max_model_len=512, **knobs), eos_token_ids=())
    assert engine.runner.graphs is None                      # the CPU never captures by itself
    assert engine.runner.capture_graphs(list(sizes), capture=ReplayByRerun)
    return engine


def run_all(engine, prompts, params=GREEDY):
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
    while engine.has_unfinished():
        engine.step()
    return [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(prompts))]


def prompts(n, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, TINY.vocab_size) for _ in range(rng.randint(3, 90))] for _ in range(n)]


def test_ladder_ends_at_max_num_seqs():
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 12, 16, 24, 32, 48, 64]
    assert graph_batch_sizes(100)[-2:] == [96, 100] and graph_batch_sizes(1) == [1]


def test_greedy_tokens_through_replayed_decode_steps_equal_the_unpaged_loop(model):
    ps = prompts(7)
    # lengths so sequences finish at different steps: decode batches of 7, 6, ... replay graphs 8, 8, 4, ...
    engine = engine_with_graphs(model)
    params = [SamplingParams(temperature=0.0, max_tokens=4 + 2 * i) for i in range(len(ps))]
    for i, (p, sp) in enumerate(zip(ps, params)):
        engine.add_request(str(i), p, sp)
    while engine.has_unfinished():
        engine.step()
    got = [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(ps))]
    assert got == [unpaged_generate(model, p, sp.max_tokens) for p, sp in zip(ps, params)]
    replayed = {r.cuda_graph_batch for r in engine.trace if r.cuda_graph_batch}
    assert replayed >= {8, 4, 2, 1}                            # padded batches, several rungs
    for r in engine.trace:                                     # prefill steps ran eagerly
        assert (r.cuda_graph_batch > 0) == (r.num_prefill_tokens == 0)
    assert engine.num_free_blocks() == engine.block_manager.num_blocks


def test_padding_rows_write_nowhere_and_the_block_table_keeps_its_width_and_address(model):
    engine = engine_with_graphs(model)
    runner = engine.runner
    before = [kv.clone() for kv in engine.kv_cache.kv]
    # three one-token decodes, as the scheduler would send them: padded to the graph of 4
    # (blocks 1-3: block 0, whose slot 0 a padding row reads, belongs to nobody here)
    reqs = [ScheduledRequest(i, f"r{i}", "decode", [5 + i], 0, [i + 1], sample=True, sampling_params=GREEDY)
            for i in range(3)]
    size = runner.graph_size_for(SchedulerOutput(scheduled=reqs))
    assert size == 4
    inputs = runner.prepare_inputs(SchedulerOutput(scheduled=reqs), pad_to=size)
    assert inputs.meta.slot_mapping.tolist() == [16, 32, 48, -1]           # row 3 is padding: skipped
    assert inputs.meta.block_tables.shape == (4, runner.max_blocks_per_seq) == (4, 512 // 16)
    assert inputs.meta.query_start_loc.tolist() == [0, 1, 2, 3, 4] and inputs.meta.seq_lens.tolist() == [1, 1, 1, 1]
    address = inputs.meta.block_tables.data_ptr()
    with torch.inference_mode():
        runner.graphs.replay(size)
    changed = [(b, o) for kv, old in zip(engine.kv_cache.kv, before)
               for b, o in torch.nonzero((kv != old).flatten(3).any(-1).any(0)).tolist()]
    assert sorted(set(changed)) == [(1, 0), (2, 0), (3, 0)]                # the three real slots only
    # a later step of the same size, longer contexts: same fields at the same addresses
    later = [ScheduledRequest(i, f"r{i}", "decode", [7], 40, [i, 3, 4 + i], sample=True, sampling_params=GREEDY)
             for i in range(4)]
    again = runner.prepare_inputs(SchedulerOutput(scheduled=later), pad_to=4)
    assert again.meta.block_tables.data_ptr() == address
    assert again.meta.block_tables[:, :3].tolist() == [[i, 3, 4 + i] for i in range(4)]
    assert again.meta.block_tables[:, 3:].abs().sum() == 0


def test_mixed_and_oversized_batches_run_eagerly(model):
    engine = engine_with_graphs(model, sizes=(1, 2))
    decode = ScheduledRequest(0, "a", "decode", [5], 9, [0], sample=True, sampling_params=GREEDY)
    prefill = ScheduledRequest(1, "b", "prefill", [5, 6, 7], 0, [1], sample=True, sampling_params=GREEDY)
    assert engine.runner.graph_size_for(SchedulerOutput(scheduled=[decode])) == 1
    assert engine.runner.graph_size_for(SchedulerOutput(scheduled=[decode, prefill])) is None
    assert engine.runner.graph_size_for(SchedulerOutput(scheduled=[decode] * 3)) is None   # above the ladder
    drafts = ScheduledRequest(0, "a", "verify", [5], 9, [0], sample=True, sampling_params=GREEDY, draft_token_ids=[1])
    assert engine.runner.graph_size_for(SchedulerOutput(scheduled=[drafts])) is None


def test_seeded_sampling_in_graph_steps_gives_the_eager_tokens(model):
    ps = prompts(5, seed=3)
    params = SamplingParams(temperature=0.9, top_k=50, top_p=0.9, max_tokens=10, seed=123)
    eager = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=8, max_model_len=512), eos_token_ids=())
    assert run_all(engine_with_graphs(model), ps, params) == run_all(eager, ps, params)


def test_a_failed_capture_logs_one_line_and_the_engine_runs_eagerly(model, capsys):
    def broken(run, pool):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=8, max_model_len=512), eos_token_ids=())
    assert not engine.runner.capture_graphs([1, 2, 4], capture=broken)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CUDA graphs off" in err[0] and "batch 4" in err[0] and "more detail" not in err[0]
    ps = prompts(3, seed=9)
    assert run_all(engine, ps) == [unpaged_generate(model, p, GREEDY.max_tokens) for p in ps]
    assert not any(r.cuda_graph_batch for r in engine.trace)


def test_a_buffer_that_grew_after_capture_turns_graphs_off(model, capsys):
    engine = engine_with_graphs(model)
    one = SchedulerOutput(scheduled=[ScheduledRequest(0, "a", "decode", [5], 9, [0], sample=True,
                                                      sampling_params=GREEDY)])
    assert engine.runner.graph_size_for(one) == 1
    engine.runner.buffer.reserve(engine.runner.buffer.capacity + 1)      # the device buffer moved
    assert engine.runner.graph_size_for(one) is None and engine.runner.graphs is None
    assert "outgrew the input buffer" in capsys.readouterr().err


def test_enforce_eager_and_the_cli_flag(monkeypatch):
    from engine import cli

    args = cli.build_parser().parse_args(["generate", "hi", "--enforce-eager", "--random-weights"])
    seen = {}
    monkeypatch.setattr("engine.LLM", lambda **kw: seen.update(kw))
    cli.make_llm(args)
    assert seen["enforce_eager"] is True
    assert cli.build_parser().parse_args(["info"]).enforce_eager is False


def test_capture_is_never_attempted_off_cuda_or_when_eager(model, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "CudaGraph", lambda *a: pytest.fail("captured on the CPU"))
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=4, max_model_len=256))
    assert engine.runner.graphs is None


def test_capture_order_and_plans_are_recorded():
    sizes, calls = [1, 4, 2], []
    graphs = DecodeGraphs(lambda s: calls.append(("run", s)) or torch.zeros(s, 3),
                          lambda s: calls.append(("fill", s)), sizes, lambda s: f"plan-{s}",
                          capture=lambda run, pool: type("G", (), {"replay": lambda self: run()})())
    assert graphs.capture_all()
    assert [c for c in calls if c[0] == "fill"] == [("fill", 4), ("fill", 2), ("fill", 1)]   # largest first
    assert graphs.plans == {4: "plan-4", 2: "plan-2", 1: "plan-1"}
    assert graphs.size_for(3) == 4 and graphs.size_for(5) is None


def test_the_step_layout_keeps_the_graph_fields_in_place_whatever_the_sampler_needs():
    from engine.worker.step_buffer import FIELDS, layout

    graph = dict(input_ids=8, positions=8, slot_mapping=8, seq_lens=8, query_start_loc=9, block_tables=8 * 32)
    a, _ = layout(graph)
    b, total = layout(dict(graph, logits_indices=8, sample_rows=8, sampled=3, u=3, top_k=3))
    for name in ("input_ids", "positions", "slot_mapping", "seq_lens", "query_start_loc", "block_tables"):
        assert a[name] == b[name]
    assert all(at % 8 == 0 for at, _ in b.values())
    ends = [at + n * dtype.itemsize for (at, n), (_, dtype) in zip(b.values(), FIELDS)]
    assert all(end <= nxt for end, (nxt, _) in zip(ends, list(b.values())[1:])) and ends[-1] <= total
