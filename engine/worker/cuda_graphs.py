"""CUDA graphs for decode steps: the whole forward pass of a decode batch replayed as one launch.

An eager decode step on a small model is launch-bound: ~400 kernels, each a few microseconds of GPU
work but as long again of Python and driver time to launch. A CUDA graph records those launches once
(capture) and replays them with one call, so the GPU runs them back to back. The price is that a
replay repeats the capture exactly: the same kernels, the same launch arguments, the same memory
addresses. So:

- one graph per batch size of a ladder (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, ... up to
  max_num_seqs); a decode batch of 13 runs the graph of 16 with 3 padding rows. A padding row reads
  token 0 at position 0, attends over one slot of block 0 and writes its K/V to slot -1, which
  write_kv skips, so it touches no sequence's cache; its logits are thrown away.
- inputs come from the runner's StepBuffer (step_buffer.py), whose layout puts each field at the same
  address for the same sizes: a decode batch of B always has B tokens, B sequences and a block table
  of fixed width (max_model_len / block_size blocks), so its fields never move.
- the Triton attention kernel is launched with a plan chosen from shapes alone (kernels/launch_plan.py:
  split count, tile, warps); with the width fixed, a captured batch size always has the same plan,
  recorded in `plans`, and each replay relaunches exactly it.
- verify steps of speculative decoding get graphs of their own (`ModelRunner.capture_verify_graphs`):
  every row is [t, d_1 … d_k] at k + 1 fixed query slots (a row with fewer drafts is padded with
  slots that write nowhere), so a verify batch of B has B * (k + 1) tokens and a fixed layout too,
  and the varlen attention kernel finds each row's queries on the device (no host-side shapes).
- prefill and mixed steps (many tokens per sequence, shapes that change every step) run eagerly.

Capture fails safe: any error while capturing logs one line and the runner stays eager.
`EngineConfig(enforce_eager=True)` (CLI `--enforce-eager`) turns graphs off.
"""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..loader.progress import log

if TYPE_CHECKING:  # kernels.launch_plan imports triton, which a CPU-only install may lack
    from kernels.launch_plan import LaunchPlan

LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """The ladder up to max_num_seqs, which is always the top rung (so every decode batch fits one)."""
    return [b for b in LADDER if b < max_num_seqs] + [max_num_seqs]


class CudaGraph:
    """One captured forward: `run()` once under capture; `replay()` repeats it into the same output."""

    def __init__(self, run: Callable[[], torch.Tensor], pool):
        self.graph = torch.cuda.CUDAGraph()
        # No garbage collection while capturing: a collection that frees a dead engine's pinned host
        # buffer calls cudaFreeHost, which is not allowed during capture and poisons it (seen in
        # bench serve-sim, whose second engine captured while the first one's buffers were garbage).
        collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            with torch.cuda.graph(self.graph, pool=pool):
                self.output = run()
        finally:
            if collecting:
                gc.enable()

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.output


def new_pool():
    """One memory pool shared by every graph (they never run at the same time); None off CUDA."""
    return torch.cuda.graph_pool_handle() if torch.cuda.is_available() else None


class DecodeGraphs:
    """The captured graphs of one runner, by batch size.

    `forward(batch_size)` runs the model on the step buffer's fields laid out for a decode batch of
    that size and returns its logits (the runner provides it); `fill_padding(batch_size)` writes an
    all-padding decode batch of that size into the buffer (safe inputs to capture with).
    """

    def __init__(self, forward: Callable[[int], torch.Tensor], fill_padding: Callable[[int], None],
                 sizes: list[int], plan: Callable[[int], "LaunchPlan | None"],
                 capture: Callable[..., object] = CudaGraph):
        self.forward, self.fill_padding, self.sizes = forward, fill_padding, sorted(sizes)
        self.plan, self.capture = plan, capture
        self.graphs: dict[int, object] = {}
        self.plans: dict[int, "LaunchPlan | None"] = {}
        self.failure: str | None = None

    def capture_all(self) -> bool:
        """Capture every size, largest first (it sizes the shared pool). False, logged, on any error."""
        pool = new_pool()
        size = None
        try:
            for size in reversed(self.sizes):
                self.fill_padding(size)
                self.forward(size)            # warm-up, eagerly: compiles kernels, sizes workspaces
                self.graphs[size] = self.capture(lambda s=size: self.forward(s), pool)
                self.plans[size] = self.plan(size)
        except Exception as e:  # noqa: BLE001 - any failure means "run eagerly", never a wrong answer
            self.graphs.clear()
            self.failure = f"batch {size}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log(f"CUDA graphs off, running eagerly (capture failed at {self.failure})")
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return False
        return True

    def size_for(self, num_seqs: int) -> int | None:
        """The smallest captured batch size that holds num_seqs sequences, or None."""
        return next((b for b in self.sizes if b >= num_seqs and b in self.graphs), None)

    def replay(self, size: int) -> torch.Tensor:
        return self.graphs[size].replay()


def decode_plan(batch_size: int, num_heads: int, num_kv_heads: int, max_context: int,
                device: torch.device, queries_per_row: int = 1) -> "LaunchPlan | None":
    """The Triton plan a batch of this size gets with the fixed block-table width (for the record).
    A verify graph's rows hold k + 1 queries each: the varlen kernel's plan, fixed by shapes too."""
    if device.type != "cuda":
        return None
    from kernels.launch_plan import plan_launch
    from kernels.triton_attention import _num_sms
    return plan_launch(batch_size * queries_per_row, batch_size, num_heads, num_kv_heads, max_context,
                       _num_sms(device.index or 0))
