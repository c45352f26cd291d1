"""The ModelRunner works from a SchedulerOutput alone: hand-written records (blocks chosen by hand,
no block manager anywhere) give the unpaged loop's tokens; the records survive pickling (as they
must to reach a worker process); forked samples, probabilities and draft verification come back
in the ModelRunnerOutput."""
from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest
import torch

from engine.core.records import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from engine.model.llama import Llama
from engine.model.sampler import make_generator, sample, sampling_probs
from engine.sampling_params import SamplingParams
from engine.spec_decode.speculator import Speculator
from engine.unpaged import unpaged_generate
from engine.worker import model_runner
from engine.worker.kv_cache import KVCache
from engine.worker.model_runner import ModelRunner
from tests.helpers.tiny import TINY

BS = 4
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    return Llama.random(TINY, seed=11).eval()


def new_runner(model, speculator=None) -> ModelRunner:
    return ModelRunner(model, KVCache(TINY, 16, BS, torch.float32, torch.device("cpu")), speculator=speculator)


def run(runner: ModelRunner, out: SchedulerOutput) -> ModelRunnerOutput:
    """Like a worker process: the runner only ever sees an unpickled copy of the record."""
    result = runner.execute(pickle.loads(pickle.dumps(out)))
    return pickle.loads(pickle.dumps(result))


def test_runner_needs_nothing_but_the_record(model):
    prompts = {0: list(range(20, 33)), 1: list(range(40, 47))}          # 13 and 7 tokens
    tables = {0: [9, 3, 14, 0, 7, 11], 1: [5, 12, 2, 15]}                # scattered blocks, chosen by hand
    runner = new_runner(model)
    # step 1: the first 8 tokens of prompt 0 (a chunk: no sample) beside all of prompt 1
    first = run(runner, SchedulerOutput(scheduled=[
        ScheduledRequest(0, "a", "prefill", prompts[0][:8], 0, tables[0]),
        ScheduledRequest(1, "b", "prefill", prompts[1], 0, tables[1], sample=True, sampling_params=GREEDY)]))
    assert first.seq_ids == [1]                                          # the middle chunk has no row
    tokens = {0: [], 1: [first.sampled_token_ids[0][0]]}
    # step 2: the rest of prompt 0; then decodes for both until each has 8 tokens
    step = [ScheduledRequest(0, "a", "prefill", prompts[0][8:], 8, tables[0], sample=True, sampling_params=GREEDY),
            ScheduledRequest(1, "b", "decode", tokens[1][-1:], 7, tables[1], sample=True, sampling_params=GREEDY)]
    while True:
        result = run(runner, SchedulerOutput(scheduled=step))
        for seq_id, new in zip(result.seq_ids, result.sampled_token_ids):
            tokens[seq_id] += new
        if min(len(t) for t in tokens.values()) >= 8:
            break
        step = [ScheduledRequest(i, "ab"[i], "decode", tokens[i][-1:], len(prompts[i]) + len(tokens[i]) - 1,
                                 tables[i], sample=True, sampling_params=GREEDY) for i in (0, 1)]
    for i in (0, 1):
        assert tokens[i][:8] == unpaged_generate(model, prompts[i], 8)


