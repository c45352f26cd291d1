"""StepBuffer: one step's input tensors, written on the host into one buffer and copied to the device once.

Building a tensor from a Python list on a GPU (`torch.tensor(list, device="cuda")`) is a copy that
makes the host wait for the device: a dozen of them per step would cost a dozen host syncs. Here
every input lives in one persistent byte buffer in pinned host memory, packed one after another:

    host (pinned)   [ input_ids | positions | slot_mapping | seq_lens | query_start_loc | block_tables | ... ]
                       T x i64     T x i64     T x i64        S x i32    (S + 1) x i32     S x W x i32
                      ──────────────── one non-blocking copy of the used bytes ────────────────►
    device          [ the same bytes; each field is a typed view at its offset                       ]

The layout depends only on the sizes (tokens T, sequences S, block-table width W, ...), so a step
of the same sizes puts every field at the same device address: what a captured CUDA graph needs
(cuda_graphs.py). The fields a graph reads come first; what only eager code reads (logits rows,
the sampler's per-draw values) comes after them, so its sizes can vary freely.

On the CPU there is no copy: the "device" tensors are views of the host buffer itself.
"""
from __future__ import annotations

import numpy as np
import torch

FIELDS: tuple[tuple[str, torch.dtype], ...] = (
    # read by the forward pass (and by a captured graph)
    ("input_ids", torch.int64), ("positions", torch.int64), ("slot_mapping", torch.int64),
    ("seq_lens", torch.int32), ("query_start_loc", torch.int32), ("block_tables", torch.int32),
    # read by eager code after the forward: which hidden rows get logits, then one entry per draw
    ("logits_indices", torch.int64), ("sample_rows", torch.int64), ("sampled", torch.int64),
    ("top_k", torch.int64), ("temperature", torch.float32), ("top_p", torch.float32),
    ("min_p", torch.float32), ("u", torch.float64),
)
_NUMPY = {torch.int64: np.int64, torch.int32: np.int32, torch.float32: np.float32, torch.float64: np.float64}
_ALIGN = 8


def layout(sizes: dict[str, int]) -> tuple[dict[str, tuple[int, int]], int]:
    """({field: (byte offset, element count)}, total bytes) for these element counts (missing = 0)."""
    offsets, at = {}, 0
    for name, dtype in FIELDS:
        n = sizes.get(name, 0)
        offsets[name] = (at, n)
        at += -(-n * dtype.itemsize // _ALIGN) * _ALIGN
    return offsets, at


class StepBuffer:
    def __init__(self, device: torch.device, capacity_bytes: int = 1 << 16):
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.generation = 0               # bumped when the buffer grows: graphs captured before are stale
        self._copied = torch.cuda.Event() if self.on_gpu else None
        self._in_flight = False           # a copy out of the host buffer may not have run yet
        self._allocate(capacity_bytes)
        self._used, self._key = 0, ()

    def _allocate(self, nbytes: int) -> None:
        self.host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=self.on_gpu)
        self.dev = torch.zeros(nbytes, dtype=torch.uint8, device=self.device) if self.on_gpu else self.host
        self._host_np = self.host.numpy()
        self._views: dict[tuple, tuple[dict, dict, int]] = {}   # layout -> (host views, device views): steps repeat

    @property
    def capacity(self) -> int:
        return self.host.numel()

    def reserve(self, nbytes: int) -> None:
        """Grow to hold nbytes (done once at start-up for the largest step, so steps never reallocate)."""
        if nbytes > self.capacity:
            self._allocate(max(nbytes, 2 * self.capacity))
            self.generation += 1

    def begin(self, sizes: dict[str, int]) -> dict[str, np.ndarray]:
        """Lay out a step of these sizes; returns a numpy view of each field in host memory, to fill."""
        if self._in_flight:
            # The previous step's copy must have left the host buffer before it is overwritten. After a
            # step that read back sampled ids it has (see device_caught_up); otherwise wait for it here.
            self._copied.synchronize()
            self._in_flight = False
        self._key = tuple(sizes.get(name, 0) for name, _ in FIELDS)
        cached = self._views.get(self._key)
        if cached is None:
            offsets, used = layout(sizes)
            self.reserve(used)
            host = {name: self._host_np[at:at + n * dtype.itemsize].view(_NUMPY[dtype])
                    for (name, dtype), (at, n) in zip(FIELDS, offsets.values())}
            if len(self._views) > 512:       # eager steps come in many sizes: keep the memo small
                self._views.clear()
            cached = self._views[self._key] = (host, self.views(offsets), used)
        self._used = cached[2]
        return cached[0]

    def commit(self) -> dict[str, torch.Tensor]:
        """Copy the used bytes to the device (non-blocking) and return each field's device view."""
        if self.on_gpu and self._used:
            self.dev[:self._used].copy_(self.host[:self._used], non_blocking=True)
            self._copied.record()
            self._in_flight = True
        return self._views[self._key][1]

    def device_caught_up(self) -> None:
        """The host has just waited for the device (it read results back): the last copy is done."""
        self._in_flight = False

    def views(self, offsets: dict[str, tuple[int, int]]) -> dict[str, torch.Tensor]:
        return {name: self.dev[at:at + n * dtype.itemsize].view(dtype)
                for (name, dtype), (at, n) in zip(FIELDS, offsets.values())}
