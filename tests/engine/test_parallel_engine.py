"""Tensor and pipeline parallelism across real processes (gloo on CPU): the same greedy tokens as one
process, all-reduce bytes equal to the arithmetic, hand-offs and bubbles in the trace, and a worker
that dies fails the request and leaves nothing behind. One engine per split, shared by its tests."""
import os
import signal

import pytest
import torch

from engine.config import EngineConfig
from engine.distributed import parallel_engine, stage_layers
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.helpers.parallel_tiny import PROMPTS, T3, tiny3

MAX_TOKENS = 8
SPLITS = [(3, 1), (1, 2), (1, 3)]     # (tensor_parallel_size, pipeline_parallel_size)


def config(tp: int = 1, pp: int = 1) -> EngineConfig:
    # a small budget so the 40-token prompt is prefilled in two chunks, cut across micro-batches
    return EngineConfig(device="cpu", num_kv_blocks=64, max_num_batched_tokens=32, max_num_seqs=8,
                        tensor_parallel_size=tp, pipeline_parallel_size=pp)


def greedy(engine) -> dict[str, list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"r{i}", prompt, params)
    out: dict[str, list[int]] = {}
    while engine.has_unfinished():
        for ev in engine.step():
            out.setdefault(ev.request_id, []).append(ev.token_id)
    return out


def children(pid: int) -> set[int]:
    """Live child processes of pid (Linux /proc), except Python's multiprocessing resource tracker: one
    helper per process, started by the first spawn, that lives as long as its parent."""
    kids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and b"resource_tracker" not in cmdline:
                kids.add(int(entry))
    return kids


@pytest.fixture(scope="module")
def reference(one_torch_thread):
    return greedy(LLMEngine(tiny3(), config()))


@pytest.fixture(scope="module", params=SPLITS, ids=lambda s: f"tp{s[0]}-pp{s[1]}")
def run(request, reference):
    """One parallel engine per split: its greedy outputs and trace (the engine is closed after)."""
    tp, pp = request.param
    engine = parallel_engine(tiny3(), tiny3, config(tp, pp), torch.device("cpu"), torch.float32, threads=1)
    try:
        yield engine, greedy(engine), list(engine.trace), tp, pp
    finally:
        engine.close()


def test_greedy_tokens_equal_one_process(run, reference):
    _, outputs, _, _, _ = run
    assert outputs == reference
    assert len({t for toks in reference.values() for t in toks}) > 4     # not one token repeated


def test_all_reduce_bytes_are_tokens_x_hidden_x_bytes(run):
    engine, _, trace, tp, pp = run
    if tp == 1:
        assert all(r.parallel.total("all_reduce").calls == 0 for r in trace)
        return
    for rec in trace:
        for rank in rec.parallel.ranks:     # every rank: 2 per layer, each of the batch's tokens x hidden
            c = rank.comm["all_reduce"]
            assert c.calls == 2 * T3.num_layers
            assert c.bytes == c.calls * rec.num_batched_tokens * T3.hidden_size * 4


def test_stage_handoffs_and_the_bubble(run):
    engine, _, trace, tp, pp = run
    if pp == 1:
        assert all(r.parallel.total("send").calls == 0 for r in trace)
        return
    for rec in trace:
        p = rec.parallel
        assert sum(p.micro_batch_tokens) == rec.num_batched_tokens
        m = len(p.micro_batch_tokens)
        assert m == min(pp, rec.num_batched_tokens)
        for rank in p.ranks:
            stage = rank.stage
            assert [i.micro_batch for i in rank.intervals] == list(range(m))
            sends, recvs = rank.comm["send"], rank.comm["recv"]
            assert sends.calls == (m if stage < pp - 1 else 0)
            assert recvs.calls == (m if stage > 0 else 0)
            if stage < pp - 1:      # the hidden state of every token, once per boundary
                assert sends.bytes == rec.num_batched_tokens * T3.hidden_size * 4
        for a, b in zip(p.ranks, p.ranks[1:]):     # a stage starts a micro-batch after the one before ends it
            for x, y in zip(a.intervals, b.intervals):
                assert y.start_s >= x.end_s
        assert p.bubble > 0.0


def test_each_stage_holds_its_layers(run):
    engine, _, _, tp, pp = run
    held = [i for i, layer in enumerate(engine.model.layers) if type(layer).__name__ == "TransformerBlock"]
    assert held == list(stage_layers(T3.num_layers, pp)[0])
    assert engine.kv_cache.kv[0].shape[3] == T3.num_kv_heads // tp      # rank 0's KV heads only


def test_a_worker_that_dies_fails_the_request_and_leaves_nothing(run):
    engine, _, _, tp, pp = run
    loop = EngineLoop(engine)
    pids = engine.runner.worker_pids
    stream = loop.stream([3, 4, 5], SamplingParams(temperature=0.0, max_tokens=200))
    next(stream)                                        # running
    os.kill(pids[-1], signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"worker rank \d.*exited with code -9"):
        for _ in stream:
            pass
    with pytest.raises(RuntimeError, match="engine stopped"):
        loop.generate([([1, 2], None, SamplingParams(max_tokens=2))])
    loop.close()
    assert not children(os.getpid()) & set(pids)
    assert not torch.distributed.is_initialized()


