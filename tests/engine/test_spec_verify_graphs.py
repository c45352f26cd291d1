"""Verify steps through CUDA graphs, device-side verdicts and the speculation rule, on the CPU.

The graph is stood in for by ReplayByRerun (tests/engine/test_cuda_graphs.py): capture runs the
forward once on the step buffer's fixed addresses, replay runs it again into the same output. So
everything around a real graph is the engine's own code: a verify batch padded to B rows of k + 1
query slots, rows with fewer drafts (or none) padded with slots that write nowhere, the logits rows
mapped back, the verdicts computed as tensors and read back with the plain draws.
"""
from __future__ import annotations

import random

import pytest
import torch

from engine.bench.spec import OracleProposer
from engine.config import EngineConfig
from engine.core.records import ScheduledRequest, SchedulerOutput
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from engine.spec_decode.rejection_sampler import greedy_accept, verify_greedy
from engine.spec_decode.rule import SpeculationRule
from engine.unpaged import unpaged_generate
from tests.engine.test_cuda_graphs import ReplayByRerun
from tests.helpers.tiny import TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=5).eval()


def with_graphs(model, spec=None, sizes=(1, 2, 4, 8), proposer=None, **knobs) -> LLMEngine:
    spec = dict(spec or NGRAM)
    knobs.setdefault("max_model_len", 512)
    engine = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=8, speculative_config=spec, **knobs),
                       eos_token_ids=(), proposer=proposer)
    runner = engine.runner
    assert runner.graphs is None and runner.verify_graphs is None     # the CPU never captures by itself
    assert runner.capture_graphs(list(sizes), capture=ReplayByRerun)
    assert runner.capture_verify_graphs(spec["num_speculative_tokens"], list(sizes), capture=ReplayByRerun)
    return engine


