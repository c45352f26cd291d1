"""Every byte one rank sends, counted: all-reduces, stage hand-offs, and the records from rank 0.

All communication goes through one `Comm` per rank, which calls torch.distributed and keeps, for the
current step, per kind of operation:

    kind          what                                              tensors
    all_reduce    tensor parallelism: the partial sums after the     [batch tokens, hidden]
                  attention and MLP output projections, 2 per layer
    send, recv    pipeline parallelism: the hidden state handed      [micro-batch tokens, hidden]
                  from one stage to the next (point to point)
    control       rank 0's SchedulerOutput to every worker, and      pickled records (CPU, gloo);
                  each worker's result and counters back             counted on rank 0, time
                                                                     for sending only

calls, bytes (the size of the tensor this rank put in, not the ring's traffic: chapter 19 does the
2(N-1)/N) and seconds blocked in the call: an all-reduce's time includes waiting for the slowest
rank; a recv's includes waiting for the previous stage to finish computing. On a GPU the times come
from CUDA events around each call (the operation's own duration, not its launch), turned into host
time once the step has synchronised; on the CPU they are the wall time of the blocking call.

Inside a CUDA graph (a decode step replayed, pipeline.py) an all-reduce is a node of the graph: it is
captured once, then replayed without Python. Under `comm.in_graph()` all_reduce only issues the call
and tallies its bytes; the runner adds the graph's tally to every step that replays it (calls and
bytes, `in_graph`, no seconds), and `probe_all_reduce` times the same collectives replayed alone.
"""
from __future__ import annotations

import pickle
import time
import torch
import torch.distributed as dist

from .stats import CommCounts, Interval, RankStep


