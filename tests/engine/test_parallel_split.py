"""Tensor/pipeline parallelism without processes: which sizes work, the sharding arithmetic (each
rank's partial sums add up to the whole layer, also with KV heads copied), micro-batch cuts, and the
one-line refusal of a size that does not divide the heads."""
from dataclasses import replace

import pytest
import torch

from engine.config import ModelConfig
from engine.core.records import ScheduledRequest
from engine.distributed import ParallelConfig, check_parallel, parallel_layout, stage_layers, tensor_parallel_sizes
from engine.distributed.parallel_config import even_slices, head_shard
from engine.distributed.pipeline import split_micro_batches
from engine.distributed.stats import Interval, ParallelStep, RankStep, ideal_bubble
from engine.distributed.tensor_parallel import shard_layer
from engine.model.llama import ContiguousKV, Llama, rope_cos_sin
from engine.sampling_params import SamplingParams

SMOL = ModelConfig()      # SmolLM2-135M's shapes
# SmolLM2's heads (9 over 3 KV heads), small everything else; 100 inner features do not divide by 9
SMOLISH = replace(SMOL, num_layers=2, hidden_size=72, head_dim=8, intermediate_size=100, vocab_size=64)
# 12 query heads over 4 KV heads: at tp = 6 rank 1's two query heads read two KV heads (0 and 1).
# 12 over 3: at tp = 2 rank 0's six read KV 0 0 0 0 1 1 (runs 4, 2): it holds KV 0 twice, groups of 2
TWELVE = replace(SMOLISH, hidden_size=96, num_heads=12, num_kv_heads=4)
TWELVE3 = replace(TWELVE, num_kv_heads=3)


def test_smollm2_splits_1_3_and_9():
    assert tensor_parallel_sizes(SMOL) == [1, 3, 9]
    with pytest.raises(ValueError, match=r"size 2 does not split .*9 query heads and 3 KV heads.*sizes that work: 1, 3, 9"):
        check_parallel(SMOL, ParallelConfig(tensor_parallel_size=2))
    with pytest.raises(ValueError, match="31 exceeds .*30 layers"):
        check_parallel(SMOL, ParallelConfig(pipeline_parallel_size=31))


