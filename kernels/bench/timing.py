"""GPU timing for the kernel benchmark: device time of one call with a cold L2, and the copy ceiling.

Why not time eager calls: a small attention call takes a few microseconds on the GPU but longer than
that to launch from Python, so eager timings of small shapes measure the CPU. Here `reps` calls are
captured in a CUDA graph, each preceded by a write over a buffer larger than L2 (so every call reads
K/V from device memory, as a real model's next layer would); a graph of the writes alone is timed
beside it and subtracted.
"""

from __future__ import annotations

import statistics
import time

import torch

_FLUSH_BYTES = 256 << 20  # several times any current GPU's L2


def warm_gpu(seconds: float = 0.5) -> None:
    """Run matrix products until the clocks have left idle, so the first shapes are not timed cold."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def capture(body, reps: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and allocate outside the capture
        body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            body()
    return graph


def replay_ms(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def gpu_time_us(fn, *, reps: int = 20, rounds: int = 9) -> float:
    """Median device time of one fn() with L2 cleared before it, in microseconds."""
    flush = torch.empty(_FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def flush_then_fn():
        flush.zero_()
        fn()

    only_flush = capture(flush.zero_, reps)
    with_fn = capture(flush_then_fn, reps)
    only_flush.replay(), with_fn.replay()  # first replays upload the graphs
    base, total = [], []
    for _ in range(rounds):  # interleaved, so clock drift hits both alike
        base.append(replay_ms(only_flush))
        total.append(replay_ms(with_fn))
    return max(0.0, statistics.median(total) - statistics.median(base)) / reps * 1e3


def eager_call_us(fn, calls: int = 200) -> float:
    """Wall time per call of back-to-back eager calls (warm L2): what a Python caller waits per call."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def copy_bandwidth_gbs(nbytes: int = 1 << 30, copies: int = 10) -> float:
    """Device-to-device copy of nbytes (read + write counted): the practical bandwidth ceiling, GB/s.

    Eager, not graphed: in a CUDA graph the copy became a memcpy node that ran about a third slower
    (seen on an H200), which would flatter every fraction measured against it.
    """
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(copies):
            dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / copies)
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9
