"""Verification: which drafted tokens the target keeps, so that the output is exactly the target's.

One verify row gives the target's distribution at k + 1 positions (rows of `p`): position j judges
draft j, and the last one is for the token after the final draft.

    greedy      keep draft j while it equals the target's argmax at j; the first mismatch is replaced
                by that argmax (the token plain decoding would have produced), or, if every draft
                matches, the argmax after the last one is a bonus.

    sampled     (Leviathan et al. 2023; Chen et al. 2023) keep draft x = d_j with probability
                min(1, p_j(x) / q_j(x)); at the first rejection draw the replacement from
                normalize(max(0, p_j - q_j)), the mass the draft under-proposed; if all k are kept,
                draw a bonus token from p_k. Each emitted token is then distributed exactly as p:

                    P(emit x) = q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) * residual(x)
                              = min(q(x), p(x))        + max(0, p(x) - q(x))                = p(x)

    A point-mass draft (n-gram lookup: q = 1 on d_j) is the same rule with q one-hot: keep d_j with
    probability p_j(d_j), otherwise draw from p_j with d_j removed.

Rows are verified together, padded to the longest draft K. Randomness: k + 1 uniforms per row from
that row's own generator, u_0..u_{k-1} for the acceptance tests and u_k for the one final draw
(correction or bonus), so a seeded row is reproducible whatever else shares the batch.
"""
from __future__ import annotations

import hashlib

import torch


def step_generator(seed: int | None, sample_index: int, num_output_tokens: int) -> torch.Generator | None:
    """A seeded request's generator for one verify step, named by (seed, sample, tokens so far).

    Plain decoding draws one number per token from a generator kept across steps; a verify step draws
    a varying amount (drafts, tests, the final draw), and rejected drafts roll back. Naming each
    step's generator by where the sequence stands keeps a seeded request reproducible however many
    numbers the steps before it consumed. Reproducible for the same workload, that is: how many drafts
    a step may verify depends on the batch (the token budget, free blocks), and a token drawn as a
    bonus is a different draw from the same token judged as a draft. The distribution never changes."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}/{sample_index}/{num_output_tokens}".encode(), digest_size=8).digest()
    return torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") >> 1)


def pick(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-transform sampling, row by row: where u [R] falls in the cumulative probs [R, V]
    (rows need not sum to 1)."""
    cdf = torch.cumsum(probs.double(), dim=-1)
    index = torch.searchsorted(cdf, (u.double().to(cdf.device) * cdf[:, -1])[:, None], right=True)
    return index.squeeze(1).clamp_(max=probs.shape[-1] - 1)


def verify_greedy(target_logits: torch.Tensor, draft_token_ids: list[int]) -> tuple[list[int], int]:
    """target_logits [k + 1, V]: the kept drafts plus the target's own next token, and how many were kept."""
    target = target_logits.argmax(dim=-1).tolist()
    accepted = 0
    while accepted < len(draft_token_ids) and draft_token_ids[accepted] == target[accepted]:
        accepted += 1
    return draft_token_ids[:accepted] + [target[accepted]], accepted


def greedy_accept(target: torch.Tensor, drafts: torch.Tensor, num_drafts: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """verify_greedy for R rows at once, on whichever device holds them (no host read).

        target      [R, K + 1]  the target's argmax at each position
        drafts      [R, K]      draft ids, padded with anything (-1)
        num_drafts  [R]         k_r <= K: only the first k_r drafts are judged

    Returns (num_accepted [R], final token [R]): the run of drafts equal to the target's choice, and
    the target's choice right after that run (the correction, or the bonus when all k_r matched)."""
    K = drafts.shape[1]
    judged = torch.arange(K, device=drafts.device)[None, :] < num_drafts[:, None]
    kept = (drafts == target[:, :K]) & judged
    num_accepted = kept.long().cumprod(dim=1).sum(dim=1)
    return num_accepted, target.gather(1, num_accepted[:, None]).squeeze(1)


def rejection_sample(p: torch.Tensor, drafts: torch.Tensor, num_drafts: torch.Tensor, q: torch.Tensor | None,
                     u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of R verify rows, padded to K drafts.

        p           [R, K + 1, V]  the target's sampling distributions (row r uses positions 0..num_drafts[r])
        drafts      [R, K]         draft token ids (padding: any id)
        num_drafts  [R]            k_r <= K
        q           [R, K, V]      the draft's distributions, or None for point masses on the drafts
        u           [R, K + 1]     uniforms: u[:, j] tests draft j, u[:, K] makes the one final draw

    Returns (num_accepted [R], final token [R]): row r emits drafts[r, :num_accepted[r]] + [final[r]].
    """
    R, K = drafts.shape
    u = u.to(p.device, torch.float64)
    p_d = p[:, :K].gather(2, drafts[..., None]).squeeze(-1).double()              # p_j(d_j)  [R, K]
    q_d = torch.ones_like(p_d) if q is None else q.gather(2, drafts[..., None]).squeeze(-1).double()
    judged = torch.arange(K, device=p.device)[None, :] < num_drafts[:, None]
    kept = (u[:, :K] * q_d < p_d) & judged                                        # u < p/q, without dividing
    num_accepted = kept.long().cumprod(dim=1).sum(dim=1)                           # the run of kept drafts
    rows = torch.arange(R, device=p.device)
    final_p = p[rows, num_accepted].double()                                       # [R, V] at the final position
    bonus = num_accepted == num_drafts
    at = num_accepted.clamp(max=max(K - 1, 0))
    if K == 0:
        residual = final_p
    elif q is None:                                  # point mass: p with the rejected draft taken out
        residual = final_p.scatter(1, drafts[rows, at][:, None], 0.0)
    else:
        residual = (final_p - q[rows, at].double()).clamp(min=0.0)
    # Round-off can leave a rejected row with no residual mass (p <= q everywhere means p == q): use p.
    empty = residual.sum(dim=1) <= 0.0
    dist = torch.where((bonus | empty)[:, None], final_p, residual)
    return num_accepted, pick(dist, u[:, K])
