"""Speculative decoding's statistics, and the closed form they are compared with.

If each draft token survives with probability a, independently, a verify pass with k drafts keeps
i of them with probability a^i (1 - a) for i < k and a^k for i = k, and emits one token more than it
keeps, so on average

    E[tokens per target pass] = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)

Two acceptance rates are worth telling apart:

    acceptance_rate       kept / proposed: vLLM's "draft acceptance rate". Drafts after the first
                          rejection count as not kept although nobody judged them.
    per_draft_acceptance  kept / judged, judged = kept + rejections: the chance that a draft which is
                          actually compared with the target survives, the a of the closed form.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def expected_tokens_per_pass(a: float, k: int) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens one verify pass yields with k drafts each kept with probability a."""
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"a must be in [0, 1], got {a}")
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def expected_speedup(a: float, k: int, draft_cost: float) -> float:
    """Modelled speed-up over plain decoding when one draft step costs `draft_cost` target steps:
    tokens per pass / (1 + k * draft_cost). Verification is taken to cost one decode step."""
    return expected_tokens_per_pass(a, k) / (1.0 + k * draft_cost)


@dataclass(slots=True)
class SpecDecodeStats:
    num_passes: int = 0          # target passes that produced tokens (a prefill's last chunk, decodes, verifies)
    num_tokens: int = 0          # tokens those passes produced
    num_verify_passes: int = 0   # passes that judged at least one draft
    num_drafts: int = 0          # draft tokens proposed (all of them verified in some pass)
    num_accepted: int = 0        # ... and kept
    num_rejected: int = 0        # verify passes that ended on a rejection (at most one per pass)
    accepted_histogram: list[int] = field(default_factory=list)   # [i] = verify passes that kept exactly i

    def add(self, verified, num_tokens: int) -> None:
        """One pass of one sequence: its VerifiedDraft (None for a plain pass) and the tokens it produced."""
        self.num_passes += 1
        self.num_tokens += num_tokens
        if verified is None or not verified.num_drafts:
            return
        self.num_verify_passes += 1
        self.num_drafts += verified.num_drafts
        self.num_accepted += verified.num_accepted
        self.num_rejected += not verified.bonus
        while len(self.accepted_histogram) <= verified.num_accepted:
            self.accepted_histogram.append(0)
        self.accepted_histogram[verified.num_accepted] += 1

    def merge(self, other: "SpecDecodeStats") -> None:
        for name in ("num_passes", "num_tokens", "num_verify_passes", "num_drafts", "num_accepted", "num_rejected"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for i, n in enumerate(other.accepted_histogram):
            while len(self.accepted_histogram) <= i:
                self.accepted_histogram.append(0)
            self.accepted_histogram[i] += n

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted / self.num_drafts if self.num_drafts else None

    @property
    def per_draft_acceptance(self) -> float | None:
        judged = self.num_accepted + self.num_rejected
        return self.num_accepted / judged if judged else None

    @property
    def tokens_per_pass(self) -> float | None:
        return self.num_tokens / self.num_passes if self.num_passes else None

    @property
    def tokens_per_verify_pass(self) -> float | None:
        """Mean (kept + 1) over the passes that judged drafts: what the closed form predicts."""
        return (self.num_accepted + self.num_verify_passes) / self.num_verify_passes if self.num_verify_passes else None

    def to_dict(self) -> dict:
        r = lambda x: None if x is None else round(x, 4)  # noqa: E731
        return {"passes": self.num_passes, "tokens": self.num_tokens, "verify_passes": self.num_verify_passes,
                "drafts": self.num_drafts, "accepted": self.num_accepted, "rejected": self.num_rejected,
                "accepted_histogram": list(self.accepted_histogram),
                "acceptance_rate": r(self.acceptance_rate), "per_draft_acceptance": r(self.per_draft_acceptance),
                "tokens_per_pass": r(self.tokens_per_pass), "tokens_per_verify_pass": r(self.tokens_per_verify_pass)}