class Clock:
    """Timestamps on the host clock. On CUDA a mark is an event, turned into host time at the end of
    the step (anchored by one synchronisation at its start), so GPU work is timed when it runs, not
    when it was launched."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._anchor: tuple[float, object] | None = None

    def start_step(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
            anchor = torch.cuda.Event(enable_timing=True)
            anchor.record()
            self._anchor = (time.perf_counter(), anchor)

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def resolve(self, mark) -> float:
        """Host seconds of a mark (after end_step on CUDA)."""
        if not self.cuda:
            return mark
        host0, anchor = self._anchor
        return host0 + anchor.elapsed_time(mark) / 1000.0

    def end_step(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class Comm:
    def __init__(self, rank: int, stage: int, tp_rank: int, device: torch.device,
                 tp_group=None, control_group=None):
        self.rank, self.stage, self.tp_rank, self.device = rank, stage, tp_rank, device
        self.tp_group, self.control_group = tp_group, control_group
        self.clock = Clock(device)
        self._pending: list[tuple[str, int, object, object]] = []     # (kind, bytes, start mark, end mark)
        self._control = CommCounts()
        self._intervals: list[tuple[int, object, object]] = []
        self._sends: list[tuple[object, torch.Tensor]] = []
        self._replayed = CommCounts()                  # all-reduces replayed inside graphs this step
        self._graph_tally: list[int] | None = None     # bytes of each all-reduce issued in_graph()

    # -- the step's record ---------------------------------------------------------------------
    def start_step(self) -> None:
        self._pending, self._intervals, self._control = [], [], CommCounts()
        self._replayed = CommCounts()
        self.clock.start_step()

    def take_step(self) -> RankStep:
        """This rank's counters for the step that just ended (and a fresh start for the next)."""
        self.clock.end_step()
        step = RankStep(self.rank, self.stage, self.tp_rank)
        for kind, nbytes, t0, t1 in self._pending:
            c = step.comm[kind]
            c.calls, c.bytes = c.calls + 1, c.bytes + nbytes
            c.seconds += self.clock.resolve(t1) - self.clock.resolve(t0)
        step.comm["control"].add(self._control)
        step.comm["all_reduce"].add(self._replayed)
        self._replayed = CommCounts()
        step.intervals = [Interval(mb, self.clock.resolve(a), self.clock.resolve(b)) for mb, a, b in self._intervals]
        self._pending, self._intervals = [], []
        return step

    def compute(self, micro_batch: int):
        """Bracket one micro-batch's forward work: `with comm.compute(i): ...`."""
        return _Bracket(self, micro_batch)

    # -- activations ---------------------------------------------------------------------------
    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over this rank's tensor-parallel group, in place; every rank gets the total."""
        if self._graph_tally is not None:         # being captured (or its CPU stand-in replayed): no events
            dist.all_reduce(x, group=self.tp_group)
            self._graph_tally.append(x.numel() * x.element_size())
            return x
        t0 = self.clock.mark()
        dist.all_reduce(x, group=self.tp_group)
        self._pending.append(("all_reduce", x.numel() * x.element_size(), t0, self.clock.mark()))
        return x

    def in_graph(self):
        """`with comm.in_graph() as tally:` the all-reduces issued inside are tallied (bytes each), untimed."""
        return _GraphTally(self)

    def count_graph(self, tally: list[int]) -> None:
        """A replay of a graph that captured these all-reduces: counted for this step, not timed."""
        c = self._replayed
        c.calls, c.bytes, c.in_graph = c.calls + len(tally), c.bytes + sum(tally), c.in_graph + len(tally)

    def probe_all_reduce(self, rows: int, hidden: int, dtype: torch.dtype, calls: int, repeats: int = 20) -> float:
        """Seconds for `calls` all-reduces of [rows, hidden] back to back, as a decode graph replays
        them (captured in a CUDA graph of their own on a GPU; a plain loop on the CPU): the time the
        graph's collectives take, measured apart. Every rank of the group must call it together."""
        x = torch.zeros(rows, hidden, dtype=dtype, device=self.device)     # zeros: sums stay finite

        def burst():
            for _ in range(calls):
                dist.all_reduce(x, group=self.tp_group)
        burst()                                    # warm: the communicator and its buffers exist
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            dist.barrier(group=self.control_group)       # as pipeline.RankGraph: nothing in flight, thread-local
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                burst()
            graph.replay()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(repeats):
                graph.replay()
            end.record()
            end.synchronize()
            del graph                                   # before the group can be left (pipeline.release_graphs)
            return start.elapsed_time(end) / 1e3 / repeats
        t0 = time.perf_counter()
        for _ in range(repeats):
            burst()
        return (time.perf_counter() - t0) / repeats

    def isend(self, x: torch.Tensor, dst: int) -> None:
        """Hand x to rank dst without waiting, so this stage can start its next micro-batch; x is kept
        alive here until wait_sends()."""
        self._sends.append((dist.isend(x, dst), x))

    def wait_sends(self) -> None:
        """Wait for every send of the step; their time is the time blocked here."""
        for work, x in self._sends:
            t0 = self.clock.mark()
            work.wait()
            self._pending.append(("send", x.numel() * x.element_size(), t0, self.clock.mark()))
        self._sends = []

    def recv(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, src: int) -> torch.Tensor:
        """Wait for the previous stage's hidden state; the time counts the waiting, transfer included."""
        x = torch.empty(shape, dtype=dtype, device=device)
        t0 = self.clock.mark()
        dist.recv(x, src)
        self._pending.append(("recv", x.numel() * x.element_size(), t0, self.clock.mark()))
        return x

    # -- control: plain records, pickled, over the CPU (gloo) group ----------------------------
    def _counted(self, nbytes: int, t0: float | None) -> None:
        """Calls and bytes; seconds only for sending (a receive mostly waits for the sender's work)."""
        self._control.calls += 1
        self._control.bytes += nbytes
        if t0 is not None:
            self._control.seconds += time.perf_counter() - t0

    def broadcast_object(self, obj=None, src: int = 0):
        """Rank src sends obj to every rank (the others pass nothing and get it back)."""
        t0 = time.perf_counter()
        if self.rank == src:
            data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
            size = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        dist.broadcast(size, src, group=self.control_group)
        if self.rank != src:
            data = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.broadcast(data, src, group=self.control_group)
        self._counted(data.numel(), t0 if self.rank == src else None)
        return obj if self.rank == src else pickle.loads(data.numpy().tobytes())

    def send_object(self, obj, dst: int) -> None:
        t0 = time.perf_counter()
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        dist.send(torch.tensor([data.numel()], dtype=torch.int64), dst, group=self.control_group)
        dist.send(data, dst, group=self.control_group)
        self._counted(data.numel(), t0)

    def recv_object(self, src: int):
        size = torch.zeros(1, dtype=torch.int64)
        dist.recv(size, src, group=self.control_group)
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        dist.recv(data, src, group=self.control_group)
        self._counted(data.numel(), None)
        return pickle.loads(data.numpy().tobytes())


class _Bracket:
    def __init__(self, comm: Comm, micro_batch: int):
        self.comm, self.micro_batch = comm, micro_batch

    def __enter__(self):
        self.t0 = self.comm.clock.mark()

    def __exit__(self, *exc):
        self.comm._intervals.append((self.micro_batch, self.t0, self.comm.clock.mark()))
        return False


class _GraphTally:
    def __init__(self, comm: Comm):
        self.comm = comm

    def __enter__(self) -> list[int]:
        self.comm._graph_tally = []
        return self.comm._graph_tally

    def __exit__(self, *exc):
        self.comm._graph_tally = None
        return False
