"""The sampler keeps exactly the tokens each filter should keep, and seeds make draws reproducible."""
from __future__ import annotations

import math

import pytest
import torch

from engine.model.sampler import filter_logits, make_generator, sample, sampling_probs
from engine.sampling_params import SamplingParams

# A hand-made row: probabilities .50 .20 .15 .10 .05 (token order shuffled on purpose).
PROBS = {3: 0.50, 0: 0.20, 4: 0.15, 1: 0.10, 2: 0.05}
ROW = torch.tensor([math.log(PROBS[i]) for i in range(5)])


def kept(params: SamplingParams, row: torch.Tensor = ROW) -> set[int]:
    return {i for i, x in enumerate(filter_logits(row, params).tolist()) if x != float("-inf")}


@pytest.mark.parametrize("k, want", [(1, {3}), (2, {3, 0}), (3, {3, 0, 4}), (5, {0, 1, 2, 3, 4}), (0, {0, 1, 2, 3, 4})])
def test_top_k_keeps_the_k_most_likely(k, want):
    assert kept(SamplingParams(top_k=k)) == want


@pytest.mark.parametrize("p, want", [
    (0.3, {3}),                 # .50 alone already reaches .3
    (0.49, {3}),
    (0.51, {3, 0}),             # .50 falls just short of .51: the next token is needed
    (0.8, {3, 0, 4}),           # .50 + .20 = .70 < .8, so .15 joins; .85 >= .8 stops
    (0.9, {3, 0, 4, 1}),
    (1.0, {0, 1, 2, 3, 4}),
])
def test_top_p_keeps_the_smallest_nucleus(p, want):
    assert kept(SamplingParams(top_p=p)) == want


def test_min_p_is_relative_to_the_top_token():
    assert kept(SamplingParams(min_p=0.25)) == {3, 0, 4}    # threshold .125
    assert kept(SamplingParams(min_p=0.5)) == {3}           # threshold .25


def test_filters_compose_and_temperature_does_not_reorder():
    # top-k 4 drops token 2; renormalised the rest are .526 .211 .158 .105; top-p .7 keeps two.
    assert kept(SamplingParams(top_k=4, top_p=0.7)) == {3, 0}
    assert kept(SamplingParams(temperature=5.0, top_k=2)) == {3, 0}
    filtered = filter_logits(ROW, SamplingParams(temperature=2.0))
    assert torch.allclose(filtered, ROW / 2.0)


def test_batched_rows_use_their_own_parameters():
    rows = torch.stack([ROW, ROW, ROW])
    params = [SamplingParams(temperature=0.0), SamplingParams(top_k=1), SamplingParams(top_p=0.5)]
    gens = [None, make_generator(0), make_generator(1)]
    assert sample(rows, params, gens) == [3, 3, 3]


def test_draws_only_kept_tokens_with_the_right_frequencies():
    gen = make_generator(0)
    params = SamplingParams(top_k=3)
    draws = [sample(ROW[None], [params], [gen])[0] for _ in range(3000)]
    assert set(draws) <= {3, 0, 4}
    share = draws.count(3) / len(draws)
    assert abs(share - 0.50 / 0.85) < 0.05


def test_same_seed_same_tokens_different_seed_different_tokens():
    logits = torch.randn(4, 200, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=1.0)] * 4

    def run(seed):
        gens = [make_generator(seed + i) for i in range(4)]
        return [sample(logits, params, gens) for _ in range(10)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_a_seeded_row_does_not_depend_on_its_neighbours():
    logits = torch.randn(3, 100, generator=torch.Generator().manual_seed(1))
    p = SamplingParams(temperature=0.8, seed=5)
    alone = sample(logits[1:2], [p], [make_generator(5)])
    together = sample(logits, [SamplingParams(), p, SamplingParams(temperature=0.0)],
                      [make_generator(11), make_generator(5), None])
    assert together[1] == alone[0]


def test_greedy_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 0.0, 4.9]])
    assert sample(logits, [SamplingParams(temperature=0.0)] * 2, [None, None]) == [1, 0]


def test_seeded_draws_are_pinned():
    # a seeded request must generate the same tokens from release to release: any change to filtering,
    # softmax or drawing that moves one of these draws changes what seeded requests write
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(42)) * 3
    params = [SamplingParams(temperature=0.8, top_k=40, seed=1), SamplingParams(temperature=0.0),
              SamplingParams(temperature=1.3, top_p=0.7, min_p=0.02, seed=2), SamplingParams(temperature=1.0, seed=3)]
    gens = [make_generator(p.seed) for p in params]
    assert [sample(logits, params, gens) for _ in range(8)] == [
        [223, 176, 101, 2], [64, 176, 101, 102], [66, 176, 101, 235], [201, 176, 101, 22],
        [0, 176, 159, 235], [231, 176, 101, 22], [66, 176, 101, 235], [223, 176, 72, 235]]


def test_sampling_probs_is_the_distribution_the_sampler_draws_from():
    from engine import filter_logits as exported_filter, sampling_probs as exported_probs

    assert exported_probs is sampling_probs and exported_filter is filter_logits
    params = SamplingParams(temperature=0.7, top_k=3, top_p=0.9)
    probs = sampling_probs(ROW, params)
    assert probs.sum().item() == pytest.approx(1.0)
    assert {i for i, p in enumerate(probs.tolist()) if p > 0} == kept(params)
    assert torch.allclose(probs, torch.softmax(filter_logits(ROW, params), dim=-1))
    batch = sampling_probs(torch.stack([ROW, ROW]), [params, SamplingParams(temperature=0.0)])
    assert torch.equal(batch[0], probs) and batch[1].tolist() == [0, 0, 0, 1, 0]     # greedy: the argmax
    # the draw is inverse transform over exactly these probabilities, one uniform number per row
    gen, check = make_generator(11), make_generator(11)
    cdf = torch.cumsum(probs.double(), 0)
    for _ in range(20):
        u = torch.rand(1, generator=check).double()
        assert sample(ROW[None], [params], [gen])[0] == torch.searchsorted(cdf / cdf[-1], u, right=True).item()


def test_top_p_of_one_keeps_the_whole_tail():
    """top_p = 1 is off: the float32 running total reaches 1.0 before the end of a long-tailed row,
    and must not cut the tokens after that point."""
    from engine import SamplingParams, sampling_probs
    logits = torch.randn(49152, generator=torch.Generator().manual_seed(0)) * 4
    probs = sampling_probs(logits, SamplingParams(temperature=1.0, top_p=1.0))
    assert int((probs > 0).sum()) == int((torch.softmax(logits, -1) > 0).sum())
