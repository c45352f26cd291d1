"""The unpaged generate loop: one sequence, a contiguous KV cache, no paging, no batching.

It is the simplest correct way to run the model, and the oracle the paged engine is tested
against (same prompt + greedy sampling => exactly the same tokens; the same seed => the same draws,
with the same penalties, biases and stop tokens).
"""
from __future__ import annotations

from collections.abc import Iterator

import torch

from .model.llama import ContiguousKV, Llama
from .model.sampler import logit_adjustments, sample
from .sampling_params import SamplingParams


@torch.inference_mode()
def unpaged_stream(model: Llama, prompt_ids: list[int], params: SamplingParams,
                     generator: torch.Generator | None = None,
                     eos_token_ids: tuple[int, ...] = ()) -> Iterator[int]:
    """Yield generated token ids one at a time: one prefill pass over the prompt, then one
    decode pass per token, each feeding only the newest token (the cache holds the rest)."""
    if not prompt_ids:
        raise ValueError("the prompt must contain at least one token")
    device = model.embed.weight.device
    kv = ContiguousKV(model.config.num_layers)
    ids = torch.tensor(prompt_ids, device=device)
    positions = torch.arange(len(prompt_ids), device=device)
    ends = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos_token_ids))
    output: list[int] = []
    for _ in range(params.max_tokens or model.config.max_position_embeddings - len(prompt_ids)):
        hidden = model(ids, positions, kv)
        logits = model.compute_logits(hidden[-1:])          # only the last position predicts the next token
        banned = sorted(ends) if len(output) < params.min_tokens else []
        adjust = logit_adjustments([(params, banned, prompt_ids, output)], device)
        token = sample(logits, [params], [generator], adjust)[0]
        output.append(token)
        yield token
        if token in ends and len(output) >= params.min_tokens:
            return
        positions = torch.tensor([len(kv)], device=device)
        ids = torch.tensor([token], device=device)


def unpaged_generate(model: Llama, prompt_ids: list[int], max_tokens: int,
                       eos_token_id: int | None = None) -> list[int]:
    """Greedy continuation of `prompt_ids`, stopping after `eos_token_id` or `max_tokens` tokens."""
    eos = () if eos_token_id is None else (eos_token_id,)
    return list(unpaged_stream(model, prompt_ids, SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                 eos_token_ids=eos))
