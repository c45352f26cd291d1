"""Speculative decoding in the engine: greedy outputs are the plain engine's, token for token, with
every proposer and k = 1..6, alone and in mixed batches (prefill chunks, plain decodes, sampled rows,
preemption); nothing leaks; the statistics meet the closed form; rollback caches verified tokens only.
The distribution under sampling is tested in test_rejection_sampler.py.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.bench.spec import OracleProposer
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from engine.spec_decode import SpeculativeConfig, expected_tokens_per_pass
from engine.spec_decode.ngram import ngram_lookup
from engine.unpaged import unpaged_generate
from tests.helpers.tiny import TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")
GREEDY = dict(temperature=0.0, ignore_eos=True)
PROPOSERS = {
    "ngram": {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3},
    "early_exit": {"method": "early_exit", "num_layers": 1},
    "draft_model": {"method": "draft_model", "model": "tiny-draft"},
}


def scaled(model: Llama, noise: float = 0.0, scale: float = 8.0, seed: int = 12) -> Llama:
    """Weights x 8 (Llama.random's std of 0.02 makes a model that repeats one token, which any draft
    guesses), plus relative noise for a draft that is the target, roughly."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(scale).add_(torch.randn(p.shape, generator=g) * p.std() * noise)
    return model.eval()


@pytest.fixture(scope="module")
def model():
    return scaled(Llama.random(TINY, seed=11))


@pytest.fixture(scope="module")
def draft():
    return scaled(Llama.random(TINY, seed=11), noise=0.1)    # the target plus noise: right about half the time


def engine_for(model, draft, method: str, k: int, eos_token_ids=None, **knobs) -> LLMEngine:
    # the rule off: these tests judge what the drafts become, not when drafting pays (test_rule_* do)
    spec = dict(PROPOSERS[method], num_speculative_tokens=k, min_acceptance=None)
    knobs.setdefault("block_size", 4)
    return LLMEngine(model, EngineConfig(speculative_config=spec, **knobs),
                     draft_model=draft if method == "draft_model" else None, eos_token_ids=eos_token_ids)


def drain(engine: LLMEngine) -> None:
    while engine.has_unfinished():
        engine.step()


def assert_no_leak(engine: LLMEngine) -> None:
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
    assert not engine.block_manager.tables


PROMPTS = [[5, 6, 7, 8] * 3 + [5], list(range(40, 52)), [9, 3, 9, 3, 1, 2, 9, 3]]


@pytest.mark.parametrize("method", PROPOSERS)
@pytest.mark.parametrize("k", range(1, 7))
def test_greedy_single_request_is_token_identical(model, draft, method, k):
    for prompt in PROMPTS:
        want = unpaged_generate(model, prompt, 24)
        engine = engine_for(model, draft, method, k)
        engine.add_request("r", prompt, SamplingParams(max_tokens=24, **GREEDY))
        drain(engine)
        assert engine.take_output("r").outputs[0].token_ids == want
        assert engine.spec_stats.num_verify_passes > 0
        assert_no_leak(engine)


