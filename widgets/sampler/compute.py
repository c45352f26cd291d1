"""The numbers behind the sampler widget (chapter 10): the model's next-token distribution for a
prompt, shaped by the engine's own sampler, seeded draws from it, and continuations.

    logits (inspect, last row) ─► engine.sampling_probs(logits, SamplingParams)   the engine's own:
                                     / temperature → top-k → min-p → top-p → softmax
                               ─► draw N: N uniform numbers from one seeded generator, each token
                                  where its number falls in the running total (the engine's draw)

The first draw with seed s is the first token the engine writes for SamplingParams(seed=s): the
same generator, the same first number, the same distribution. The prompt's pass is kept per server
(`widgets.common.cache.inspection`), shared with the other widgets that read the reader's sentence.
No Panel here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from engine import SamplingParams, sampling_probs   # the probability half of the engine's sampler
from widgets.common.cache import MAX_TOKENS as SHARED_TOKENS
from widgets.common.cache import inspection

TOP = 20                    # candidates shown one by one; the rest are summed into one bar
CONTINUE_TOKENS = 24        # tokens each continuation writes


def next_token_logits(llm, prompt: str, max_tokens: int) -> tuple[list[int], torch.Tensor]:
    """The prompt's token ids and the model's logits for the token after them, [V]. A prompt that fits
    the other widgets' token limit is inspected under it, so the reader's sentence is one pass for all
    of them (the pass is the same under any limit it fits)."""
    fits = len(llm.tokenizer.encode(prompt).ids) <= SHARED_TOKENS
    ins = inspection(llm, prompt, SHARED_TOKENS if fits else max_tokens)[0]
    return ins.token_ids, ins.logits[-1]


def cut_by(logits: torch.Tensor, params: SamplingParams, ids: list[int]) -> list[str]:
    """For each token in ``ids``: "" if the full settings keep it, else why it cannot be drawn.

    Asked of the engine's function one filter at a time: top-k and min-p both test a token against
    the unfiltered row, so whichever drops it alone drops it; what they keep, top-p may then drop.
    "≈0" is a token no filter drops whose probability rounds to zero (a very low temperature)."""
    if params.greedy:
        top = int(logits.argmax())
        return ["" if i == top else "greedy" for i in ids]
    one = lambda **kw: sampling_probs(logits, SamplingParams(temperature=params.temperature, **kw))  # noqa: E731
    checks = [("≈0", one()), ("top-k", one(top_k=params.top_k)), ("min-p", one(min_p=params.min_p))]
    full = sampling_probs(logits, params)
    return ["" if full[i] > 0 else next((name for name, p in checks if p[i] == 0), "top-p") for i in ids]


def draw(probs: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """n token ids drawn from ``probs`` [V] with seed ``seed``: the engine's inverse-transform draw,
    n times from one generator (torch.rand(n) gives the same numbers as n calls of torch.rand(1))."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.rand(n, generator=gen).to(torch.float64)
    cdf = torch.cumsum(probs.double(), dim=-1)
    cdf = cdf / cdf[-1]
    return torch.searchsorted(cdf, u, right=True).clamp(max=probs.shape[-1] - 1)


@dataclass(slots=True)
class Shaped:
    ids: list[int]              # the TOP most likely tokens at temperature 1, most likely first
    texts: list[str]
    logits: list[float]
    p_model: list[float]        # softmax of the raw logits (temperature 1, no filter)
    p_shaped: list[float]       # what the engine samples from with these settings
    cut: list[str]              # "" or the filter that dropped the token
    counts: list[int]           # how many of the n draws landed on each
    rest_model: float           # the other 49,132 tokens together
    rest_shaped: float
    rest_count: int
    survivors: int              # tokens with a nonzero shaped probability
    first_draw: int             # token id of draw #1 (= the engine's first sampled token, same seed)
    n: int
    seed: int
    vocab: int


def shape(llm, logits: torch.Tensor, params: SamplingParams, n: int, seed: int) -> Shaped:
    p_model = torch.softmax(logits.float(), dim=-1)
    top = torch.topk(logits, TOP).indices
    ids = top.tolist()
    probs = sampling_probs(logits, params)
    drawn = draw(probs, n, seed)
    counts = torch.bincount(drawn, minlength=logits.shape[-1])
    outside = torch.ones_like(probs, dtype=torch.bool)
    outside[top] = False                   # summed over the rest (exactly 0 when all of it is cut)
    return Shaped(
        ids=ids, texts=[llm.tokenizer.decode([i]) for i in ids], logits=logits[top].tolist(),
        p_model=p_model[top].tolist(), p_shaped=probs[top].tolist(), cut=cut_by(logits, params, ids),
        counts=counts[top].tolist(), rest_model=float(p_model[outside].sum()),
        rest_shaped=float(probs[outside].sum()), rest_count=int(counts[outside].sum()),
        survivors=int((probs > 0).sum()), first_draw=int(drawn[0]), n=n, seed=seed,
        vocab=logits.shape[-1])


def shaped_dict(s: Shaped) -> dict:
    """A Shaped as JSON-able data (what the page paints, and what the saved example stores)."""
    return {f: getattr(s, f) for f in Shaped.__slots__}


def continuations(llm, prompt: str, params: SamplingParams, max_tokens: int) -> dict[str, list[int]]:
    """Greedy and sampled continuations of ``prompt`` from the shared engine (token ids)."""
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    sampled = SamplingParams(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                             min_p=params.min_p, seed=params.seed, max_tokens=max_tokens)
    out = {}
    for name, p in (("greedy", greedy), ("sampled", sampled)):
        out[name] = llm.generate(prompt, p)[0].outputs[0].token_ids
    return out


def written(llm, prompt: str, params: SamplingParams, max_tokens: int) -> dict[str, list[list]]:
    """Both continuations as [token id, its text] pairs (what the page shows, and the saved example)."""
    out = continuations(llm, prompt, params, max_tokens)
    return {k: [[i, llm.tokenizer.decode([i])] for i in v] for k, v in out.items()}
