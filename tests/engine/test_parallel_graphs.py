"""Tensor parallelism past the KV heads, and decode graphs in the workers, across real processes (gloo):

- 4 query heads over 2 KV heads split 4 ways (each rank holds a copy of its KV head): float32 tokens
  equal one process's;
- tp=2 and pp=2 with the graphs' CPU stand-in (GraphStandIn: "replay" reruns the captured forward, and
  the all-reduces it issues are tallied as in a graph): the same tokens, decode steps replayed at the
  ladder's padded size, every replayed all-reduce counted (calls, padded bytes, in_graph) and untimed;
- the all-reduce probe (the graph's collectives timed alone) answers on every rank."""
import pytest
import torch

from engine.config import EngineConfig
from engine.distributed import parallel_engine
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from tests.helpers.parallel_tiny import PROMPTS, T3, T4, tiny3, tiny4


def config(tp: int = 1, pp: int = 1) -> EngineConfig:
    return EngineConfig(device="cpu", num_kv_blocks=64, max_num_batched_tokens=32, max_num_seqs=8,
                        tensor_parallel_size=tp, pipeline_parallel_size=pp)


def greedy(engine, max_tokens: int = 8) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    for i, prompt in enumerate(PROMPTS):
        engine.add_request(f"r{i}", prompt, params)
    while engine.has_unfinished():
        engine.step()
    return [engine.take_output(f"r{i}").outputs[0].token_ids for i in range(len(PROMPTS))]


def test_four_ranks_over_two_kv_heads_give_one_process_tokens(one_torch_thread):
    want = greedy(LLMEngine(tiny4(), config()))
    engine = parallel_engine(tiny4(), tiny4, config(tp=4), torch.device("cpu"), torch.float32, threads=1)
    try:
        assert greedy(engine) == want
        assert engine.kv_cache.kv[0].shape[3] == 1              # one KV head per rank, a copy of head 0
        assert engine.model.layers[0].attention.num_heads == 1
        for rec in engine.trace:
            c = rec.parallel.all_reduce
            assert c.calls == 2 * T4.num_layers and c.bytes == c.calls * rec.num_batched_tokens * T4.hidden_size * 4
    finally:
        engine.close()
    assert len({t for toks in want for t in toks}) > 4


@pytest.mark.parametrize("tp,pp", [(2, 1), (1, 2)], ids=["tp2", "pp2"])
def test_decode_graphs_in_the_workers_replay_and_count_their_all_reduces(one_torch_thread, tp, pp):
    want = greedy(LLMEngine(tiny3(), config()))
    engine = parallel_engine(tiny3(), tiny3, config(tp, pp), torch.device("cpu"), torch.float32, threads=1,
                             graphs="stand-in")
    try:
        assert greedy(engine) == want                     # T3 at tp=2: rank 0 holds KV heads (0, 0, 1)
        decode = [r for r in engine.trace if r.entries and all(e.kind == "decode" for e in r.entries)]
        assert decode and all(r.cuda_graph_batch >= len(r.entries) for r in decode)
        for rec in decode:
            c = rec.parallel.all_reduce
            if tp == 1:
                assert c.calls == 0
                continue
            # 3 sequences replay the graph of 4: the padding row is summed too
            assert c.calls == c.in_graph == 2 * T3.num_layers and c.seconds == 0.0
            assert c.bytes == c.calls * rec.cuda_graph_batch * T3.hidden_size * 4
        prefill = [r for r in engine.trace if r.num_prefill_tokens]
        assert prefill and all(r.cuda_graph_batch == 0 for r in prefill)
        if tp == 2:
            assert all(s > 0 for s in engine.runner.probe_all_reduce(4, 2 * T3.num_layers))
        assert engine.runner.runner.graphs is not None
    finally:
        engine.close()
    assert engine.runner.runner.graphs is None       # freed before leaving: NCCL waits for captured graphs