def test_runner_module_does_not_reach_the_block_manager_or_live_sequences():
    tree = ast.parse(Path(model_runner.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {m for m in imported if m and m.split(".")[-1] in ("block_manager", "scheduler", "sequence")}


def test_forked_samples_draw_from_one_row_with_their_own_seeds(model):
    runner = new_runner(model)
    params = SamplingParams(temperature=1.0, n=3, seed=7)
    prompt = list(range(50, 60))
    result = run(runner, SchedulerOutput(scheduled=[ScheduledRequest(
        4, "r:0", "prefill", prompt, 0, [1, 2, 3], sample=True, sampling_params=params, fork_seq_ids=[8, 9],
        seed=params.seed)]))
    assert result.seq_ids == [4, 8, 9]
    # the same row, sampled with seeds 7, 8, 9 (sample i draws with seed + i)
    logits = torch.stack([compute_last_logits(model, prompt)] * 3)
    want = sample(logits, [params] * 3, [make_generator(7 + i) for i in range(3)])
    assert [t[0] for t in result.sampled_token_ids] == want


def compute_last_logits(model, prompt):
    from engine.model.llama import ContiguousKV
    with torch.inference_mode():
        hidden = model(torch.tensor(prompt), torch.arange(len(prompt)), ContiguousKV(TINY.num_layers))
        return model.compute_logits(hidden[-1:])[0]


def test_probabilities_come_back_when_asked(model):
    runner = new_runner(model)
    params = SamplingParams(temperature=0.7, top_k=20, seed=3)
    prompt = list(range(5, 14))
    out = SchedulerOutput(scheduled=[ScheduledRequest(0, "p", "prefill", prompt, 0, [6, 7, 8], sample=True,
                                                      sampling_params=params)], return_probs=True)
    result = run(runner, out)
    token, p = result.sampled_token_ids[0][0], result.sampled_probs[0][0]
    logits = compute_last_logits(model, prompt)
    # The paged pass and this contiguous one may sum in other orders: 13 matrix products in a row (6 a layer,
    # the head), each of at most 128 terms summed pairwise, log2(128) = 7 eps apiece: the logits agree to
    # ~100 eps of their scale. A drift d in the logits moves softmax(logits / T) by at most 2d/T relative.
    drift = 100 * torch.finfo(torch.float32).eps * logits.abs().max().item()
    assert p == pytest.approx(sampling_probs(logits, params)[token].item(), rel=2 * drift / params.temperature)
    assert 0 < p <= 1


@pytest.mark.parametrize("wrong_at", [None, 0, 2])
def test_greedy_drafts_are_verified_in_one_pass(model, wrong_at):
    """The drafts ride along after the last token; the matching run is kept plus one model token."""
    prompt = list(range(30, 41))
    want = unpaged_generate(model, prompt, 6)
    runner = new_runner(model, Speculator())     # no proposer: it verifies the drafts the record brings
    first = run(runner, SchedulerOutput(scheduled=[ScheduledRequest(
        0, "d", "prefill", prompt, 0, [0, 1, 2, 3, 4], sample=True, sampling_params=GREEDY)]))
    assert first.sampled_token_ids == [[want[0]]]
    drafts = list(want[1:5])
    if wrong_at is not None:
        drafts[wrong_at] = (drafts[wrong_at] + 1) % TINY.vocab_size
    result = run(runner, SchedulerOutput(scheduled=[ScheduledRequest(
        0, "d", "verify", [want[0]], len(prompt), [0, 1, 2, 3, 4], sample=True, sampling_params=GREEDY,
        draft_token_ids=drafts)]))
    accepted = 4 if wrong_at is None else wrong_at
    assert result.sampled_token_ids == [want[1:1 + accepted + 1]]


def test_records_are_plain_data():
    out = SchedulerOutput(scheduled=[ScheduledRequest(1, "x", "decode", [5], 9, [2, 3], sample=True,
                                                      sampling_params=GREEDY, draft_token_ids=[6, 7])],
                          blocks_to_copy=[(2, 4)], finished_seq_ids=[0], preempted=[("y", "recompute")])
    assert pickle.loads(pickle.dumps(out)) == out
    assert out.num_batched_tokens == 3                      # the token and its two drafts

    def plain(x):
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        if isinstance(x, dict):
            return all(plain(k) and plain(v) for k, v in x.items())
        if hasattr(x, "__dataclass_fields__"):
            return all(plain(getattr(x, f)) for f in x.__dataclass_fields__)
        return x is None or isinstance(x, (int, float, str, bool))
    assert plain(out) and plain(ModelRunnerOutput([1], [[2, 3]], [[0.5, 1.0]], 0.1, 0.2))
