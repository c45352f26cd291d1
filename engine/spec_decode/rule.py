"""When to speculate: only where a verify pass is likely to pay for itself.

A verify pass of k drafts costs r times a plain decode step (r is measured by `bench spec`: on a GPU
both replay CUDA graphs, so r stays near 1 while the batch is small and the step launch-bound) and
yields 1 + (kept drafts) tokens. Two things make it a loss, and the rule turns speculation off for each:

    a big batch        the step is no longer launch-bound: k + 1 tokens a row cost nearly k + 1 times
                       one token's arithmetic, and no acceptance rate pays for that. Above
                       disable_by_batch_size rows (vLLM's name for it) no row drafts that step.
    a bad guesser      a request whose drafts are mostly rejected pays r for about one token. After
                       probe_drafts judged drafts, a request that kept less than min_acceptance of
                       them stops drafting for pause_tokens tokens, then tries again (a chat that
                       starts in prose may quote code later). Judged, as in the closed form's a:
                       kept / (kept + rejections), so the number means the same for every k. A pass
                       yields (1 - a^(k+1)) / (1 - a) tokens: at a = 0.25 and k = 4, 1.33, about
                       what a verify pass costs at batch 1, so below it drafting loses.

What a probe costs depends on the proposer. An n-gram lookup costs nothing, so a request drafts k from
its first step. A draft that runs layers (early exit, a draft model) costs draft_cost target steps per
guessed token (early exit after L of 30 layers: L/30), so its pass pays only above a higher acceptance,
the break-even below (at k = 4, half a step a draft and a verify pass of 1.2 steps: about 0.77), and a
probe of k such guesses that are all rejected costs over three plain steps. Such a request is on
probation: it drafts one token a pass until a window shows its acceptance clears that bar; the window
ends as soon as its outcome is certain (two rejections of eight at 0.77), and each pause after a failed
window is twice as long as the last. A drafter that never pays then costs a few per cent, not a third.

The numbers are SpeculativeConfig's (engine/config.py) and the proposer's draft_cost (factory.py),
reported with the counts below in `bench spec`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

VERIFY_COST = 1.2     # a verify pass of k + 1 tokens / a plain decode step: 1.16-1.35 on an H200 (bench spec)
PROBE_DRAFTS = 1      # drafts a pass while a costly drafter is on probation
FREE_DRAFT = 0.1      # draft_cost below which a drafter needs no probation (an n-gram lookup: 0)


def break_even(k: int, draft_cost: float, verify_cost: float = VERIFY_COST) -> float:
    """The acceptance a at which a pass of k drafts yields as many tokens, (1 - a^(k+1)) / (1 - a), as its
    cost in plain steps, k * draft_cost + verify_cost (1.0 when no acceptance pays)."""
    cost = k * draft_cost + verify_cost
    lo, hi = 0.0, 1.0
    if k + 1 < cost:
        return 1.0
    for _ in range(40):                                  # the yield grows with a: bisect
        mid = (lo + hi) / 2
        yield_ = (1 - mid ** (k + 1)) / (1 - mid)
        lo, hi = (mid, hi) if yield_ < cost else (lo, mid)
    return round(hi, 3)


@dataclass(slots=True)
class _Request:
    judged: int = 0            # drafts judged in this window (kept + rejections)
    kept: int = 0
    paused_until: int = 0      # output-token count at which drafting resumes
    streak: int = 0            # failed windows in a row (each doubles the pause)
    trusted: bool = False      # its last window cleared the bar: it drafts k, not PROBE_DRAFTS


@dataclass(slots=True)
class SpeculationRule:
    disable_by_batch_size: int | None = None    # rows in a step above which nobody drafts (None: never off)
    min_acceptance: float | None = None         # kept / judged under which a request pauses (None: never)
    k: int = 4                                  # drafts a pass (num_speculative_tokens)
    draft_cost: float = 0.0                     # a guessed token's cost in plain target steps
    probe_drafts: int = 8                       # drafts judged in a window before its acceptance is read
    pause_tokens: int = 32                      # tokens a paused request decodes plainly (doubling per failure)
    steps_off_by_batch: int = 0                 # steps in which the batch was too big to draft
    pauses: int = 0                             # times a request paused for poor acceptance
    _seen: dict[int, _Request] = field(default_factory=dict)

    @classmethod
    def from_config(cls, spec, draft_cost: float = 0.0) -> "SpeculationRule":
        if spec is None:
            return cls()
        return cls(getattr(spec, "disable_by_batch_size", None), getattr(spec, "min_acceptance", None),
                   getattr(spec, "num_speculative_tokens", 4), draft_cost)

    @property
    def threshold(self) -> float | None:
        """The acceptance a window must reach: min_acceptance, or the proposer's break-even if higher."""
        if self.min_acceptance is None:
            return None
        return max(self.min_acceptance, break_even(self.k, self.draft_cost) if self.draft_cost else 0.0)

    def batch_allows(self, num_rows: int) -> bool:
        if self.disable_by_batch_size is not None and num_rows > self.disable_by_batch_size:
            self.steps_off_by_batch += 1
            return False
        return True

    def request_allows(self, seq_id: int, num_output_tokens: int) -> bool:
        seen = self._seen.get(seq_id)
        return seen is None or num_output_tokens >= seen.paused_until

    def drafts_for(self, seq_id: int, k: int) -> int:
        """How many of its k reserved slots a request drafts this pass (a costly drafter on probation: 1)."""
        if self.threshold is None or self.draft_cost < FREE_DRAFT:
            return k
        seen = self._seen.get(seq_id)
        return k if seen is not None and seen.trusted else min(k, PROBE_DRAFTS)

    def judged(self, seq_id: int, num_output_tokens: int, proposed: int, kept: int) -> None:
        """A verify row's verdict. The window closes once its outcome is certain: it can no longer reach
        the threshold (pause, twice as long as the last in a row) or has reached it (trusted)."""
        bar = self.threshold
        if bar is None or not proposed:
            return
        seen = self._seen.setdefault(seq_id, _Request())
        seen.judged += kept + (kept < proposed)          # the kept ones and the one rejection, if any
        seen.kept += kept
        need = bar * self.probe_drafts
        if seen.kept + max(0, self.probe_drafts - seen.judged) < need:          # cannot reach the bar
            seen.paused_until = num_output_tokens + kept + 1 + self.pause_tokens * 2 ** seen.streak
            seen.streak += 1
            seen.trusted = False
            self.pauses += 1
        elif seen.kept >= need or seen.judged >= self.probe_drafts:              # reached it
            seen.streak, seen.trusted = 0, True
        else:
            return                                       # the window is still open
        seen.judged = seen.kept = 0                      # a fresh window either way

    def forget(self, seq_ids: list[int]) -> None:
        for s in seq_ids:
            self._seen.pop(s, None)

    def to_dict(self) -> dict:
        return {"disable_by_batch_size": self.disable_by_batch_size, "min_acceptance": self.min_acceptance,
                "draft_cost": round(self.draft_cost, 3), "threshold": self.threshold,
                "probe_drafts": self.probe_drafts, "pause_tokens": self.pause_tokens,
                "steps_off_by_batch": self.steps_off_by_batch, "pauses": self.pauses}