@pytest.mark.parametrize("method", PROPOSERS)
@pytest.mark.parametrize("k", range(1, 7))
def test_greedy_mixed_batch_is_token_identical(model, draft, method, k):
    """Speculating rows beside rows that do not (num_speculative_tokens=0), a chunked 60-token prompt
    arriving mid-way, a seeded sampled row, a small budget and a KV cache small enough to preempt."""
    engine = engine_for(model, draft, method, k, max_num_batched_tokens=12, num_kv_blocks=24)
    greedy = {"spec-a": (PROMPTS[0], None), "plain": (PROMPTS[1], 0), "one-draft": (PROMPTS[2], 1)}
    for name, (prompt, cap) in greedy.items():
        engine.add_request(name, prompt, SamplingParams(max_tokens=20, num_speculative_tokens=cap, **GREEDY))
    engine.step()
    engine.step()
    greedy["late-long"] = (list(range(100, 160)), None)
    engine.add_request("late-long", greedy["late-long"][0], SamplingParams(max_tokens=12, **GREEDY))
    engine.add_request("sampled", [1, 2, 3, 1, 2, 3], SamplingParams(temperature=0.8, seed=3, max_tokens=16, ignore_eos=True))
    drain(engine)
    for name, (prompt, _) in greedy.items():
        n = 12 if name == "late-long" else 20
        assert engine.take_output(name).outputs[0].token_ids == unpaged_generate(model, prompt, n), name
    assert len(engine.take_output("sampled").outputs[0].token_ids) == 16
    steps = list(engine.trace)
    kinds = {(e.request_id, e.kind) for r in steps for e in r.entries}
    assert ("plain", "verify") not in kinds                               # it never speculated ...
    assert any(k_ == "verify" for _, k_ in kinds)                         # ... while the others did
    assert any(r.num_prefill_tokens and r.num_verify_tokens for r in steps)   # chunks beside verify rows
    assert max(e.num_draft_tokens for r in steps for e in r.entries if e.request_id == "one-draft") <= 1
    assert sum(len(r.preempted) for r in steps) >= 1                      # memory ran short at least once
    assert_no_leak(engine)


def run_outputs(engine: LLMEngine, requests: dict) -> dict[str, list[int]]:
    for name, (prompt, params) in requests.items():
        engine.add_request(name, prompt, params)
    drain(engine)
    return {name: engine.take_output(name).outputs[0].token_ids for name in requests}


@pytest.mark.parametrize("method", PROPOSERS)
def test_mixed_batch_outputs_equal_the_plain_engines(model, draft, method):
    """The same mixed workload with and without speculation: every greedy output identical, and the
    seeded sampled request reproducible when the workload is (not across workloads: the budget sets
    how many drafts a step may verify, and a bonus draw and a judged draft are different draws)."""
    def workload():
        return {"a": (PROMPTS[0], SamplingParams(max_tokens=20, **GREEDY)),
                "b": (PROMPTS[1], SamplingParams(max_tokens=20, num_speculative_tokens=0, **GREEDY)),
                "c": (list(range(100, 160)), SamplingParams(max_tokens=12, **GREEDY)),
                "s": ([1, 2, 3, 1, 2, 3], SamplingParams(temperature=0.8, seed=3, max_tokens=16, ignore_eos=True))}
    knobs = dict(max_num_batched_tokens=12, num_kv_blocks=36)
    plain = run_outputs(LLMEngine(model, EngineConfig(block_size=4, **knobs)), workload())
    spec = run_outputs(engine_for(model, draft, method, 4, **knobs), workload())
    again = run_outputs(engine_for(model, draft, method, 4, **knobs), workload())
    alone = [run_outputs(engine_for(model, draft, method, 4, **knobs), {"s": workload()["s"]})["s"] for _ in range(2)]
    assert {n: spec[n] for n in "abc"} == {n: plain[n] for n in "abc"}
    assert spec["s"] == again["s"] and alone[0] == alone[1] and len(spec["s"]) == 16


def test_drafts_are_rejected_and_accepted_in_these_tests(model, draft):
    """The parity tests above mean something only if drafts were both kept and thrown away."""
    for method in PROPOSERS:
        engine = engine_for(model, draft, method, 4)
        for i, prompt in enumerate(PROMPTS):
            engine.add_request(str(i), prompt, SamplingParams(max_tokens=24, **GREEDY))
        drain(engine)
        s = engine.spec_stats
        assert s.num_accepted > 0 and s.num_rejected > 0, (method, s)


def test_early_exit_and_eos_inside_accepted_drafts(model, draft):
    """An EOS among the kept drafts ends the request there, as plain decoding would; blocks are freed."""
    prompt = PROMPTS[1]
    want = unpaged_generate(model, prompt, 24)
    eos = want[9]
    expected = unpaged_generate(model, prompt, 24, eos_token_id=eos)
    for method in PROPOSERS:
        engine = engine_for(model, draft, method, 6, eos_token_ids={eos})
        engine.add_request("e", prompt, SamplingParams(temperature=0.0, max_tokens=24))
        drain(engine)
        out = engine.take_output("e").outputs[0]
        assert out.token_ids == expected and out.finish_reason == "stop"
        assert_no_leak(engine)


