"""Our Llama forward pass against Hugging Face transformers' LlamaForCausalLM, same GGUF, float32."""
from __future__ import annotations

import pytest
import torch

from engine.model.llama import ContiguousKV
from engine.unpaged import unpaged_generate
from engine.loader.weights import default_gguf_path

# Two float32 forward passes of 30 layers that sum in different orders (other kernels, other matrix shapes)
# drift apart by far more than one rounding: each layer adds a few eps of the activations' scale, and the
# residual stream grows. 1e-4 of the largest logit is ~800 eps, a bound that still catches any real error
# (a wrong weight or a misplaced rotation moves logits by whole units).
DRIFT = 1e-4

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "In 1969, Neil Armstrong became the first person to",
    "日本の首都は東京です。Tokyo is",
]


@pytest.fixture(scope="module")
def hf_model(llm):
    from transformers import LlamaForCausalLM
    path = default_gguf_path()
    model = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_logits_match_transformers(llm, hf_model, prompt):
    ids = llm.tokenizer.encode(prompt).ids
    with torch.inference_mode():
        ours = llm.model.compute_logits(llm.model(torch.tensor(ids), torch.arange(len(ids)), ContiguousKV(30)))
        theirs = hf_model(torch.tensor([ids])).logits[0].float()
    assert ours.shape == theirs.shape == (len(ids), 49152)
    assert (ours - theirs).abs().max().item() <= DRIFT * theirs.abs().max().item()


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_greedy_continuation_matches_transformers(llm, hf_model, prompt):
    """Each token we pick greedily is transformers' argmax after the same prefix (one pass of theirs over
    prompt + our continuation). Where their best two logits lie within the drift of each other, either
    pick is right: those positions are not compared, and they must be rare."""
    ids = llm.tokenizer.encode(prompt).ids
    ours = unpaged_generate(llm.model, ids, max_tokens=32)       # no EOS stop: all 32 tokens compared
    with torch.inference_mode():
        logits = hf_model(torch.tensor([ids + ours[:-1]])).logits[0, len(ids) - 1:].float()
    top2 = logits.topk(2, dim=-1)
    clear = (top2.values[:, 0] - top2.values[:, 1]) > 2 * DRIFT * logits.abs().max()
    assert int(clear.sum()) >= 28, f"only {int(clear.sum())} of 32 positions had a clear argmax"
    assert [t for t, c in zip(ours, clear.tolist()) if c] == top2.indices[clear, 0].tolist()


def test_incremental_decode_matches_full_recompute(llm):
    """Feeding one token at a time through the KV cache gives the logits of a fresh full pass."""
    ids = llm.tokenizer.encode("Paged attention stores keys and values in blocks").ids
    with torch.inference_mode():
        full = llm.model.compute_logits(llm.model(torch.tensor(ids), torch.arange(len(ids)), ContiguousKV(30)))
        kv = ContiguousKV(30)
        llm.model(torch.tensor(ids[:-3]), torch.arange(len(ids) - 3), kv)
        steps = [llm.model.compute_logits(llm.model(torch.tensor([t]), torch.tensor([p]), kv))
                 for p, t in zip(range(len(ids) - 3, len(ids)), ids[-3:])]
    assert torch.allclose(torch.cat(steps), full[-3:], rtol=0, atol=DRIFT * full.abs().max().item())
