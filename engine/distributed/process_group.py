"""Joining the process group: gloo on CPU, NCCL on GPUs, one rank per process.

    rank 0                               ranks 1 .. N-1 (spawned)
    TCPStore (master, a free port) ◄──── connect, write "alive/<rank>"
    waits for every "alive" key, watching the worker processes (one that died is named at once)
    init_process_group(store=...)  ◄───► init_process_group(store=...)

Groups: the default group (NCCL on GPUs, gloo on CPU) carries activations; a gloo group carries the
pickled records (they live in host memory); each pipeline stage has its own tensor-parallel group
when there are several stages. NVLink multicast (NVLS) is turned off for NCCL: NCCL_NVLS_ENABLE=0.

Workers wait for the next record for as long as rank 0 is idle, so the groups' timeout is long; a
rank that dies is noticed at once anyway, because its sockets close ("Connection closed by peer").
"""
from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from .comm import Comm
from .parallel_config import ParallelConfig

HOST = "127.0.0.1"                   # one machine: every rank on this host
IDLE_TIMEOUT = timedelta(days=7)     # how long a worker may wait for rank 0's next record
STARTUP_TIMEOUT = timedelta(seconds=300)


def rank_device(rank: int, device_type: str) -> torch.device:
    if device_type == "cuda":
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def backend_for(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


def master_store(world_size: int) -> dist.TCPStore:
    """Rank 0's rendezvous point, on a free port (store.port); workers connect to it."""
    return dist.TCPStore(HOST, 0, world_size, is_master=True, timeout=STARTUP_TIMEOUT, wait_for_workers=False)


def announce(store, rank: int) -> None:
    store.set(f"alive/{rank}", "1")


def workers_alive(store, world_size: int) -> bool:
    return store.check([f"alive/{r}" for r in range(1, world_size)])


def connect(rank: int, pc: ParallelConfig, device_type: str, store) -> Comm:
    """Join the world as `rank`; returns this rank's Comm (device, groups, counters)."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"      # NVLink multicast off (before NCCL reads its settings)
    # Decode graphs hold NCCL calls, and eager steps make NCCL calls; the two never overlap here (one
    # stream, in order), so NCCL's support for mixing them, which NVIDIA notes can deadlock, is not needed
    os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")
    device = rank_device(rank, device_type)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend_for(device_type), store=store, rank=rank, world_size=pc.world_size,
                            timeout=IDLE_TIMEOUT)
    control = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT) if device.type == "cuda" else None
    stage, tp_rank = pc.coords(rank)
    tp_group = None                           # one stage: the whole world is the tensor-parallel group
    if pc.tp > 1 and pc.pp > 1:
        for s in range(pc.pp):                # every rank takes part in creating every group
            group = dist.new_group(pc.tp_group_ranks(s), timeout=IDLE_TIMEOUT)
            if s == stage:
                tp_group = group
    return Comm(rank, stage, tp_rank, device, tp_group, control)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