def test_abort_mid_verification_frees_everything(model, draft):
    """Abort after the verify pass ran and before the scheduler saw its result (the lookahead blocks
    are still held): the update skips it, the other request carries on, nothing leaks."""
    for method in PROPOSERS:
        engine = engine_for(model, draft, method, 5)
        engine.add_request("gone", PROMPTS[0], SamplingParams(max_tokens=30, **GREEDY))
        engine.add_request("stays", PROMPTS[2], SamplingParams(max_tokens=12, **GREEDY))
        engine.step()                                          # prefill both
        sched = engine.scheduler.schedule()
        assert [r.kind for r in sched.scheduled] == ["verify", "verify"]
        held = len(engine.block_manager.block_ids(sched.scheduled[0].seq_id))
        assert held == -(-(len(PROMPTS[0]) + 1 + 5) // 4)     # the lookahead slots are reserved
        result = engine.runner.execute(sched)
        engine.abort("gone")
        engine.process_output(sched, result)
        drain(engine)
        assert engine.take_output("stays").outputs[0].token_ids == unpaged_generate(model, PROMPTS[2], 12)
        assert engine.take_output("gone").outputs[0].finish_reason == "abort"
        assert_no_leak(engine)


def test_rollback_caches_verified_tokens_only(model, draft):
    """After a speculative request, every prefix-cache entry lies on its final token chain: no block
    holding a rejected draft was ever registered. And a rejected block is given back the same step."""
    engine = engine_for(model, draft, "draft_model", 6, num_kv_blocks=64)
    engine.add_request("r", PROMPTS[1], SamplingParams(max_tokens=40, **GREEDY))
    while engine.has_unfinished():
        engine.step()
        seq = engine.scheduler.seqs.get(0)
        if seq is not None:     # between steps a sequence holds no block beyond what its tokens need
            assert len(engine.block_manager.block_ids(0)) <= -(-seq.num_tokens // 4)
    assert any(r.blocks_freed for r in list(engine.trace)[:-1])      # rejected lookahead blocks came back
    final = PROMPTS[1] + engine.take_output("r").outputs[0].token_ids
    hits = engine.block_manager.find_cached_prefix(final + [0])
    assert hits.num_tokens == ((len(final) - 1) // 4) * 4         # the last token was sampled, never computed
    assert len(engine.block_manager.pool.cached) == len(hits.block_ids)
    assert engine.spec_stats.num_rejected > 0


def test_trace_and_statistics_agree(model, draft):
    engine = engine_for(model, draft, "draft_model", 3)
    engine.add_request("g", PROMPTS[0], SamplingParams(max_tokens=20, **GREEDY))
    engine.add_request("s", PROMPTS[2], SamplingParams(temperature=1.0, seed=0, max_tokens=20, ignore_eos=True))
    drain(engine)
    verify = [(r, e) for r in engine.trace for e in r.entries if e.kind == "verify"]
    assert verify and all(e.verified is not None and e.num_draft_tokens == e.verified.num_drafts for _, e in verify)
    assert sum(r.num_draft_tokens for r in engine.trace) == engine.spec_stats.num_drafts
    assert sum(r.num_accepted_tokens for r in engine.trace) == engine.spec_stats.num_accepted
    for name in "gs":
        out = engine.take_output(name)
        assert out.metrics.spec.num_tokens == len(out.outputs[0].token_ids) == 20
    sampled = [e.verified for _, e in verify if e.request_id == "s"]
    assert all(v.draft_probs is not None and len(v.target_probs) == v.num_drafts and 0 < v.final_prob <= 1
               for v in sampled)
    greedy = [e.verified for _, e in verify if e.request_id == "g"]
    assert all(v.target_probs is None for v in greedy)


@pytest.mark.parametrize("a,k", [(0.6, 4), (0.85, 3)])
def test_closed_form_meets_the_engines_statistics(model, a, k):
    prompts = [tuple(range(i * 7, i * 7 + 9)) for i in range(6)]
    continuations = {p: unpaged_generate(model, list(p), 160) for p in prompts}
    # drafts the known continuation, each token spoiled with probability 1 - a: the closed form's assumption
    oracle = OracleProposer(continuations, a, TINY.vocab_size)
    # the rule off: it would pause a request through an unlucky window, and the closed form counts every pass
    engine = LLMEngine(model, EngineConfig(block_size=4, speculative_config={
        "method": "ngram", "num_speculative_tokens": k, "min_acceptance": None}), proposer=oracle)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), list(p), SamplingParams(max_tokens=160, **GREEDY))
    drain(engine)
    for i, p in enumerate(prompts):
        assert engine.take_output(str(i)).outputs[0].token_ids == continuations[p]
    s = engine.spec_stats
    # the last passes of a request draft fewer than k (max_tokens): the closed form pass by pass
    ks = [e.num_draft_tokens for r in engine.trace for e in r.entries if e.kind == "verify"]
    assert len(ks) == s.num_verify_passes > 250
    predicted = sum(expected_tokens_per_pass(a, kk) for kk in ks) / len(ks)
    var = sum(_variance(a, kk) for kk in ks) / len(ks) ** 2
    assert abs(s.tokens_per_verify_pass - predicted) < 4 * var ** 0.5
    assert abs(s.per_draft_acceptance - a) < 0.05


def _variance(a: float, k: int) -> float:
    """Variance of tokens per pass = 1 + (kept), kept truncated-geometric on 0..k."""
    probs = [a ** i * (1 - a) for i in range(k)] + [a ** k]
    mean = sum((i + 1) * p for i, p in enumerate(probs))
    return sum((i + 1 - mean) ** 2 * p for i, p in enumerate(probs))


def test_lookahead_stops_short_of_max_tokens_and_the_budget(model):
    engine = LLMEngine(model, EngineConfig(block_size=4, max_num_batched_tokens=3,
                                           speculative_config={"method": "ngram", "num_speculative_tokens": 6}))
    engine.add_request("r", PROMPTS[0], SamplingParams(max_tokens=4, **GREEDY))
    engine.add_request("q", PROMPTS[0], SamplingParams(max_tokens=4, num_speculative_tokens=0, **GREEDY))
    engine.step()
    engine.step()                   # prompts are chunked by the budget of 3
    seen = []
    while engine.has_unfinished():
        sched = engine.scheduler.schedule()
        seen += [(r.request_id, r.kind, r.num_lookahead_tokens) for r in sched.scheduled]
        assert sched.num_batched_tokens <= 3
        engine.process_output(sched, engine.runner.execute(sched))
    lookaheads = [la for name, kind, la in seen if kind == "verify"]
    assert lookaheads and max(lookaheads) <= 2                      # budget 3 = newest token + 2 drafts
    assert all(kind != "verify" for name, kind, _ in seen if name == "q")


def test_ngram_lookup():
    assert ngram_lookup([1, 2, 3, 4, 1, 2, 3], 3, 1, 4) == [4, 1, 2]
    assert ngram_lookup([5, 1, 2, 9, 9, 1, 2], 3, 1, 4) == [9, 9, 1]      # the longest suffix, most recent match
    assert ngram_lookup([7, 7, 7, 7, 7, 7, 7], 3, 1, 4) == [7, 7, 7]      # prefers a match with k tokens after it
    assert ngram_lookup([1, 2, 3], 3, 1, 4) == []
    assert ngram_lookup([1, 2, 3, 2], 3, 2, 4) == []                      # below prompt_lookup_min
    assert ngram_lookup([256, 0, 9, 1], 3, 1, 1) == []                    # byte patterns never straddle tokens
    assert ngram_lookup([1, 256, 0, 9, 1], 3, 1, 1) == [256, 0, 9]


@pytest.mark.parametrize("bad,field", [
    ({"method": "medusa", "num_speculative_tokens": 2}, "method"),
    ({"method": "ngram"}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 99}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5}, "prompt_lookup_min"),
    ({"method": "ngram", "num_speculative_tokens": 2, "num_layers": 3}, "num_layers"),
    ({"method": "early_exit", "num_speculative_tokens": 2}, "num_layers"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "model"),
    ({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 3}, "lookahead"),
])
def test_a_bad_config_names_its_field(bad, field):
    with pytest.raises(ValueError, match=field):
        EngineConfig(speculative_config=bad)


