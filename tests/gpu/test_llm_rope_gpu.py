"""`LLM.rope` on a GPU model (bf16, random weights of SmolLM2's shapes): it is the rotation attention
applies there too, and it takes CPU tensors (what `inspect` returns) as well as CUDA ones."""
from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def random_llm():
    """SmolLM2's shapes with random values (mechanics only; the real model is the `llm` fixture)."""
    from engine import LLM
    random_llm = LLM(random_weights=True, device="cuda")
    yield random_llm
    random_llm.close()


def test_llm_rope_is_attentions_rotation_on_the_gpu(random_llm):
    ins = random_llm.inspect("the quick brown fox jumps over the lazy dog")     # tensors come back on the CPU
    T, layer = len(ins.token_ids), 3
    block = random_llm.model.layers[layer]
    with torch.inference_mode():
        h = ins.hidden_states[layer].to("cuda", random_llm.dtype)
        raw = block.attention.wq(block.attention_norm(h)).view(T, random_llm.config.num_heads, -1)
    on_gpu = random_llm.rope(raw, torch.arange(T, device="cuda"))
    assert on_gpu.device.type == "cuda"
    # bf16 on both sides: compare as the model rounds (a few units in the last place of bf16).
    torch.testing.assert_close(on_gpu.float().cpu(), ins.q[layer], atol=2e-2, rtol=2e-2)
    cpu = random_llm.rope(raw.float().cpu(), torch.arange(T))                  # CPU input, CPU output
    assert cpu.device.type == "cpu"
    torch.testing.assert_close(cpu, on_gpu.float().cpu(), atol=2e-2, rtol=2e-2)
