"""The sampler, in two parts: probabilities (how the logits are shaped), then the draw.

1. sampling_probs: for a sampled (temperature > 0) row,

       logits / temperature -> keep top-k -> keep min-p -> keep top-p (nucleus) -> softmax

   Filtering sets the dropped logits to -inf, so the softmax renormalises over what is kept. All
   three filters work on the row sorted from most to least likely, so one sort serves them all:

       sorted probs   .50  .20  .15  .10  .05
       top-k = 3       ✓    ✓    ✓    ✗    ✗        rank < k
       min-p = 0.25    ✓    ✓    ✓    ✗    ✗        p >= min_p * p_max (.125)
       top-p = 0.8     ✓    ✓    ✓    ✗    ✗        mass *before* the token < top_p (the first always stays)

   A greedy row (temperature == 0) is the limit of a vanishing temperature: all mass on the argmax.

2. draw: inverse-transform sampling: one uniform number u per row (from that sequence's own
   generator when it has a seed), and the token is where u falls in the row's cumulative
   probabilities. Greedy rows take the argmax and draw nothing.

The engine samples on the device without waiting for it (sample_tokens over a SamplingBatch): only
the u numbers come from the host, so a seed gives the same tokens whatever the device or batch.

The chapter 10 widget calls sampling_probs itself, so what it shows is what the engine samples from;
speculative decoding's rejection sampler will need the same probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling_params import SamplingParams


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
    # top_p = 1 means off: a float32 running total can reach 1.0 before the last token, which would
    # otherwise drop thousands of tail tokens that top-p 1 promises to keep.
    drop |= (mass_before >= top_p[:, None]) & (top_p[:, None] < 1.0)
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


def sampling_probs(logits: torch.Tensor, params: SamplingParams | list[SamplingParams]) -> torch.Tensor:
    """The distribution each row is sampled from (float32), shaped as the engine shapes it.

    logits [V] with one SamplingParams, or [B, V] with one per row (or one for all rows)."""
    if logits.dim() == 1:
        return sampling_probs(logits[None], params)[0]
    params = [params] * logits.shape[0] if isinstance(params, SamplingParams) else params
    assert logits.dim() == 2 and logits.shape[0] == len(params)
    probs = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        rows = torch.tensor(greedy, device=logits.device)
        probs[rows, logits[rows].argmax(dim=-1)] = 1.0
    rows = [i for i, p in enumerate(params) if not p.greedy]
    if rows:
        sub = logits[rows].float()
        filtered = filter_logits_batch(sub, *_param_tensors([params[i] for i in rows], sub.device))
        probs[rows] = torch.softmax(filtered, dim=-1)
    return probs


@dataclass(slots=True)
class SamplingBatch:
    """One step's draws as tensors on the logits' device, so the sampler runs without a host sync.

    R draws; a draw reads one logits row (a forked request's row is drawn once per sample). Rs of
    them are random (temperature > 0); the others take their row's argmax.

        rows          [R]  int64    logits row of each draw
        sampled       [Rs] int64    which draws are random (indices into R)
        temperature, top_k, top_p, min_p   [Rs]   each random draw's filters (see filter_logits_batch)
        u             [Rs] float64  its uniform number: from the request's own generator when seeded,
                                    drawn on the host, so a seed gives the same tokens on any device
    """
    rows: torch.Tensor
    sampled: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    u: torch.Tensor


def uniform_draws(generators: list[torch.Generator | None]) -> list[float]:
    """One number per random draw, each from its own generator (None = the global RNG), on the host."""
    return [torch.rand(1, generator=g).item() for g in generators]


def draw_from(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse transform: row i's token is where u[i] falls in its cumulative probabilities. [R] int64."""
    cdf = torch.cumsum(probs.double(), dim=-1)
    cdf = cdf / cdf[:, -1:]                    # guard against round-off: the last entry is exactly 1
    picked = torch.searchsorted(cdf, u.double()[:, None], right=True).squeeze(1)
    # searchsorted never lands on a zero-probability token except past the end; clamp for safety.
    return picked.clamp(max=probs.shape[-1] - 1)


def sample_tokens(logits: torch.Tensor, batch: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(token [R] int64, its probability [R] float32) for every draw, computed where the logits are.

    Only tensors in, tensors out: nothing waits for the device until the caller reads the tokens."""
    tokens = logits.argmax(dim=-1)[batch.rows]
    p = torch.ones(tokens.shape, dtype=torch.float32, device=logits.device)
    if batch.sampled.numel():                  # a shape, known on the host: no sync
        rows = batch.rows[batch.sampled]
        filtered = filter_logits_batch(logits[rows].float(), batch.temperature, batch.top_k, batch.top_p, batch.min_p)
        probs = torch.softmax(filtered, dim=-1)
        picked = draw_from(probs, batch.u)
        tokens[batch.sampled] = picked
        p[batch.sampled] = probs.gather(1, picked[:, None])[:, 0]
    return tokens, p


def sampling_batch(params: list[SamplingParams], generators: list[torch.Generator | None],
                   device, rows: list[int] | None = None) -> SamplingBatch:
    """The SamplingBatch of a list of draws (row i by default), for callers without a step buffer."""
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    t, k, top_p, min_p = _param_tensors([params[i] for i in sampled], device)
    u = torch.tensor(uniform_draws([generators[i] for i in sampled]), dtype=torch.float64, device=device)
    rows = list(range(len(params))) if rows is None else rows
    return SamplingBatch(torch.tensor(rows, dtype=torch.long, device=device),
                         torch.tensor(sampled, dtype=torch.long, device=device), t, k, top_p, min_p, u)


def draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of `probs` [R, V] by inverse transform. `generators[i]` makes row i
    reproducible (None = the global RNG); each row costs its generator exactly one draw."""
    u = torch.tensor(uniform_draws(generators), dtype=torch.float64, device=probs.device)
    return draw_from(probs, u).tolist()


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
) -> list[int]:
    """Pick one token per row: the argmax for greedy rows, a draw from sampling_probs for the others."""
    return sample_with_probs(logits, params, generators)[0]


def sample_with_probs(logits: torch.Tensor, params: list[SamplingParams],
                      generators: list[torch.Generator | None]) -> tuple[list[int], list[float]]:
    """sample(), and the probability each picked token had under its row's distribution (1.0 when greedy)."""
    assert logits.dim() == 2 and logits.shape[0] == len(params) == len(generators)
    tokens, p = sample_tokens(logits, sampling_batch(params, generators, logits.device))
    return tokens.tolist(), p.tolist()


def make_generator(seed: int | None, device: torch.device | None = None) -> torch.Generator | None:
    """A per-request generator on CPU: the same seed gives the same draws on any device."""
    if seed is None:
        return None
    return torch.Generator(device="cpu").manual_seed(seed)


class SeededGenerators:
    """Each seeded sequence's generator, kept from step to step by whoever samples (the runner).

    A sequence's k-th token is drawn with the k-th number of its generator, whatever else shares
    the batch. The caller says how many draws came before (the tokens generated so far); when that
    does not match the kept generator (another process sampled before, or draft tokens rolled
    back), the generator is rebuilt from its seed and replayed, so the result is the same either way.
    """

    def __init__(self):
        self._kept: dict[int, tuple[torch.Generator, int]] = {}   # seq_id -> (generator, draws made)

    def get(self, seq_id: int, seed: int, num_draws_before: int) -> torch.Generator:
        """The generator for the sequence's next draw (counted as made)."""
        gen, made = self._kept.get(seq_id, (None, -1))
        if made != num_draws_before:
            gen = make_generator(seed)
            for _ in range(num_draws_before):     # replay, one number per earlier token, as drawn then
                torch.rand(1, generator=gen)
        self._kept[seq_id] = (gen, num_draws_before + 1)
        return gen

    def forget(self, seq_id: int) -> None:
        self._kept.pop(seq_id, None)