def test_engine_level_config_errors(model, draft):
    with pytest.raises(ValueError, match="num_layers"):       # TINY has 2 layers: an exit after both is no draft
        LLMEngine(model, EngineConfig(speculative_config={"method": "early_exit", "num_speculative_tokens": 2, "num_layers": 2}))
    with pytest.raises(ValueError, match="draft_model="):
        LLMEngine(model, EngineConfig(speculative_config={"method": "draft_model", "num_speculative_tokens": 2, "model": "x"}))
    wrong_vocab = Llama.random(dataclasses.replace(TINY, vocab_size=300))
    with pytest.raises(ValueError, match="vocabulary"):
        engine_for(model, wrong_vocab, "draft_model", 2)
    with pytest.raises(ValueError, match="static batching"):
        LLMEngine(model, EngineConfig(speculative_config={"method": "ngram", "num_speculative_tokens": 2}), static_batching=True)
    assert SpeculativeConfig.from_dict({"method": "ngram", "num_speculative_tokens": 3}).to_dict() == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}


def test_a_draft_model_cache_follows_copy_on_write(model, draft):
    """n = 3 greedy samples fork off a 30-token prompt (blocks of 16: the second is 14/16 full, so the
    first write copies it) and speculate. Each draws exactly the drafts a lone request draws, which it
    could not if the draft model's cache missed the copy of that block."""
    prompt = list(range(60, 90))
    alone = engine_for(model, draft, "draft_model", 4, block_size=16)
    alone.add_request("one", prompt, SamplingParams(max_tokens=16, **GREEDY))
    drain(alone)
    one = alone.take_output("one")
    engine = engine_for(model, draft, "draft_model", 4, block_size=16)
    engine.add_request("n", prompt, SamplingParams(n=3, max_tokens=16, **GREEDY))
    drain(engine)
    assert any(r.blocks_copied for r in engine.trace)
    out = engine.take_output("n")
    for completion in out.outputs:
        assert completion.token_ids == one.outputs[0].token_ids == unpaged_generate(model, prompt, 16)
    # the request's statistics count its three completions' passes: three times the lone request's
    assert out.metrics.spec.accepted_histogram == [3 * x for x in one.metrics.spec.accepted_histogram]
    assert one.metrics.spec.num_accepted > 0
    assert_no_leak(engine)


def test_cli_flags_build_the_config_and_name_themselves_in_errors(capsys):
    from engine.cli import build_parser, main, speculative_config
    args = build_parser().parse_args(["generate", "hi", "--speculative-method", "ngram", "--num-speculative-tokens", "3",
                                      "--prompt-lookup-max", "2"])
    assert speculative_config(args) == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}
    assert speculative_config(build_parser().parse_args(["generate", "hi"])) is None
    for argv, flag in [(["--speculative-method", "early_exit", "--num-speculative-tokens", "2"], "--speculative-num-layers"),
                       (["--num-speculative-tokens", "2"], "--speculative-method"),
                       (["--speculative-method", "ngram"], "--num-speculative-tokens"),
                       (["--speculative-method", "ngram", "--num-speculative-tokens", "0"], "--num-speculative-tokens")]:
        assert main(["generate", "hi", "--random-weights", "--device", "cpu", *argv]) == 2
        assert flag in capsys.readouterr().err
