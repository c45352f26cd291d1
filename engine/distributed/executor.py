"""DistributedExecutor: rank 0's side of a tensor/pipeline-parallel engine.

The LLMEngine on rank 0 keeps its scheduler and output processor and calls `execute(record)` as it
would call a ModelRunner. Here that means:

    rank 0                                          every worker
    broadcast the SchedulerOutput (pickled) ──────► the same record
    run my shard (all-reduces / sends inside) ◄───► run its shard
    receive (result, counters, error) ◄──────────── after its share of the step
    return the sampling rank's ModelRunnerOutput, with .parallel = the step's ParallelStep

Workers are started here (torch.multiprocessing, spawn) and ended by close(). A worker that dies
fails the step with a message naming it, and every other worker is ended, so nothing is left behind;
the engine then refuses further steps (start a new one).
"""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..core.records import ModelRunnerOutput, SchedulerOutput
from ..loader.progress import log
from ..model.llama import Llama
from .parallel_config import ParallelConfig, check_parallel
from .process_group import STARTUP_TIMEOUT, announce, backend_for, connect, leave, master_store, workers_alive
from .stats import ParallelStep
from .worker import KVRequest, Probe, WorkerSpec, make_runner, worker_main
from .shard import build_shard


class WorkerFailed(RuntimeError):
    pass


class SharedModel:
    """The whole model for the workers with its tensors moved to shared memory (once, here): a spawned
    worker maps them instead of reading the weights file again, and N ranks do not hold N copies of the
    model while they cut their shards (the cuts are copies; replicated parts stay shared)."""

    def __init__(self, model: Llama):
        self.model = model.share_memory()

    def __call__(self) -> Llama:
        return self.model

    @staticmethod
    def fits(model: Llama) -> bool:
        """Room in /dev/shm for every tensor, with a margin (a container may give it only 64 MiB):
        otherwise each worker builds its own copy with `build`."""
        need = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
        try:
            st = os.statvfs("/dev/shm")
        except OSError:
            return False
        return st.f_bavail * st.f_frsize > 2 * need


# This process's executors; the one that joined torch.distributed's group (comm set) and has not closed
# holds it. One at a time: the process has one default group.
_LIVE: "weakref.WeakSet[DistributedExecutor]" = weakref.WeakSet()


def _claim_the_process_group() -> None:
    """Refuse a second engine while one runs; clear a group that no live engine owns. torch.distributed
    has one default group per process: an engine that failed to leave it (its close() could not destroy
    it) would otherwise make every later engine in this process refuse to start."""
    holder = next((e for e in list(_LIVE) if e.comm is not None and not e._closed), None)
    if holder is not None:
        raise RuntimeError(f"this process already runs a parallel engine (one at a time: a {holder.pc.describe()} "
                           f"engine started on thread {holder.owner!r}): close it first")
    if dist.is_initialized():
        log("a process group that no running engine owns was left behind: leaving it")
        leave()


