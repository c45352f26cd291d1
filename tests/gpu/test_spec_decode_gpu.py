"""Speculative decoding on a GPU (skipped without CUDA), on random weights of SmolLM2's shapes in float32:
every proposer's greedy tokens equal the plain engine's in a mixed batch (verify rows beside plain
decodes and a chunked prefill), a seeded sampled row goes through rejection sampling on the device,
drafts are both kept and rejected, and every KV block comes back.

Two targets. For early exit and the draft model, the weights scaled x8 (norms aside), as in
tests/engine/test_spec_decode.py: their text is hash-like, so drafts are kept and rejected, and the
argmax is decisive. For n-gram lookup, Llama.random as it is (std 0.02): it repeats one token, so
lookup finds something to draft (the scaled model never repeats a token in 24), and its top two
logits still differ by far more than a 1-row and a (k + 1)-row matmul's round-off (its drafts are
all kept; the unit tests cover n-gram rejections).
`SPEC_GPU_DEVICE=cpu` runs the same tests on the CPU (slowly), to check them without a GPU.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch

from engine.config import EngineConfig, ModelConfig
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.sampling_params import SamplingParams

DEVICE = os.environ.get("SPEC_GPU_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                                  reason="needs CUDA")]
GREEDY = dict(temperature=0.0, ignore_eos=True)
PROPOSERS = {
    "ngram": {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 3},
    "early_exit": {"method": "early_exit", "num_layers": 28},      # ~50% agreement with all 30 here
    "draft_model": {"method": "draft_model", "model": "noisy-copy"},
}


def scaled(model: Llama, noise: float = 0.0, seed: int = 12) -> Llama:
    g = torch.Generator(device=model.embed.weight.device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not name.endswith("norm.weight"):
                p.mul_(8.0).add_(torch.randn(p.shape, generator=g, device=p.device) * p.std() * noise)
    return model.eval().requires_grad_(False)


@pytest.fixture(scope="module")
def models():
    looping = Llama.random(ModelConfig(), seed=11).to(DEVICE, torch.float32).eval().requires_grad_(False)
    target = scaled(copy.deepcopy(looping))
    draft = scaled(copy.deepcopy(looping), noise=0.01 / 8)       # the target, slightly off: ~70% agreement
    return {"looping": looping, "target": target, "draft": draft}


def workload() -> dict:
    loop = [5, 6, 7, 8] * 6 + [5]                                   # something for n-gram lookup to find
    return {"loop": (loop, SamplingParams(max_tokens=24, **GREEDY)),
            "plain": (list(range(40, 60)), SamplingParams(max_tokens=24, num_speculative_tokens=0, **GREEDY)),
            "long": (list(range(100, 180)), SamplingParams(max_tokens=16, **GREEDY)),
            "sampled": ([1, 2, 3] * 4, SamplingParams(temperature=0.8, seed=3, max_tokens=16, ignore_eos=True))}


def run(engine: LLMEngine) -> dict[str, list[int]]:
    for name, (prompt, params) in workload().items():
        engine.add_request(name, prompt, params)
    while engine.has_unfinished():
        engine.step()
    assert engine.num_free_blocks() == engine.block_manager.num_blocks and not engine.block_manager.tables
    return {name: engine.take_output(name).outputs[0].token_ids for name in workload()}


KNOBS = dict(block_size=16, num_kv_blocks=64, max_num_batched_tokens=48)


@pytest.mark.parametrize("method", PROPOSERS)
def test_greedy_tokens_equal_plain_decoding_on_the_device(models, method):
    target, draft = models["looping" if method == "ngram" else "target"], models["draft"]
    plain = run(LLMEngine(target, EngineConfig(**KNOBS)))
    spec = dict(PROPOSERS[method], num_speculative_tokens=4)
    engine = LLMEngine(target, EngineConfig(**KNOBS, speculative_config=spec),
                       draft_model=draft if method == "draft_model" else None)
    out = run(engine)
    assert {n: out[n] for n in ("loop", "plain", "long")} == {n: plain[n] for n in ("loop", "plain", "long")}
    assert len(out["sampled"]) == 16 and all(0 <= t < target.config.vocab_size for t in out["sampled"])
    s = engine.spec_stats
    assert s.num_verify_passes > 0 and s.num_drafts > 0
    assert s.num_tokens == sum(len(v) for v in out.values())
    if method == "ngram":
        assert s.num_accepted > 0
    else:
        assert 0 < s.num_accepted < s.num_drafts      # kept and rejected drafts, on the device
