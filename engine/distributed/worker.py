"""A worker process: one rank of a tensor/pipeline-parallel engine that is not rank 0.

    spawn ─► join the group ─► build my shard ─► "ready" ──► loop:
                                                              record = broadcast from rank 0
                                                              None        -> leave
                                                              KVRequest   -> allocate my KV cache
                                                                 (and capture my decode graphs)
                                                              Probe       -> time all-reduces alone
                                                              SchedulerOutput -> my share of the step,
                                                                 then (result, counters, error) to rank 0

A worker holds no scheduler and no sequences: everything it does follows from the records. It exits
when rank 0 says so, when rank 0's sockets close (rank 0 died), or when its parent process is gone.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from ..model.llama import Llama
from .parallel_config import ParallelConfig
from .pipeline import ShardRunner
from .process_group import HOST, STARTUP_TIMEOUT, announce, connect, leave
from .shard import ShardKVCache, build_shard


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    build: Callable[[], Llama]       # the whole model on the CPU, before this rank cuts its shard
    parallel: ParallelConfig
    port: int                        # rank 0's TCPStore
    device_type: str                 # "cpu" | "cuda"
    dtype: torch.dtype
    threads: int                     # torch threads per CPU process
    parent_pid: int


@dataclass(frozen=True, slots=True)
class KVRequest:
    """Rank 0 -> every rank, once: the cache size the scheduler planned (the same block ids everywhere)."""
    num_blocks: int
    block_size: int
    num_swap_blocks: int
    max_num_tokens: int = 2048           # the runner's input buffer, as the one-process runner's
    max_num_seqs: int = 64               # the largest decode graph
    max_model_len: int | None = None     # the graphs' block-table width
    graphs: str | None = None            # "cuda" | "stand-in" | None (eager): ShardRunner


@dataclass(frozen=True, slots=True)
class Probe:
    """Rank 0 -> every rank: time `calls` all-reduces of [rows, hidden] replayed alone (Comm.probe_all_reduce);
    each rank answers with its seconds."""
    rows: int
    calls: int


def make_runner(model: Llama, full_cfg, pc: ParallelConfig, rank: int, comm, layers: range,
                kv: KVRequest, dtype: torch.dtype) -> ShardRunner:
    cache = ShardKVCache(full_cfg, pc, rank, kv.num_blocks, kv.block_size, dtype, comm.device, kv.num_swap_blocks)
    return ShardRunner(model, cache, pc, rank, comm, layers, kv.max_num_tokens, kv.max_num_seqs, kv.max_model_len,
                       kv.graphs)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker never outlives rank 0's process, even if rank 0 is killed without a word."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker_main(rank: int, spec: WorkerSpec) -> None:
    # ctrl-C in a terminal reaches the whole process group: rank 0 handles it and ends the workers
    # (close() or, if it dies, the parent watch), so a worker ignores it rather than print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(spec.parent_pid)
    if os.environ.get("ENGINE_WORKER_TRACEBACK_S"):      # diagnosing a hang: where this worker stands
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["ENGINE_WORKER_TRACEBACK_S"]), repeat=True)
    if spec.device_type == "cpu":
        torch.set_num_threads(spec.threads)
    try:
        store = dist.TCPStore(HOST, spec.port, spec.parallel.world_size, is_master=False, timeout=STARTUP_TIMEOUT)
        announce(store, rank)
        comm = connect(rank, spec.parallel, spec.device_type, store)
    except Exception as e:                      # rank 0 names the dead worker; one line here
        print(f"worker rank {rank}: could not join the process group ({type(e).__name__}: {e})", file=sys.stderr)
        os._exit(1)
    try:
        whole = spec.build()
        full_cfg = whole.config
        model, layers = build_shard(whole, spec.parallel, rank, comm, comm.device, spec.dtype)
        comm.send_object(None, 0)               # ready
    except Exception as e:
        comm.send_object(f"worker rank {rank} could not build its shard: {type(e).__name__}: {e}", 0)
        leave()
        return
    try:
        serve(rank, spec, comm, model, full_cfg, layers)
    except Exception as e:                      # lost contact with rank 0 (it died or closed)
        print(f"worker rank {rank}: lost contact with rank 0 ({type(e).__name__}); exiting", file=sys.stderr)
        os._exit(1)
    leave()
    sys.stderr.flush()
    os._exit(0)                                 # nothing left to tidy: skip the interpreter's slow teardown


def serve(rank: int, spec: WorkerSpec, comm, model: Llama, full_cfg, layers: range) -> None:
    runner = None
    while True:
        msg = comm.broadcast_object(src=0)
        if msg is None:
            if runner is not None:
                runner.release_graphs()         # before leave(): see ShardRunner.release_graphs
            return
        if isinstance(msg, KVRequest):
            try:
                runner, error = make_runner(model, full_cfg, spec.parallel, rank, comm, layers, msg, spec.dtype), None
            except Exception as e:
                error = f"worker rank {rank} could not allocate its KV cache: {type(e).__name__}: {e}"
            comm.send_object(error, 0)
            continue
        if isinstance(msg, Probe):
            comm.send_object(comm.probe_all_reduce(msg.rows, full_cfg.hidden_size, spec.dtype, msg.calls), 0)
            continue
        comm.start_step()
        try:
            result, error = runner.execute(msg), None
        except Exception as e:
            result, error = None, f"worker rank {rank}: {type(e).__name__}: {e}"
        comm.send_object((result, comm.take_step(), error), 0)
        if error:
            return

