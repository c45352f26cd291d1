"""LLM.sandbox on a GPU (skipped without CUDA): a private engine on the shared bf16 weights, its own
small KV pool in GPU memory, the same greedy tokens as the shared engine, and the K/V of each token in
the slot its block table names (what the chapter-12 stepper reads)."""
from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def random_llm():
    """SmolLM2's shapes with random values (mechanics only; the real model is the `llm` fixture)."""
    random_llm = LLM(random_weights=True, device="cuda", max_num_seqs=8, enforce_eager=True)   # sandboxes run eagerly
    yield random_llm
    random_llm.close()


def test_sandbox_on_gpu_shares_weights_and_matches_the_shared_engine(random_llm):
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    ids = list(range(3, 40))
    box = random_llm.sandbox(num_kv_blocks=8, max_num_seqs=1, enable_prefix_caching=False)
    assert box.model.embed.weight.data_ptr() == random_llm.model.embed.weight.data_ptr()
    assert box.kv_cache.layer(0)[0].is_cuda and box.kv_cache.layer(0)[0].dtype == torch.bfloat16
    box.add_request("mine", ids, params)
    tokens = []
    while box.has_unfinished():
        tokens += [e.token_id for e in box.step()]
    assert tokens == [e.token_id for e in random_llm.stream({"prompt_token_ids": ids}, params)]
    assert box.num_free_blocks() == 8


def test_each_tokens_kv_sits_where_the_block_table_says(random_llm):
    box = random_llm.sandbox(num_kv_blocks=8, max_num_seqs=1, block_size=16, enable_prefix_caching=False)
    ids = list(range(5, 40))                                     # 35 tokens: three blocks
    box.add_request("r", ids, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    box.step()
    table, bs = box.allocator_state().tables["r"], box.allocator_state().block_size
    k_cache, _ = box.kv_cache.layer(3)
    written = [k_cache[table[p // bs], p % bs] for p in range(len(ids))]
    assert all(w.abs().sum() > 0 for w in written)               # every slot the table names was written
    unused = k_cache[table[-1], len(ids) % bs:]
    assert unused.abs().sum() == 0                                # and nothing past the last token
    per_token = 2 * random_llm.config.num_layers * k_cache.shape[-2] * k_cache.shape[-1] * k_cache.element_size()
    assert per_token == random_llm.config.kv_bytes_per_token(2)         # bf16: what chapter 12's table counts
