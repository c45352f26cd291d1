"""The sampler: one row of logits per request in, one token id per request out.

Order of operations for a sampled (temperature > 0) row:

    logits / temperature -> keep top-k -> keep min-p -> keep top-p (nucleus) -> softmax -> draw

Filtering sets the dropped logits to -inf, so the softmax renormalises over what is kept.
Greedy rows (temperature == 0) skip all of it and take the argmax.
"""
from __future__ import annotations

import torch

from .sampling_params import SamplingParams


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Return one row of logits scaled by temperature with the filtered-out tokens at -inf."""
    logits = logits.float() / params.temperature
    if params.top_k and params.top_k < logits.numel():
        kth = torch.topk(logits, params.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.min_p > 0.0:
        probs = torch.softmax(logits, dim=-1)
        logits = logits.masked_fill(probs < params.min_p * probs.max(), float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep a token if the mass *before* it is still below top_p: the most likely token always stays.
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop = mass_before >= params.top_p
        logits = logits.scatter(0, order[drop], float("-inf"))
    return logits


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    """Pick one token per row. `generators[i]` makes row i reproducible (None = global RNG)."""
    assert logits.dim() == 2 and logits.shape[0] == len(params) == len(generators)
    greedy = logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for i, p in enumerate(params):
        if p.greedy:
            out.append(greedy[i])
            continue
        probs = torch.softmax(filter_logits(logits[i], p), dim=-1)
        gen = generators[i]
        if gen is not None and gen.device != probs.device:
            probs = probs.cpu()
        out.append(int(torch.multinomial(probs, 1, generator=gen).item()))
    return out


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A per-request generator on CPU: the same seed gives the same draws on any device."""
    if seed is None:
        return None
    return torch.Generator(device="cpu").manual_seed(seed)
