"""The simulator mode's arithmetic: rounds of speculative decoding where each draft survives with
probability a, independently (the closed form's assumption, exactly).

    sim = Simulator(seed=0)
    last = sim.run(a=0.8, k=4, rounds=1)       # one round: [True, True, False, None] = kept, kept,
                                               # rejected, never judged; then the target's own token
    sim.run(0.8, 4, 1000)                      # a thousand more, counted the same way
    sim.tokens_per_pass                        # settles near (1 - a^(k+1)) / (1 - a) = 3.36

Changing a or k starts a new tally (the rounds before were drawn with other numbers). The modelled
speed-up divides tokens per pass by what a round costs in target steps, 1 + k * c, with c the cost of
one draft step as a fraction of a target step (chapter 18).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine import expected_speedup, expected_tokens_per_pass

MAX_ROUNDS = 100_000          # a tally stops growing here (the mean has long settled)


@dataclass(slots=True)
class Simulator:
    seed: int = 0
    a: float = 0.8
    k: int = 4
    rounds: int = 0
    tokens: int = 0
    histogram: list[int] = field(default_factory=list)       # [i] = rounds that kept exactly i drafts
    last: list[bool | None] = field(default_factory=list)    # the last round's verdicts
    _rng: np.random.Generator | None = None

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self.histogram = [0] * (self.k + 1)

    def reset(self, a: float, k: int) -> None:
        self.a, self.k, self.rounds, self.tokens = a, k, 0, 0
        self.histogram, self.last = [0] * (k + 1), []

    def run(self, a: float, k: int, rounds: int) -> list[bool | None]:
        """Play `rounds` rounds (a new tally if a or k changed); returns the last round's verdicts."""
        if (a, k) != (self.a, self.k):
            self.reset(a, k)
        rounds = max(0, min(rounds, MAX_ROUNDS - self.rounds))
        if rounds == 0:
            return self.last
        survive = self._rng.random((rounds, k)) < a
        kept = np.where(survive.all(axis=1), k, np.argmin(survive, axis=1))   # the first rejection, or k
        self.rounds += rounds
        self.tokens += int(kept.sum()) + rounds                               # kept drafts + one each round
        for i, n in enumerate(np.bincount(kept, minlength=k + 1)):
            self.histogram[i] += int(n)
        last = int(kept[-1])
        self.last = [True] * last + ([False] if last < k else []) + [None] * max(0, k - last - 1)
        return self.last

    @property
    def tokens_per_pass(self) -> float | None:
        return self.tokens / self.rounds if self.rounds else None

    @property
    def closed_form(self) -> float:
        return expected_tokens_per_pass(self.a, self.k)

    def speedup(self, draft_cost: float) -> float | None:
        """Simulated tokens per pass over the cost of a round, 1 + k * c."""
        return None if self.tokens_per_pass is None else self.tokens_per_pass / (1 + self.k * draft_cost)

    def modelled_speedup(self, draft_cost: float) -> float:
        return expected_speedup(self.a, self.k, draft_cost)

    @property
    def full(self) -> bool:
        return self.rounds >= MAX_ROUNDS


def closed_form_curve(k: int, points: int = 99) -> tuple[list[float], list[float]]:
    """(a, expected tokens per pass) for a from 0 to 0.98: the curve both modes are drawn against."""
    xs = [i / (points + 1) for i in range(points)]
    return xs, [expected_tokens_per_pass(a, k) for a in xs]
