"""Our Llama forward pass against Hugging Face transformers' LlamaForCausalLM, same GGUF, float32."""
from __future__ import annotations

import pytest
import torch

from engine.model.llama import ContiguousKV
from engine.unpaged import unpaged_generate
from engine.loader.weights import default_gguf_path

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
    assert (ours - theirs).abs().max().item() <= 1e-3


@pytest.mark.parametrize("prompt", PROMPTS[:3])
def test_greedy_continuation_matches_transformers(llm, hf_model, prompt):
    ids = llm.tokenizer.encode(prompt).ids
    ours = unpaged_generate(llm.model, ids, max_tokens=32)       # no EOS stop: all 32 tokens compared
    theirs = list(ids)
    with torch.inference_mode():  # a plain argmax loop: no generation-config rules (EOS, min length) in the way
        for _ in range(32):
            theirs.append(int(hf_model(torch.tensor([theirs])).logits[0, -1].argmax()))
    assert ours == theirs[len(ids):]


def test_incremental_decode_matches_full_recompute(llm):
    """Feeding one token at a time through the KV cache gives the logits of a fresh full pass."""
    ids = llm.tokenizer.encode("Paged attention stores keys and values in blocks").ids
    with torch.inference_mode():
        full = llm.model.compute_logits(llm.model(torch.tensor(ids), torch.arange(len(ids)), ContiguousKV(30)))
        kv = ContiguousKV(30)
        llm.model(torch.tensor(ids[:-3]), torch.arange(len(ids) - 3), kv)
        steps = [llm.model.compute_logits(llm.model(torch.tensor([t]), torch.tensor([p]), kv))
                 for p, t in zip(range(len(ids) - 3, len(ids)), ids[-3:])]
    assert torch.allclose(torch.cat(steps), full[-3:], atol=1e-4)
