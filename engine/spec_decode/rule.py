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

The numbers are SpeculativeConfig's (engine/config.py), reported with the counts below in `bench spec`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class SpeculationRule:
    disable_by_batch_size: int | None = None    # rows in a step above which nobody drafts (None: never off)
    min_acceptance: float | None = None         # kept / judged under which a request pauses (None: never)
    probe_drafts: int = 8                       # drafts judged before a request's acceptance is read
    pause_tokens: int = 32                      # tokens a paused request decodes plainly before it tries again
    steps_off_by_batch: int = 0                 # steps in which the batch was too big to draft
    pauses: int = 0                             # times a request paused for poor acceptance
    _seen: dict[int, list[int]] = field(default_factory=dict)   # seq_id -> [judged, kept, paused until]

    @classmethod
    def from_config(cls, spec) -> "SpeculationRule":
        if spec is None:
            return cls()
        return cls(getattr(spec, "disable_by_batch_size", None), getattr(spec, "min_acceptance", None))

    def batch_allows(self, num_rows: int) -> bool:
        if self.disable_by_batch_size is not None and num_rows > self.disable_by_batch_size:
            self.steps_off_by_batch += 1
            return False
        return True

    def request_allows(self, seq_id: int, num_output_tokens: int) -> bool:
        seen = self._seen.get(seq_id)
        return seen is None or num_output_tokens >= seen[2]

    def judged(self, seq_id: int, num_output_tokens: int, proposed: int, kept: int) -> None:
        """A verify row's verdict; past probe_drafts judged, a poor window pauses the request."""
        if self.min_acceptance is None or not proposed:
            return
        seen = self._seen.setdefault(seq_id, [0, 0, 0])     # [judged, kept, paused until]
        seen[0] += kept + (kept < proposed)                  # the kept ones and the one rejection, if any
        seen[1] += kept
        if seen[0] >= self.probe_drafts:
            if seen[1] < self.min_acceptance * seen[0]:
                seen[2] = num_output_tokens + kept + 1 + self.pause_tokens
                self.pauses += 1
            seen[0] = seen[1] = 0                # a fresh window either way

    def forget(self, seq_ids: list[int]) -> None:
        for s in seq_ids:
            self._seen.pop(s, None)

    def to_dict(self) -> dict:
        return {"disable_by_batch_size": self.disable_by_batch_size, "min_acceptance": self.min_acceptance,
                "probe_drafts": self.probe_drafts, "pause_tokens": self.pause_tokens,
                "steps_off_by_batch": self.steps_off_by_batch, "pauses": self.pauses}