@pytest.mark.parametrize("pp", [2, 3, 5, 6])
def test_thirty_layers_split_evenly_into_stages(pp):
    stages = stage_layers(30, pp)
    assert [len(s) for s in stages] == [30 // pp] * pp
    assert [i for s in stages for i in s] == list(range(30))


def test_uneven_stages_and_slices_cover_everything_once():
    assert [len(s) for s in stage_layers(6, 5)] == [2, 1, 1, 1, 1]
    sizes = [s.stop - s.start for s in even_slices(1536, 9)]
    assert sizes == [171] * 6 + [170] * 3 and sum(sizes) == 1536


def test_nine_ranks_copy_each_kv_head_to_its_group():
    shards = [head_shard(SMOL, 9, r) for r in range(9)]
    assert [list(s.q) for s in shards] == [[r] for r in range(9)]
    assert [list(s.kv) for s in shards] == [[r // 3] for r in range(9)]    # query head j reads KV head j // 3
    assert [list(head_shard(SMOL, 3, r).kv) for r in range(3)] == [[0], [1], [2]]


def test_any_size_dividing_the_query_heads_works_with_kv_heads_copied_where_needed():
    assert tensor_parallel_sizes(TWELVE) == [1, 2, 3, 4, 6, 12]
    assert [head_shard(TWELVE, 6, r).kv for r in range(6)] == [(0,), (0, 1), (1,), (2,), (2, 3), (3,)]
    assert [head_shard(TWELVE3, 2, r).kv for r in range(2)] == [(0, 0, 1), (1, 2, 2)]
    llama8b = replace(TWELVE, num_heads=32, num_kv_heads=8)
    assert [head_shard(llama8b, 2, r).kv for r in range(2)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [head_shard(llama8b, 16, r).kv for r in range(16)] == [(r // 2,) for r in range(16)]


@pytest.mark.parametrize("cfg,tp", [(SMOLISH, 3), (SMOLISH, 9), (TWELVE, 6), (TWELVE3, 2)],
                         ids=["9q3kv-tp3", "9q3kv-tp9", "12q4kv-tp6", "12q3kv-tp2"])
def test_partial_sums_of_every_rank_add_up_to_the_whole_layer(cfg, tp):
    """Each rank's attention and MLP output before the all-reduce; their sum is the unsplit layer's."""
    SMOLISH = cfg
    torch.manual_seed(0)
    whole = Llama.random(SMOLISH, seed=1)
    x = torch.randn(5, SMOLISH.hidden_size)
    cos, sin = rope_cos_sin(torch.arange(5), SMOLISH.head_dim, SMOLISH.rope_theta)
    block = whole.layers[0]
    want_att = block.attention(0, x, cos, sin, ContiguousKV(1))
    want_mlp = block.mlp(x)
    att, mlp = torch.zeros_like(x), torch.zeros_like(x)
    for r in range(tp):
        shard = Llama.random(SMOLISH, seed=1).layers[0]
        shard_layer(shard, SMOLISH, tp, r, comm=None)          # no comm: return the partial sum
        assert shard.attention.num_heads == cfg.num_heads // tp
        att += shard.attention(0, x, cos, sin, ContiguousKV(1))
        mlp += shard.mlp(x)
    torch.testing.assert_close(att, want_att, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(mlp, want_mlp, rtol=1e-5, atol=1e-6)


def _request(seq_id, n, start=0, sample=True, drafts=()):
    return ScheduledRequest(seq_id, f"r{seq_id}", "verify" if drafts else "prefill", list(range(100 + start, 100 + start + n)),
                            start, [0, 1, 2, 3, 4, 5, 6, 7], sample=sample, sampling_params=SamplingParams(),
                            draft_token_ids=list(drafts))


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_micro_batches_cut_the_step_in_order_and_only_the_last_piece_samples(m):
    step = [_request(0, 1, start=9), _request(1, 13, start=3), _request(2, 1, start=20, drafts=(7, 8)), _request(3, 6)]
    batches = split_micro_batches(step, m)
    assert len(batches) == m
    sizes = [sum(r.num_tokens + len(r.draft_token_ids) for r in b) for b in batches]
    assert sum(sizes) == 23 and max(sizes) <= -(-23 // m) + 2     # + 2: an uncut verify row's drafts
    for want in step:
        pieces = [r for b in batches for r in b if r.seq_id == want.seq_id]
        assert [t for p in pieces for t in p.token_ids] == want.token_ids
        assert [p.start_pos for p in pieces] == [want.start_pos + sum(q.num_tokens for q in pieces[:i]) for i in range(len(pieces))]
        assert [p.sample for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert [len(r.draft_token_ids) for b in batches for r in b if r.seq_id == 2] == [2]   # a verify row is never cut


def test_the_bubble_of_a_pipeline_step():
    """Three stages, one micro-batch each after the other: two thirds of the rank-time is idle."""
    ranks = [RankStep(s, s, 0, intervals=[Interval(0, s * 1.0, s * 1.0 + 1.0)]) for s in range(3)]
    step = ParallelStep(1, 3, [4], ranks)
    assert step.window_s == 3.0 and step.bubble == pytest.approx(2 / 3) == ideal_bubble(3, 1)
    assert ideal_bubble(3, 3) == pytest.approx(2 / 5)


def test_layout_names_every_matrix_split():
    layout = parallel_layout(SMOL, 3, 2)
    assert layout["stages"] == [[0, 15], [15, 30]] and layout["all_reduces_per_token_pass"] == 60
    splits = {w["name"]: w for w in layout["weights"]}
    assert [splits[n]["split"] for n in ("wq", "wk", "wv", "wo", "w1", "w3", "w2", "embed")] == \
        ["column"] * 3 + ["row"] + ["column"] * 2 + ["row", "replicated"]
    assert splits["wq"]["per_rank"] == [[0, 192], [192, 384], [384, 576]]
    assert splits["wk"]["per_rank"] == [[0, 64], [64, 128], [128, 192]]
    assert [w["all_reduce_after"] for w in layout["weights"]].count(True) == 2
    with pytest.raises(ValueError, match="sizes that work: 1, 3, 9"):
        parallel_layout(SMOL, 4)


def test_generate_with_a_size_that_does_not_fit_says_so_in_one_line(capsys, monkeypatch):
    """--tp 2 for 9 heads: one 'error:' line naming the sizes that work, no traceback, no process."""
    from engine import cli
    from engine.model.llama import Llama as L
    from engine.loader.model_loader import LoadedModel
    monkeypatch.setattr("engine.llm.load_model", lambda cfg, on_device=True:
                        LoadedModel(L.random(SMOLISH), None, torch.device("cpu"), torch.float32, None))
    assert cli.main(["generate", "--tp", "2", "--device", "cpu", "hello"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: tensor-parallel size 2 does not split") and "sizes that work: 1, 3, 9" in err[-1]
    assert "Traceback" not in "\n".join(err)
    assert not torch.distributed.is_initialized()


def test_a_world_of_one_runs_the_distributed_path_in_this_process(one_torch_thread):
    """tp=1 through the executor (gloo, no workers): the path the one-GPU NCCL test takes."""
    from engine.config import EngineConfig
    from engine.distributed import parallel_engine
    from engine.llm_engine import LLMEngine
    from tests.helpers.parallel_tiny import PROMPTS, tiny3

    def greedy(engine):
        for i, p in enumerate(PROMPTS):
            engine.add_request(f"r{i}", p, SamplingParams(temperature=0.0, max_tokens=6))
        while engine.has_unfinished():
            engine.step()
        return [engine.take_output(f"r{i}").outputs[0].token_ids for i in range(len(PROMPTS))]

    cfg = EngineConfig(device="cpu", num_kv_blocks=64, max_num_batched_tokens=32)
    want = greedy(LLMEngine(tiny3(), cfg))
    engine = parallel_engine(tiny3(), tiny3, cfg, torch.device("cpu"), torch.float32)
    try:
        assert torch.distributed.get_world_size() == 1 and engine.runner.worker_pids == []
        assert greedy(engine) == want
        assert all(r.parallel.ranks[0].comm["control"].calls == 1 for r in engine.trace)
    finally:
        engine.close()
    assert not torch.distributed.is_initialized()


def test_a_group_no_engine_owns_is_cleared_and_a_running_engine_refuses_a_second(one_torch_thread):
    """torch.distributed has one default group per process. One left behind by an engine that could not
    leave it must not stop every later engine; a second engine while one runs is still refused."""
    import torch.distributed as dist

    from engine.config import EngineConfig
    from engine.distributed import parallel_engine
    from engine.distributed.process_group import HOST
    from tests.helpers.parallel_tiny import tiny3

    store = dist.TCPStore(HOST, 0, 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)      # the leftover
    cfg = EngineConfig(device="cpu", num_kv_blocks=16, max_num_batched_tokens=32)
    engine = parallel_engine(tiny3(), tiny3, cfg, torch.device("cpu"), torch.float32)
    try:
        assert dist.get_world_size() == 1
        with pytest.raises(RuntimeError, match="already runs a parallel engine"):
            parallel_engine(tiny3(), tiny3, cfg, torch.device("cpu"), torch.float32)
        assert dist.is_initialized()                    # the refusal left the running engine's group alone
    finally:
        engine.close()
    assert not dist.is_initialized()
