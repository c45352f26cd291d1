"""Speculative decoding's verify steps on a real GPU (marker gpu), float32 on SmolLM2's shapes:
a verify CUDA graph gives the eager verify's logits, every proposer's greedy tokens equal plain
decoding's with verify graphs replayed, a verify step makes the host wait once, and the rejection
sampler on the device passes the chi-square test the CPU one passes.
"""
from __future__ import annotations

import copy
import random

import pytest
import torch

import kernels
from engine.config import EngineConfig, ModelConfig
from engine.core.records import ScheduledRequest, SchedulerOutput
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams
from engine.spec_decode.rejection_sampler import rejection_sample
from tests.engine.test_rejection_sampler import TRIALS, assert_follows_target, run_trials
from tests.helpers.host_waits import host_waits_per_step

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available() or kernels.paged_attention_triton is None,
                                                  reason="needs CUDA and triton")]
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=24)
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


@pytest.fixture(scope="module")
def looping():
    """Random SmolLM2 shapes in float32: it repeats itself, so n-gram lookup drafts."""
    return Llama.random(ModelConfig(), seed=11).to("cuda", torch.float32).eval().requires_grad_(False)


@pytest.fixture(scope="module")
def hashing(looping):
    """The same weights x8 (norms aside): hash-like text, so model drafts are kept and rejected."""
    model = copy.deepcopy(looping)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(8.0)
    return model


KNOBS = dict(block_size=16, num_kv_blocks=128, max_num_seqs=8, max_num_batched_tokens=256)


def run(engine: LLMEngine, prompts: list[list[int]], params=GREEDY) -> list[list[int]]:
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
    while engine.has_unfinished():
        engine.step()
    assert engine.num_free_blocks() == engine.block_manager.num_blocks
    return [engine.take_output(str(i)).outputs[0].token_ids for i in range(len(prompts))]


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [([rng.randrange(3, 40000) for _ in range(rng.randint(2, 4))] * 10)[:rng.randint(12, 40)] for _ in range(n)]


def test_a_verify_graph_gives_the_eager_verify_logits(looping):
    engine = LLMEngine(looping, EngineConfig(**KNOBS, speculative_config=NGRAM), eos_token_ids=())
    runner = engine.runner
    assert runner.graphs is not None and runner.verify_graphs is not None and runner.verify_k == 4
    reqs = [ScheduledRequest(0, "a", "verify", [5], 20, [1, 2], sample=True, sampling_params=GREEDY,
                             draft_token_ids=[6, 7], num_lookahead_tokens=4),
            ScheduledRequest(1, "b", "decode", [9], 3, [3], sample=True, sampling_params=GREEDY),
            ScheduledRequest(2, "c", "verify", [8], 30, [4, 5, 6], sample=True, sampling_params=GREEDY,
                             draft_token_ids=[1, 2, 3, 4], num_lookahead_tokens=4)]
    out = SchedulerOutput(scheduled=reqs)
    with torch.inference_mode():
        for kv in engine.kv_cache.kv:                        # a context to attend over
            kv.normal_()
        inputs = runner.prepare_inputs(out, pad_to=runner.verify_graph_size_for(out), verify_k=4)
        graph = runner.verify_graphs.replay(4).index_select(0, inputs.logits_indices).clone()
        eager_inputs = runner.prepare_inputs(out)
        hidden = looping(eager_inputs.input_ids, eager_inputs.positions, runner.attn.bind(eager_inputs.meta))
        eager = looping.compute_logits(hidden[eager_inputs.logits_indices])
    torch.testing.assert_close(graph, eager, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["ngram", "early_exit", "draft_model"])
def test_float32_greedy_tokens_equal_plain_with_verify_graphs(looping, hashing, method):
    target = looping if method == "ngram" else hashing
    spec = {"ngram": NGRAM, "early_exit": {"method": "early_exit", "num_speculative_tokens": 4, "num_layers": 28},
            "draft_model": {"method": "draft_model", "num_speculative_tokens": 4, "model": "self"}}[method]
    ps = prompts(6, seed=1)
    plain = run(LLMEngine(target, EngineConfig(**KNOBS), eos_token_ids=()), ps)
    engine = LLMEngine(target, EngineConfig(**KNOBS, speculative_config=dict(spec, min_acceptance=None)),
                       draft_model=target if method == "draft_model" else None, eos_token_ids=())
    if method == "early_exit":                               # its draft passes replay graphs of their layers
        assert engine.runner.speculator.proposer.graphs is not None
    assert run(engine, ps) == plain
    replayed = [r for r in engine.trace if r.cuda_graph_batch and r.num_verify_tokens > r.num_decode_tokens]
    assert replayed, "no verify step replayed a graph"
    assert engine.spec_stats.num_accepted > 0


def test_a_verify_step_waits_for_the_device_once(looping):
    engine = LLMEngine(looping, EngineConfig(**KNOBS, speculative_config=NGRAM), eos_token_ids=())
    params = [GREEDY, SamplingParams(temperature=0.8, top_p=0.9, max_tokens=24, seed=3, ignore_eos=True)]
    for i, p in enumerate(prompts(4, seed=2)):
        engine.add_request(str(i), p, params[i % 2])
    engine.step()                                            # the prefill (lazy initialisation may sync)
    counts = host_waits_per_step(engine)
    verify = [(n, r) for n, r in counts if r.num_verify_tokens > r.num_decode_tokens]
    assert verify and any(r.cuda_graph_batch for _, r in verify)
    assert all(n == 1 for n, _ in counts), [(n, r.cuda_graph_batch, r.num_verify_tokens) for n, r in counts]


def on_device(p, drafts, num_drafts, q, u):
    dev = "cuda"
    accepted, final = rejection_sample(p.to(dev), drafts.to(dev), num_drafts.to(dev),
                                       None if q is None else q.to(dev), u.to(dev))
    return accepted.cpu(), final.cpu()


@pytest.mark.parametrize("draft", ["decent draft", "badly wrong draft", "point mass"])
def test_the_device_rejection_sampler_passes_the_chi_square_test(draft):
    counts = run_trials(draft, on_device)
    assert counts.sum() == TRIALS
    assert_follows_target(counts)