def looping_prompts(n: int, seed: int = 0) -> list[list[int]]:
    """Prompts that repeat a short pattern, so n-gram lookup drafts something."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pattern = [rng.randrange(3, TINY.vocab_size) for _ in range(rng.randint(2, 5))]
        out.append((pattern * 12)[:rng.randint(10, 40)])
    return out


def run_all(engine, prompts, params):
    params = params if isinstance(params, list) else [params] * len(prompts)
    for i, (p, sp) in enumerate(zip(prompts, params)):
        engine.add_request(str(i), p, sp)
    while engine.has_unfinished():
        engine.step()
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
    return [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(prompts))]


def test_verify_steps_replay_graphs_and_give_the_plain_tokens(model):
    ps = looping_prompts(6, seed=1)
    params = [SamplingParams(temperature=0.0, max_tokens=10 + 3 * i) for i in range(len(ps))]   # batches shrink
    engine = with_graphs(model)
    got = run_all(engine, ps, params)
    assert got == [unpaged_generate(model, p, sp.max_tokens) for p, sp in zip(ps, params)]
    verify_steps = [r for r in engine.trace if r.num_verify_tokens > r.num_decode_tokens]
    replayed = [r for r in verify_steps if r.cuda_graph_batch]
    assert replayed and len(replayed) == len([r for r in verify_steps if not r.num_prefill_tokens])
    assert {r.cuda_graph_batch for r in replayed} >= {8, 4}          # several rungs, padded batches
    assert engine.spec_stats.num_accepted > 0 and engine.spec_stats.num_rejected > 0


def test_a_verify_graph_gives_the_eager_logits_and_pads_into_nowhere(model):
    engine = with_graphs(model)
    runner = engine.runner
    before = [kv.clone() for kv in engine.kv_cache.kv]
    # three rows as a step sends them: 2 drafts, none (a plain decode among verifies), 4 drafts
    reqs = [ScheduledRequest(0, "a", "verify", [5], 20, [1, 2], sample=True, sampling_params=GREEDY,
                             draft_token_ids=[6, 7], num_lookahead_tokens=4, context_token_ids=[5] * 21),
            ScheduledRequest(1, "b", "decode", [9], 3, [3], sample=True, sampling_params=GREEDY),
            ScheduledRequest(2, "c", "verify", [8], 30, [4, 5, 6], sample=True, sampling_params=GREEDY,
                             draft_token_ids=[1, 2, 3, 4], num_lookahead_tokens=4, context_token_ids=[8] * 31)]
    out = SchedulerOutput(scheduled=reqs)
    assert runner.graph_size_for(out) is None and runner.verify_graph_size_for(out) == 4
    inputs = runner.prepare_inputs(out, pad_to=4, verify_k=4)
    assert inputs.meta.query_start_loc.tolist() == [0, 5, 10, 15, 20]
    assert inputs.meta.seq_lens.tolist() == [25, 8, 35, 5]
    assert inputs.input_ids.tolist()[:15] == [5, 6, 7, 0, 0, 9, 0, 0, 0, 0, 8, 1, 2, 3, 4]
    slots = inputs.meta.slot_mapping.tolist()
    assert slots[:15] == [36, 37, 38, -1, -1, 51, -1, -1, -1, -1, 94, 95, 96, 97, 98] and set(slots[15:]) == {-1}
    assert inputs.logits_indices.tolist() == [0, 1, 2, 5, 10, 11, 12, 13, 14]
    with torch.inference_mode():
        graph = runner.verify_graphs.replay(4).index_select(0, inputs.logits_indices).clone()
        eager_inputs = runner.prepare_inputs(out)
        hidden = model(eager_inputs.input_ids, eager_inputs.positions, runner.attn.bind(eager_inputs.meta))
        eager = model.compute_logits(hidden[eager_inputs.logits_indices])
    torch.testing.assert_close(graph, eager, rtol=1e-5, atol=1e-5)
    changed = {(b, o) for kv, old in zip(engine.kv_cache.kv, before)
               for b, o in torch.nonzero((kv != old).flatten(3).any(-1).any(0)).tolist()}
    assert changed == {(2, 4), (2, 5), (2, 6), (3, 3), (5, 14), (5, 15), (6, 0), (6, 1), (6, 2)}   # real tokens only


def test_greedy_accept_on_tensors_matches_the_row_by_row_rule():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        R, K, V = 5, 4, 6
        logits = torch.randn(R, K + 1, V, generator=g)
        target = logits.argmax(-1)
        drafts = torch.where(torch.rand(R, K, generator=g) < 0.7, target[:, :K], torch.randint(0, V, (R, K), generator=g))
        num_drafts = torch.randint(0, K + 1, (R,), generator=g)
        accepted, final = greedy_accept(target, drafts, num_drafts)
        for r in range(R):
            k = int(num_drafts[r])
            tokens, a = verify_greedy(logits[r, :k + 1], drafts[r, :k].tolist())
            assert (int(accepted[r]), int(final[r])) == (a, tokens[-1])


def test_sampled_rows_in_verify_graphs_give_the_eager_tokens(model):
    ps = looping_prompts(4, seed=2)
    params = SamplingParams(temperature=0.8, top_k=20, max_tokens=12, seed=17)
    eager = LLMEngine(model, EngineConfig(block_size=16, max_num_seqs=8, max_model_len=512, speculative_config=NGRAM),
                      eos_token_ids=())
    graphs = with_graphs(model)
    assert run_all(graphs, ps, params) == run_all(eager, ps, params)
    assert any(r.cuda_graph_batch and r.num_verify_tokens > r.num_decode_tokens for r in graphs.trace)


def test_the_rule_turns_drafting_off_above_its_batch_size(model):
    spec = dict(NGRAM, disable_by_batch_size=2)
    engine = with_graphs(model, spec)
    run_all(engine, looping_prompts(4, seed=3), [SamplingParams(temperature=0.0, max_tokens=n) for n in (6, 8, 30, 40)])
    rule = engine.runner.speculator.rule
    assert rule.steps_off_by_batch > 0
    for r in engine.trace:                  # a step of more than 2 rows verified no drafts
        if len(r.entries) > 2:
            assert all(e.num_draft_tokens == 0 for e in r.entries)
    assert any(e.num_draft_tokens for r in engine.trace if len(r.entries) <= 2 for e in r.entries)


def test_the_rule_pauses_a_request_whose_drafts_fail(model):
    prompt = looping_prompts(1, seed=4)[0]
    truth = unpaged_generate(model, prompt, 60)
    never = OracleProposer({tuple(prompt): truth}, 0.0, TINY.vocab_size)   # every draft spoiled
    engine = with_graphs(model, dict(NGRAM, min_acceptance=0.25), proposer=never)
    engine.add_request("r", prompt, SamplingParams(temperature=0.0, max_tokens=60))
    while engine.has_unfinished():
        engine.step()
    assert engine.take_output("r").outputs[0].token_ids == truth
    rule = engine.runner.speculator.rule
    drafted = [bool(e.num_draft_tokens) for r in engine.trace for e in r.entries if e.kind != "prefill"]
    # 7 rejected drafts judged (one per pass: then 2 kept of 8 is out of reach), 32 tokens decoded plainly,
    # then it tries again, fails again, and pauses twice as long (64 tokens: past the 60 it writes)
    assert rule.pauses == 2 and drafted[:7] == [True] * 7 and not any(drafted[7:39]) and drafted[39:46] == [True] * 7
    assert not any(drafted[46:])
    assert rule.to_dict()["min_acceptance"] == 0.25 and rule.to_dict()["threshold"] == 0.25


def test_a_costly_drafter_probes_with_one_draft_until_its_window_clears_the_break_even():
    from engine.spec_decode.rule import break_even
    assert break_even(4, 0.0) < 0.25 < break_even(4, 0.25) < break_even(4, 0.5) < 0.8    # dearer drafts, higher bar
    assert break_even(4, 1.0) == 1.0                     # a draft as dear as the target never pays
    rule = SpeculationRule(min_acceptance=0.25, k=4, draft_cost=0.5)
    assert rule.threshold == break_even(4, 0.5)
    assert rule.drafts_for(1, 4) == 1                    # on probation
    for _ in range(7):
        rule.judged(1, 10, 1, 1)                         # every probe kept
    assert rule.drafts_for(1, 4) == 4                    # 7 of 8 kept: past the bar, trusted
    rule.judged(2, 10, 1, 0)
    assert rule.request_allows(2, 11) and rule.pauses == 0
    rule.judged(2, 11, 1, 0)                             # two rejections: 6 of 8 can no longer reach 0.775
    assert rule.pauses == 1 and not rule.request_allows(2, 12) and rule.request_allows(2, 12 + 32)
    assert SpeculationRule(min_acceptance=0.25, k=4, draft_cost=0.0).drafts_for(1, 4) == 4   # a free lookup


def test_rule_from_config_defaults():
    from engine.config import SpeculativeConfig
    rule = SpeculationRule.from_config(SpeculativeConfig.from_dict({"method": "ngram", "num_speculative_tokens": 4}))
    assert rule.disable_by_batch_size is not None and rule.min_acceptance is not None
    with pytest.raises(ValueError, match="min_acceptance"):
        SpeculativeConfig.from_dict({"method": "ngram", "num_speculative_tokens": 4, "min_acceptance": 2})


def test_early_exit_drafts_replay_graphs_of_their_layers_and_keep_the_tokens(model):
    spec = {"method": "early_exit", "num_speculative_tokens": 3, "num_layers": 1, "min_acceptance": None}
    engine = with_graphs(model, spec)
    runner, proposer = engine.runner, engine.runner.speculator.proposer
    assert proposer.graphs is None                                       # none captured on the CPU by itself
    proposer.graphs = runner.capture_draft_graphs(1, [1, 2, 4, 8], capture=ReplayByRerun)
    replayed = []
    replay = runner.replay_draft
    runner.replay_draft = lambda graphs, out: replayed.append(r := replay(graphs, out)) or r
    ps = looping_prompts(5, seed=6)
    params = [SamplingParams(temperature=0.0, max_tokens=8 + 2 * i) for i in range(len(ps))]
    assert run_all(engine, ps, params) == [unpaged_generate(model, p, sp.max_tokens) for p, sp in zip(ps, params)]
    assert replayed and all(x is not None for x in replayed)            # every draft pass replayed a graph
    assert engine.spec_stats.num_drafts > 0
