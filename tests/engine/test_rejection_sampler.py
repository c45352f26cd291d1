"""Rejection sampling keeps the output exactly the target's: chi-square tests over 24,000 seeded trials.

The synthetic pair lives on 8 tokens and is a Markov chain, so a draft's later guesses condition the
target's later rows, as in a real verify pass: the target's distribution after token x is P[x], the
draft's Q[x]. One round from context token c drafts d_1 ~ Q[c], d_2 ~ Q[d_1], ... (k = 3), the target
judges [P[c], P[d_1], P[d_2], P[d_3]] with engine.spec_decode.rejection_sampler, and rounds repeat
until three tokens are out. The three tokens must then follow the chain P exactly: the first token's
8 cells, the first two tokens' 64 cells and the third token's 8 cells are compared with the exact
probabilities. The same test must reject two wrong samplers (the control that it can fail).
"""
from __future__ import annotations

import pytest
import torch

from engine.spec_decode.rejection_sampler import pick, rejection_sample, step_generator, verify_greedy

V, K, TRIALS, START = 8, 3, 24_000, 0
STRICT = 1e-3          # a correct sampler fails this with probability 1e-3 per test; the seeds are fixed


def chain(seed: int, sharpness: float = 1.0) -> torch.Tensor:
    """A random 8x8 transition matrix (rows sum to 1)."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5 * sharpness, dim=-1)


P = chain(1)
DRAFTS = {
    "decent draft": chain(1) * 0.5 + chain(2) * 0.5,                 # overlaps the target by about half
    "badly wrong draft": torch.softmax(-torch.log(P) * 4, dim=-1),   # favours what the target finds least likely
}


def run_trials(draft: str, sampler=None, trials: int = TRIALS, seed: int = 0) -> torch.Tensor:
    """counts[t1, t2, t3] of the first three tokens emitted from START, over `trials` trials run side by
    side as one batch of verify rows per round (seeded: the same counts every run)."""
    sampler = sampler or rejection_sample
    g = torch.Generator().manual_seed(seed)
    out = torch.full((trials, 3 + K + 1), -1, dtype=torch.long)      # room for a whole last round
    have = torch.zeros(trials, dtype=torch.long)
    rows = torch.arange(trials)
    while (live := rows[have < 3]).numel():
        n = live.numel()
        context = torch.where(have[live] > 0, out[live, (have[live] - 1).clamp(min=0)], torch.full((n,), START))
        drafts, q_rows, prev = torch.zeros(n, K, dtype=torch.long), [], context
        for j in range(K):
            if draft == "point mass":                # a lookup-like guess: "the next id", certain of it
                drafts[:, j] = (prev + 1) % V
            else:
                q_rows.append(DRAFTS[draft][prev])
                drafts[:, j] = pick(q_rows[-1], torch.rand(n, generator=g, dtype=torch.float64))
            prev = drafts[:, j]
        p = P[torch.cat([context[:, None], drafts], dim=1)]            # [n, K + 1, V]
        q = torch.stack(q_rows, dim=1) if q_rows else None
        u = torch.rand(n, K + 1, generator=g, dtype=torch.float64)
        accepted, final = sampler(p, drafts, torch.full((n,), K), q, u)
        for i in range(K + 1):                   # emitted: the kept drafts, then the final token
            token = torch.where(accepted > i, drafts[:, min(i, K - 1)], final)
            emit = i <= accepted
            out[live[emit], have[live[emit]] + i] = token[emit]
        have[live] += accepted + 1
    counts = torch.zeros(V, V, V, dtype=torch.long)
    counts.index_put_((out[:, 0], out[:, 1], out[:, 2]), torch.ones(trials, dtype=torch.long), accumulate=True)
    return counts


def chi_square_p(observed: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square; cells expected below 5 are pooled into one."""
    n = observed.sum().item()
    obs, exp = observed.flatten().double(), expected_probs.flatten().double() * n
    small = exp < 5
    if small.any():
        obs = torch.cat([obs[~small], obs[small].sum().view(1)])
        exp = torch.cat([exp[~small], exp[small].sum().view(1)])
    stat = ((obs - exp) ** 2 / exp).sum()
    df = torch.tensor(float(len(obs) - 1), dtype=torch.float64)
    return torch.special.gammaincc(df / 2, stat / 2).item()


def exact_marginals() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    first = P[START]
    pairs = first[:, None] * P                                          # [t1, t2]
    third = pairs.sum(0) @ P                                            # sum over t1, t2
    return first, pairs, third


def assert_follows_target(counts: torch.Tensor) -> None:
    first, pairs, third = exact_marginals()
    for name, observed, expected in [("t1", counts.sum((1, 2)), first), ("t1,t2", counts.sum(2), pairs),
                                     ("t3", counts.sum((0, 1)), third)]:
        p_value = chi_square_p(observed, expected)
        assert p_value > STRICT, f"{name}: chi-square p = {p_value:.2e}"


