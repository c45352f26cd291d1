"""What one parallel step did, as plain data: each rank's communication and busy intervals.

The step trace keeps one ParallelStep per step (StepRecord.parallel); widgets and `bench parallel`
read it. Everything here pickles: workers send their RankStep to rank 0 after every step.

    ParallelStep  tp=1, pp=3, micro-batches of [12, 11, 11] tokens
      ranks[0]  stage 0   send 3 calls 17,664 B   busy [mb0][mb1][mb2]........
      ranks[1]  stage 1   recv 3, send 3           ....[mb0][mb1][mb2]....
      ranks[2]  stage 2   recv 3                   ........[mb0][mb1][mb2]  <- the bubble is the dots
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("all_reduce", "send", "recv", "control")


@dataclass(slots=True)
class CommCounts:
    calls: int = 0
    bytes: int = 0
    seconds: float = 0.0     # timed calls only
    in_graph: int = 0        # of `calls`, those replayed inside a CUDA graph: counted, not timed (no
    #                          event can be read between two kernels of one graph; `bench parallel`
    #                          times the same collectives replayed alone instead)

    def add(self, other: "CommCounts") -> None:
        self.calls += other.calls
        self.bytes += other.bytes
        self.seconds += other.seconds
        self.in_graph += other.in_graph


@dataclass(slots=True)
class Interval:
    """Forward work of one micro-batch on one rank, on the host clock (time.perf_counter: one clock
    for all processes of a machine), seconds."""
    micro_batch: int
    start_s: float
    end_s: float


@dataclass(slots=True)
class RankStep:
    """One rank's step: its communication by kind, and when it computed which micro-batch."""
    rank: int
    stage: int
    tp_rank: int
    comm: dict[str, CommCounts] = field(default_factory=lambda: {k: CommCounts() for k in KINDS})
    intervals: list[Interval] = field(default_factory=list)

    @property
    def busy_s(self) -> float:
        return sum(i.end_s - i.start_s for i in self.intervals)


@dataclass(slots=True)
class ParallelStep:
    tensor_parallel_size: int
    pipeline_parallel_size: int
    micro_batch_tokens: list[int]       # tokens of each micro-batch, in the order stages ran them
    ranks: list[RankStep]               # by rank
    start_s: float = 0.0                # rank 0: the record goes out ...
    end_s: float = 0.0                  # ... and every rank's result is back

    def total(self, kind: str) -> CommCounts:
        """One kind summed over every rank (control is counted on rank 0 only)."""
        out = CommCounts()
        for r in self.ranks:
            out.add(r.comm[kind])
        return out

    @property
    def all_reduce(self) -> CommCounts:
        """What one rank did: every tensor-parallel rank makes the same all-reduces."""
        return self.ranks[0].comm["all_reduce"]

    @property
    def window_s(self) -> float:
        """From the first rank starting work to the last one finishing."""
        spans = [i for r in self.ranks for i in r.intervals]
        return max(i.end_s for i in spans) - min(i.start_s for i in spans) if spans else 0.0

    @property
    def bubble(self) -> float:
        """Share of rank-time idle inside the window: 1 - busy / (ranks x window). A pipeline of p
        stages with m equal micro-batches idles (p - 1) / (m + p - 1) of it at best."""
        window = self.window_s
        if window <= 0:
            return 0.0
        return max(0.0, 1.0 - sum(r.busy_s for r in self.ranks) / (len(self.ranks) * window))


def ideal_bubble(stages: int, micro_batches: int) -> float:
    """GPipe's bound for equal micro-batches: stage s starts s slots late and ends p - 1 - s slots early."""
    return (stages - 1) / (micro_batches + stages - 1)