class DistributedExecutor:
    def __init__(self, model: Llama, build, pc: ParallelConfig, device_type: str, dtype: torch.dtype,
                 threads: int | None = None, config=None, graphs: str | None = None):
        """model: the whole model (rank 0 cuts its own shard from it), handed to the workers in shared
        memory when it is on the CPU; build: a picklable function that gives each worker the same whole
        model, used where shared memory has no room for it, or when the model was built on a GPU (random
        weights drawn on each rank's device: the same seed, the same numbers). config: the EngineConfig
        (input buffer and graph sizes); graphs: "cuda", "stand-in" or None (ShardRunner)."""
        check_parallel(model.config, pc)
        if device_type == "cuda" and pc.world_size > torch.cuda.device_count():
            raise ValueError(f"{pc.describe()} needs {pc.world_size} GPUs (one per rank); "
                             f"this machine has {torch.cuda.device_count()}")
        _claim_the_process_group()
        self.pc, self.dtype, self.full_config = pc, dtype, model.config
        self.config, self.graphs = config, graphs
        self.error: str | None = None
        self.comm, self.runner, self.kv_cache, self._closed = None, None, None, False
        self._closing = False
        self._first_death: str | None = None       # the watch's finding: who died first, and how
        self.owner = threading.current_thread().name
        _LIVE.add(self)
        self.store = master_store(pc.world_size)
        on_cpu = model.embed.weight.device.type == "cpu"
        whole = SharedModel(model) if on_cpu and SharedModel.fits(model) else build
        spec = WorkerSpec(whole, pc, self.store.port, device_type, dtype,
                          threads or max(1, (os.cpu_count() or 1) // pc.world_size), os.getpid())
        ctx = mp.get_context("spawn")
        self.procs = {r: ctx.Process(target=worker_main, args=(r, spec), name=f"engine-rank-{r}", daemon=True)
                      for r in range(1, pc.world_size)}
        atexit.register(self.close)
        started = time.perf_counter()
        try:
            for p in self.procs.values():
                p.start()
            threading.Thread(target=self._watch_workers, name="engine-worker-watch", daemon=True).start()
            self._wait_for_workers()
            announce(self.store, 0)
            self.comm = connect(0, pc, device_type, self.store)
            self.model, self.layers = build_shard(model, pc, 0, self.comm, self.comm.device, dtype)
            for r in self.procs:
                if (error := self.comm.recv_object(r)) is not None:
                    raise WorkerFailed(error)
        except BaseException as e:
            self._fail(e)
        log(f"{pc.describe()}: {pc.world_size} processes ({backend_for(device_type)}) ready in "
            f"{time.perf_counter() - started:.1f}s")

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def role(self, rank: int) -> str:
        stage, tp_rank = self.pc.coords(rank)
        parts = ([f"stage {stage}"] if self.pc.pp > 1 else []) + ([f"tensor-parallel rank {tp_rank}"] if self.pc.tp > 1 else [])
        return f"rank {rank} ({', '.join(parts)})"

    # -- start-up ------------------------------------------------------------------------------
    def _wait_for_workers(self) -> None:
        """Until every worker has reached the store, naming one that died on the way."""
        deadline = time.monotonic() + STARTUP_TIMEOUT.total_seconds()
        while not workers_alive(self.store, self.pc.world_size):
            self._check_workers()
            if time.monotonic() > deadline:
                raise WorkerFailed(f"the workers did not start within {STARTUP_TIMEOUT.total_seconds():.0f}s")
            time.sleep(0.02)

    def allocate(self, num_blocks: int, num_swap_blocks: int, block_size: int) -> "DistributedExecutor":
        """Every rank builds its part of a KV cache of num_blocks blocks; returns self, the engine's runner."""
        c = self.config
        if c is None:
            request = KVRequest(num_blocks, block_size, num_swap_blocks)
        else:       # max_model_len as LLMEngine's plan makes it (memory.plan_kv_cache): what the cache holds
            max_len = min(c.max_model_len or self.full_config.max_position_embeddings, num_blocks * block_size)
            request = KVRequest(num_blocks, block_size, num_swap_blocks, c.max_num_batched_tokens, c.max_num_seqs,
                                max_len, self.graphs)
        try:
            self.comm.broadcast_object(request)
            self.runner = make_runner(self.model, self.full_config, self.pc, 0, self.comm, self.layers, request, self.dtype)
            for r in self.procs:
                if (error := self.comm.recv_object(r)) is not None:
                    raise WorkerFailed(error)
        except BaseException as e:
            self._fail(e)
        self.kv_cache = self.runner.kv_cache
        return self

    def probe_all_reduce(self, rows: int, calls: int) -> list[float]:
        """Every rank times `calls` all-reduces of [rows, hidden] replayed alone (what a decode graph
        of that batch size issues); seconds per burst, by rank."""
        try:
            probe = Probe(rows, calls)
            self.comm.broadcast_object(probe)
            seconds = [self.comm.probe_all_reduce(rows, self.full_config.hidden_size, self.dtype, calls)]
            seconds += [self.comm.recv_object(r) for r in self.procs]
        except BaseException as e:
            self._fail(e)
        return seconds

    # -- one step ------------------------------------------------------------------------------
    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        if self.error is not None:
            raise RuntimeError(self.error)
        comm, steps = self.comm, [None] * self.pc.world_size
        try:
            self._check_workers()
            comm.start_step()
            start = time.perf_counter()
            comm.broadcast_object(out)
            result = self.runner.execute(out)
            for r in self.procs:
                worker_result, steps[r], error = comm.recv_object(r)
                if error is not None:
                    raise WorkerFailed(error)
                if r == self.pc.sampling_rank:
                    result = worker_result
            steps[0] = comm.take_step()
        except BaseException as e:
            self._fail(e)
        result.parallel = ParallelStep(self.pc.tp, self.pc.pp, list(self.runner.micro_batch_tokens), steps,
                                       start, time.perf_counter())
        return result

    # -- failure and the end -------------------------------------------------------------------
    def _watch_workers(self) -> None:
        """When a worker dies outside close(), end every other worker at once.

        Gloo notices a dead peer only on a connection it is waiting on. With three or more ranks rank 0
        can be waiting in an all-reduce on a live worker that is itself blocked sending rank 0 its error
        (its own collective with the dead one failed): neither moves, and gloo's timeout is days. Once
        every worker is gone, every connection rank 0 waits on closes, its collective fails, and _fail
        names the worker that died first."""
        sentinels = {p.sentinel: r for r, p in self.procs.items()}
        while sentinels and not self._closing:
            ended = wait(list(sentinels), timeout=0.5)
            if self._closing:
                return
            if ended:
                r = sentinels[ended[0]]
                self.procs[r].join(timeout=1)           # reap it, for its exit code
                self._first_death = f"worker {self.role(r)} exited with code {self.procs[r].exitcode}"
                for p in self.procs.values():
                    if p.is_alive():
                        p.kill()
                return

    def _check_workers(self) -> None:
        if self._first_death is not None:
            raise WorkerFailed(self._first_death)
        for r, p in self.procs.items():
            if not p.is_alive():
                raise WorkerFailed(f"worker {self.role(r)} exited with code {p.exitcode}")

    def _fail(self, e: BaseException):
        """Name what went wrong, end every process, and raise one RuntimeError with that message."""
        if isinstance(e, KeyboardInterrupt):     # mid-step: the workers cannot take a goodbye; end them
            self.error = f"the {self.pc.describe()} engine was interrupted; its processes were ended"
            self.close()
            raise e
        message = str(e) if isinstance(e, WorkerFailed) else None
        if message is None:                    # a collective failed: was it because a worker died?
            deadline = time.monotonic() + 2.0
            while message is None and time.monotonic() < deadline:
                try:
                    self._check_workers()
                    time.sleep(0.05)
                except WorkerFailed as dead:
                    message = str(dead)
            message = message or f"rank 0 failed: {type(e).__name__}: {e}"
        self.error = f"the {self.pc.describe()} engine stopped: {message}; its processes were ended"
        self.close()
        raise RuntimeError(self.error) from None

    def close(self) -> None:
        """Tell the workers to leave, end any that do not, and leave the process group."""
        if self._closed:
            return
        self._closed = self._closing = True            # the watch stops: workers leaving now is expected
        atexit.unregister(self.close)
        if self.error is None and self.comm is not None:
            try:
                self.comm.broadcast_object(None)
            except Exception:
                pass
        for p in self.procs.values():
            if p.pid is not None:
                p.join(timeout=5 if self.error is None else 0.1)
        for p in self.procs.values():
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()
        if self.runner is not None:
            self.runner.release_graphs()       # NCCL cannot leave while a graph holds its calls
        try:
            leave()
        except Exception as e:               # the next engine in this process clears the group (see below)
            log(f"{self.pc.describe()}: leaving the process group failed ({type(e).__name__}: {e})")
        _LIVE.discard(self)
        self.store = None
