"""The sampler: one row of logits per sequence in, one token id per row out, the whole batch at once.

Order of operations for a sampled (temperature > 0) row:

    logits / temperature -> keep top-k -> keep min-p -> keep top-p (nucleus) -> softmax -> draw

Filtering sets the dropped logits to -inf, so the softmax renormalises over what is kept. All three
filters work on the row sorted from most to least likely, so one sort serves them all:

    sorted probs   .50  .20  .15  .10  .05
    top-k = 3       ✓    ✓    ✓    ✗    ✗        rank < k
    min-p = 0.25    ✓    ✓    ✓    ✗    ✗        p >= min_p * p_max (.125)
    top-p = 0.8     ✓    ✓    ✓    ✗    ✗        mass *before* the token < top_p (the first always stays)

The draw is inverse-transform sampling: one uniform number u per row (from that sequence's own
generator when it has a seed), and the token is where u falls in the row's cumulative probabilities.
Greedy rows (temperature == 0) skip all of it and take the argmax.
"""
from __future__ import annotations

import torch

from .sampling_params import SamplingParams


def filter_logits_batch(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                        top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """logits [B, V]; per-row temperature (> 0), top_k (0 = off), top_p (1 = off), min_p (0 = off)."""
    logits = logits.float() / temperature[:, None]
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    vocab = logits.shape[-1]
    rank = torch.arange(vocab, device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab))
    drop = rank >= k[:, None]
    # min-p compares each probability with the largest; the ratio does not change when the row is
    # renormalised, so it can be tested on the unfiltered softmax.
    probs = torch.softmax(sorted_logits, dim=-1)
    drop |= probs < (min_p[:, None] * probs[:, :1])
    # top-p on what survived: renormalise, then drop a token once the mass before it reaches top_p.
    kept = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = torch.cumsum(kept, dim=-1) - kept
    drop |= mass_before >= top_p[:, None]
    drop[:, 0] = False                         # the most likely token always survives
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


def filter_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """One row [V] scaled by temperature with the filtered-out tokens at -inf (for widgets)."""
    t, k, p, m = _param_tensors([params], logits.device)
    return filter_logits_batch(logits[None], t, k, p, m)[0]


def _param_tensors(params: list[SamplingParams], device) -> tuple[torch.Tensor, ...]:
    temperature = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=device)
    top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=device)
    top_p = torch.tensor([p.top_p for p in params], device=device)
    min_p = torch.tensor([p.min_p for p in params], device=device)
    return temperature, top_k, top_p, min_p


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    """Pick one token per row. `generators[i]` makes row i reproducible (None = global RNG)."""
    assert logits.dim() == 2 and logits.shape[0] == len(params) == len(generators)
    out = logits.argmax(dim=-1).tolist()
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if not rows:
        return out
    sub = logits[rows].float()
    probs = torch.softmax(filter_logits_batch(sub, *_param_tensors([params[i] for i in rows], sub.device)), dim=-1)
    # One uniform draw per row, from that row's own generator: the same seed gives the same token
    # whatever else shares the batch. Generators live on the CPU, so draws match across devices.
    u = torch.cat([torch.rand(1, generator=generators[i]) for i in rows]).to(probs.device, torch.float64)
    cdf = torch.cumsum(probs.double(), dim=-1)
    cdf = cdf / cdf[:, -1:]                    # guard against round-off: the last entry is exactly 1
    picked = torch.searchsorted(cdf, u[:, None], right=True).squeeze(1)
    # searchsorted never lands on a zero-probability token except past the end; clamp for safety.
    picked = picked.clamp(max=logits.shape[-1] - 1)
    for i, token in zip(rows, picked.tolist()):
        out[i] = token
    return out


def make_generator(seed: int | None, device: torch.device | None = None) -> torch.Generator | None:
    """A per-request generator on CPU: the same seed gives the same draws on any device."""
    if seed is None:
        return None
    return torch.Generator(device="cpu").manual_seed(seed)
