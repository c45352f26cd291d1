"""The sampler, in two parts: probabilities (how the logits are shaped), then the draw.

0. adjust_logits: what a request asks beyond this step's logits, for every draw of the batch at once
   (flat index lists, one scatter each):

       logit_bias, and -inf on EOS / stop_token_ids before min_tokens      (added to the raw logits)
       repetition_penalty on tokens seen in prompt or output   (a positive logit / r, a negative one x r)
       frequency_penalty x count in the output, presence_penalty x (count > 0)        (subtracted)

   Greedy rows are adjusted too: the argmax is taken after the penalties (vLLM does the same).

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
Adjustments and logprob requests are small lists copied from pinned memory without a wait, and
token_logprobs packs each position's log-probabilities so the runner reads them back with the tokens,
in the step's one sync.

The chapter 10 widget calls sampling_probs itself, so what it shows is what the engine samples from;
speculative decoding's rejection sampler will need the same probabilities.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from ..core.records import TokenLogprobs
from ..sampling_params import SamplingParams


@dataclass(slots=True)
class LogitAdjustments:
    """One step's changes to its draws' raw logits [R, V], as flat lists on the logits' device:

        bias_draw, bias_token, bias_value   [K]   logit_bias entries, -inf for a token banned by min_tokens
        penalized                           [P]   the draws with penalties (indices into R)
        presence, frequency, repetition     [P]   their penalties (float32)
        output_row, output_token            [N]   each generated token of a penalized draw (rows index P; a
                                                  token generated twice is listed twice: frequency counts it)
        prompt_row, prompt_token            [M]   its prompt's tokens (for the repetition penalty)
    """
    bias_draw: torch.Tensor
    bias_token: torch.Tensor
    bias_value: torch.Tensor
    penalized: torch.Tensor
    presence: torch.Tensor
    frequency: torch.Tensor
    repetition: torch.Tensor
    output_row: torch.Tensor
    output_token: torch.Tensor
    prompt_row: torch.Tensor
    prompt_token: torch.Tensor


def to_device(values: list, dtype: torch.dtype, device) -> torch.Tensor:
    """A small host list on the device without making the host wait: on a GPU the copy leaves from pinned
    memory, queued behind the work already launched (PyTorch keeps the pinned block until it has run)."""
    t = torch.tensor(values, dtype=dtype)
    if torch.device(device).type != "cuda":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def logit_adjustments(draws: list[tuple[SamplingParams, list[int], list[int], list[int]]],
                      device) -> LogitAdjustments | None:
    """From each draw's (params, banned token ids, prompt ids, output ids so far); None when no draw asks
    for anything (the sampler then reads the logits as they are)."""
    if not any(p.adjusts_logits for p, _, _, _ in draws):
        return None
    bias_draw, bias_token, bias_value, penalized, pen, out_row, out_tok, prompt_row, prompt_tok = ([] for _ in range(9))
    for d, (p, banned, prompt, output) in enumerate(draws):
        for token, value in [*(p.logit_bias or {}).items(), *((t, float("-inf")) for t in banned)]:
            bias_draw.append(d)
            bias_token.append(token)
            bias_value.append(value)
        if p.presence_penalty or p.frequency_penalty or p.repetition_penalty != 1.0:
            row = len(penalized)
            penalized.append(d)
            pen.append((p.presence_penalty, p.frequency_penalty, p.repetition_penalty))
            out_row += [row] * len(output)
            out_tok += output
            if p.repetition_penalty != 1.0:
                prompt_row += [row] * len(prompt)
                prompt_tok += prompt
    presence, frequency, repetition = (list(x) for x in zip(*pen)) if pen else ([], [], [])
    ints = lambda xs: to_device(xs, torch.long, device)          # noqa: E731
    floats = lambda xs: to_device(xs, torch.float32, device)     # noqa: E731
    return LogitAdjustments(ints(bias_draw), ints(bias_token), floats(bias_value), ints(penalized), floats(presence),
                            floats(frequency), floats(repetition), ints(out_row), ints(out_tok), ints(prompt_row),
                            ints(prompt_tok))


def adjust_logits(logits: torch.Tensor, adj: LogitAdjustments) -> torch.Tensor:
    """logits [R, V] (one row per draw, float32, changed in place and returned) with biases, bans and
    penalties applied. Every size tested here is known on the host: nothing waits for the device."""
    if adj.bias_draw.numel():
        logits.index_put_((adj.bias_draw, adj.bias_token), adj.bias_value, accumulate=True)
    if adj.penalized.numel():
        rows = logits[adj.penalized]
        counts = torch.zeros_like(rows)
        counts.index_put_((adj.output_row, adj.output_token), torch.ones_like(adj.output_token, dtype=rows.dtype),
                          accumulate=True)
        seen = counts > 0
        seen[adj.prompt_row, adj.prompt_token] = True
        r = adj.repetition[:, None]
        rows = torch.where(seen, torch.where(rows > 0, rows / r, rows * r), rows)
        rows = rows - adj.frequency[:, None] * counts - adj.presence[:, None] * (counts > 0)
        logits[adj.penalized] = rows
    return logits


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, k: int) -> torch.Tensor:
    """Log-probabilities at N positions under the raw logits [N, V], packed in one float64 tensor
    [N, 2 + 2k] to be read back with the step's tokens: the token's log-probability, its rank (1 = most
    likely), the top k ids, the top k log-probabilities (float64 holds every id exactly)."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    chosen = lp.gather(1, tokens[:, None])
    rank = (lp > chosen).sum(dim=-1, keepdim=True) + 1
    top, top_ids = lp.topk(k, dim=-1)
    return torch.cat([chosen.double(), rank.double(), top_ids.double(), top.double()], dim=1)


