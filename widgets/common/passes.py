"""What the engine did for one request, read from its own step trace (engine/core/step_trace.py).

A widget must not assume "1 prefill + N−1 decodes": with prefix caching part of the prompt is never
computed, with chunked prefill a long prompt takes several passes, and a preempted request computes
its tokens again. The trace records each step's ScheduledEntry per request, so we count what ran:

    start = llm.num_steps()                          # before submitting
    ... stream the request, note its request_id ...
    p = request_passes(llm.trace_since(start), request_id)
    describe(p) -> ["prompt: 3 of 18 tokens computed, 15 from the prefix cache",
                    "1 prefill pass + 7 decode passes = 8 forward passes", ...]

Times are the engine's own: each step's wall time (schedule + forward + sample), as it measured it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median

from widgets.common.text import plural


@dataclass(slots=True)
class RequestPasses:
    passes: int = 0                    # engine steps (forward passes) that included the request
    prefill_passes: int = 0
    decode_passes: int = 0             # passes that fed generated tokens back (decode or verify)
    cached_prompt_tokens: int = 0      # prompt tokens found in the prefix cache at admission
    chunks: list[int] = field(default_factory=list)   # prompt tokens computed per prefill pass
    preemptions: list[str] = field(default_factory=list)   # "recompute" | "swap", in order
    recomputed_tokens: int = 0         # tokens computed again after a preemption
    shared_passes: int = 0             # passes in which other requests ran in the same batch
    most_others: int = 0               # the most other requests in one of its passes (a busy server)
    prefill_s: float = 0.0             # wall time of the steps that ran its prefill
    decode_s: list[float] = field(default_factory=list)   # wall time of each of its decode steps

    @property
    def prompt_tokens(self) -> int:
        return self.cached_prompt_tokens + sum(self.chunks)

    @property
    def decode_median_s(self) -> float | None:
        return median(self.decode_s) if self.decode_s else None

    def upto(self, tokens: int) -> RequestPasses:
        """The passes behind the first ``tokens`` generated tokens only. While a reply streams, the engine
        is often a step ahead of the tokens the page has received (it ran the next pass while this token
        travelled), and a counter that showed that step would read one pass more than the tokens on
        screen. The prefill's last pass gives the first token and each decode pass one more."""
        extra = self.decode_passes - max(tokens - 1, 0)
        if extra <= 0:
            return self
        return replace(self, passes=self.passes - extra, decode_passes=self.decode_passes - extra,
                       shared_passes=min(self.shared_passes, self.passes - extra),
                       decode_s=self.decode_s[:len(self.decode_s) - extra])


def request_passes(records, request_id: str) -> RequestPasses:
    """Count one request's passes in step records (oldest first), e.g. ``llm.trace_since(start)``."""
    p = RequestPasses()
    admitted = preempted = False
    for rec in records:
        for rid, mode in rec.preempted:
            if rid == request_id:
                p.preemptions.append(mode)
                preempted = True
        mine = [e for e in rec.entries if e.request_id == request_id]
        if not mine:
            continue
        entry = mine[0]
        p.passes += 1
        p.shared_passes += len(rec.entries) > 1
        p.most_others = max(p.most_others, len(rec.entries) - 1)
        if entry.kind == "prefill":
            p.prefill_passes += 1
            p.prefill_s += rec.wall_s
            if preempted:
                p.recomputed_tokens += entry.num_tokens
            else:
                if not admitted:
                    p.cached_prompt_tokens = entry.num_cached_tokens
                p.chunks.append(entry.num_tokens)
            admitted = True
        else:
            p.decode_passes += 1
            p.decode_s.append(rec.wall_s)
    return p


def describe(p: RequestPasses) -> list[str]:
    """The pass counter in words, one line per fact (plain text; escape before HTML)."""
    if p.passes == 0:
        return ["no forward pass yet"]
    lines = []
    total = p.prompt_tokens
    computed = sum(p.chunks)
    if p.cached_prompt_tokens:
        lines.append(f"prompt: {computed:,} of {plural(total, 'token')} computed, "
                     f"{p.cached_prompt_tokens:,} from the prefix cache")
    else:
        lines.append(f"prompt: {plural(total, 'token')} computed")
    if len(p.chunks) > 1:
        lines[-1] += f" in {len(p.chunks)} chunks ({' + '.join(f'{c:,}' for c in p.chunks)})"
    lines.append(f"{plural(p.prefill_passes, 'prefill pass', 'prefill passes')} + "
                 f"{plural(p.decode_passes, 'decode pass', 'decode passes')} = "
                 f"{plural(p.passes, 'forward pass', 'forward passes')}")
    if p.preemptions:
        modes = ", ".join(sorted(set(p.preemptions)))
        times = "once" if len(p.preemptions) == 1 else f"{len(p.preemptions)} times"
        lines.append(f"preempted {times} ({modes}): {plural(p.recomputed_tokens, 'token')} computed again")
    if p.shared_passes:
        lines.append(f"{p.shared_passes} of {plural(p.passes, 'pass', 'passes')} shared with other requests")
        if p.most_others >= 2:             # other readers are generating too: every pass does more work
            lines[-1] += (f" (up to {p.most_others} at once: a busy server, so each pass takes longer than it "
                          f"would for you alone)")
    return lines