@pytest.mark.parametrize("draft", ["decent draft", "badly wrong draft", "point mass"])
def test_emitted_tokens_follow_the_target_whatever_the_draft(draft):
    counts = run_trials(draft)
    assert counts.sum() == TRIALS
    assert_follows_target(counts)


def always_accept(p, drafts, num_drafts, q, u):
    """Wrong on purpose: keeps every draft (the draft's distribution leaks into the output)."""
    return num_drafts, pick(p[torch.arange(len(p)), num_drafts], u[:, -1])


def resample_from_p(p, drafts, num_drafts, q, u):
    """Wrong on purpose: the right acceptance test, but a rejected draft is replaced from p itself, not
    from max(0, p - q): tokens the draft over-proposes come out too often."""
    accepted, _ = rejection_sample(p, drafts, num_drafts, q, u)
    return accepted, pick(p[torch.arange(len(p)), accepted], u[:, -1])


@pytest.mark.parametrize("sampler", [always_accept, resample_from_p])
def test_the_chi_square_test_catches_a_wrong_sampler(sampler):
    counts = run_trials("badly wrong draft", sampler, trials=6_000)
    with pytest.raises(AssertionError, match="chi-square"):
        assert_follows_target(counts)


def test_acceptance_probability_is_the_overlap_of_p_and_q():
    """One draft per round: the chance it survives is sum_x min(p(x), q(x)), the chapter's a."""
    p, q, n = P[START], DRAFTS["decent draft"][START], 20_000
    a = torch.minimum(p, q).sum().item()
    g = torch.Generator().manual_seed(0)
    d = pick(q.expand(n, V), torch.rand(n, generator=g, dtype=torch.float64))
    accepted, _ = rejection_sample(P[torch.stack([torch.full((n,), START), d], 1)], d[:, None],
                                   torch.ones(n, dtype=torch.long), q.expand(n, 1, V),
                                   torch.rand(n, 2, generator=g, dtype=torch.float64))
    assert abs(accepted.double().mean().item() - a) < 4 * (a * (1 - a) / n) ** 0.5


def test_table_from_the_chapter():
    """Paris/Lyon/Nice: p = (.6, .3, .1), q = (.8, .1, .1). Paris is kept with probability .75, and every
    rejection of Paris yields Lyon, the only token with p > q."""
    n = 8_000
    p = torch.tensor([[0.6, 0.3, 0.1], [1 / 3, 1 / 3, 1 / 3]], dtype=torch.float64).expand(n, 2, 3)
    q = torch.tensor([[0.8, 0.1, 0.1]], dtype=torch.float64).expand(n, 1, 3)
    u = torch.rand(n, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    accepted, final = rejection_sample(p, torch.zeros(n, 1, dtype=torch.long), torch.ones(n, dtype=torch.long), q, u)
    assert set(final[accepted == 0].tolist()) == {1}
    assert abs(accepted.double().mean().item() - 0.75) < 0.02


def test_rows_with_fewer_drafts_than_the_batch_and_with_none():
    """Padding: a row with 0 drafts draws straight from p_0; a row with 1 of K = 3 stops after it."""
    n = 4_000
    p = P[[START, 1, 2, 3]].expand(n, 4, V)
    drafts = torch.tensor([1, 2, 3]).expand(n, 3)
    u = torch.rand(n, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    accepted, final = rejection_sample(p, drafts, torch.zeros(n, dtype=torch.long), None, u)
    assert accepted.eq(0).all()
    assert chi_square_p(torch.bincount(final, minlength=V), P[START]) > STRICT
    accepted, _ = rejection_sample(p, drafts, torch.ones(n, dtype=torch.long), None, u)
    assert accepted.le(1).all() and accepted.eq(1).any()


def test_greedy_keeps_the_matching_run_then_the_targets_token():
    logits = torch.full((4, V), -1.0)
    for row, best in enumerate([3, 5, 1, 7]):
        logits[row, best] = 1.0
    assert verify_greedy(logits, [3, 5, 2]) == ([3, 5, 1], 2)       # rejected at the third: the target's 1
    assert verify_greedy(logits, [3, 5, 1]) == ([3, 5, 1, 7], 3)    # all kept: a bonus 7
    assert verify_greedy(logits, [4, 5, 1]) == ([3], 0)


def test_a_step_generator_is_named_by_seed_sample_and_position():
    draws = lambda *key: torch.rand(3, generator=step_generator(*key)).tolist()  # noqa: E731
    assert draws(7, 0, 12) == draws(7, 0, 12)
    assert len({tuple(draws(*key)) for key in [(7, 0, 12), (7, 1, 12), (7, 0, 13), (8, 0, 12)]}) == 4
    assert step_generator(None, 0, 12) is None