def unpack_logprobs(row: list[float], token_id: int, k: int, width: int) -> TokenLogprobs:
    """One packed row of token_logprobs(..., width) read back on the host, keeping the top k <= width."""
    return TokenLogprobs(token_id, row[0], int(row[1]), [int(t) for t in row[2:2 + k]], row[2 + width:2 + width + k])


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
        adjust                      biases, bans and penalties per draw (None: the logits as they are)
    """
    rows: torch.Tensor
    sampled: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor
    u: torch.Tensor
    adjust: LogitAdjustments | None = None


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
    if batch.adjust is None:
        tokens = logits.argmax(dim=-1)[batch.rows]
        per_draw = None
    else:                                      # one row per draw: each has its own biases and history
        per_draw = adjust_logits(logits[batch.rows].float(), batch.adjust)
        tokens = per_draw.argmax(dim=-1)
    p = torch.ones(tokens.shape, dtype=torch.float32, device=logits.device)
    if batch.sampled.numel():                  # a shape, known on the host: no sync
        rows = logits[batch.rows[batch.sampled]].float() if per_draw is None else per_draw[batch.sampled]
        filtered = filter_logits_batch(rows, batch.temperature, batch.top_k, batch.top_p, batch.min_p)
        probs = torch.softmax(filtered, dim=-1)
        picked = draw_from(probs, batch.u)
        tokens[batch.sampled] = picked
        p[batch.sampled] = probs.gather(1, picked[:, None])[:, 0]
    return tokens, p


def sampling_batch(params: list[SamplingParams], generators: list[torch.Generator | None],
                   device, rows: list[int] | None = None, adjust: LogitAdjustments | None = None) -> SamplingBatch:
    """The SamplingBatch of a list of draws (row i by default), for callers without a step buffer."""
    sampled = [i for i, p in enumerate(params) if not p.greedy]
    t, k, top_p, min_p = _param_tensors([params[i] for i in sampled], device)
    u = torch.tensor(uniform_draws([generators[i] for i in sampled]), dtype=torch.float64, device=device)
    rows = list(range(len(params))) if rows is None else rows
    return SamplingBatch(torch.tensor(rows, dtype=torch.long, device=device),
                         torch.tensor(sampled, dtype=torch.long, device=device), t, k, top_p, min_p, u, adjust)


def draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> list[int]:
    """One token per row of `probs` [R, V] by inverse transform. `generators[i]` makes row i
    reproducible (None = the global RNG); each row costs its generator exactly one draw."""
    u = torch.tensor(uniform_draws(generators), dtype=torch.float64, device=probs.device)
    return draw_from(probs, u).tolist()


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    adjust: LogitAdjustments | None = None,
) -> list[int]:
    """Pick one token per row: the argmax for greedy rows, a draw from sampling_probs for the others
    (after `adjust`: see logit_adjustments)."""
    return sample_with_probs(logits, params, generators, adjust)[0]


def sample_with_probs(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None],
                      adjust: LogitAdjustments | None = None) -> tuple[list[int], list[float]]:
    """sample(), and the probability each picked token had under its row's distribution (1.0 when greedy)."""
    assert logits.dim() == 2 and logits.shape[0] == len(params) == len(generators)
    tokens, p = sample_tokens(logits, sampling_batch(params, generators, logits.device, adjust=adjust))
    return tokens.tolist(), p.tolist()


def make_generator(seed: int | None, device: torch.device | None = None) -> torch.Generator | None:
    """A per-request generator on CPU: the same seed gives the same draws on any device."""
    if seed is None:
        return None
    return torch.Generator(device="cpu").manual_seed(seed)


def request_seed(engine_seed: int, arrival: int) -> int:
    """The seed the engine names for a request that brought none: its arrival number under the engine's
    seed (EngineConfig.seed, vLLM's LLM(seed=...)), so a script's run draws the same numbers every time."""
    digest = hashlib.blake2b(f"{engine_seed}/request/{arrival}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


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
