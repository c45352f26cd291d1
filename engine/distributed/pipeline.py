"""One rank's part of a step, and the micro-batches that let pipeline stages overlap.

Every rank receives the same SchedulerOutput. With p stages the step's tokens are cut into m
micro-batches (m = p unless asked), and each stage runs them in order, handing each one's hidden
state to the next stage as soon as it is done (GPipe's forward schedule, Huang et al. 2019):

    stage 0   [mb0][mb1][mb2]                      time ──►
    stage 1        [mb0][mb1][mb2]
    stage 2             [mb0][mb1][mb2]            idle corners = the bubble: (p-1)/(m+p-1) at best

A micro-batch may end in the middle of a prefill chunk: its later tokens go in the next micro-batch,
and attend to the earlier ones because this stage has already written their K/V. Cuts never change
the numbers, only when they are computed. The last stage (its tensor-parallel rank 0) keeps the
hidden rows that need logits and samples once every micro-batch is through.

A step waits for its samples before the scheduler can plan the next one, so here stages overlap only
inside a step; vLLM keeps p batches in flight ("virtual engines") to overlap across steps too.

CUDA graphs, as in the one-GPU runner (worker/cuda_graphs.py): a micro-batch of decode rows replays
this rank's captured graph of its layers, the tensor-parallel all-reduces inside it (NCCL calls are
captured like kernels). A stage's hand-offs stay outside: recv into a fixed input buffer, replay,
send a copy of the output. Every rank captures the same sizes in the same order, and after each
capture all ranks agree (a gloo all-reduce of ok/failed), so a failure anywhere leaves every rank
eager instead of one rank waiting on collectives the others never issue. On the CPU (gloo) the
runner stays eager; GraphStandIn replays by running the forward again, so CPU tests cover the
graphs' bookkeeping.
"""
from __future__ import annotations

import gc
import os
import time
from dataclasses import replace

import torch

import torch.distributed as dist

from ..core.records import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from ..loader.progress import log
from ..model.attention import AttentionMetadata
from ..worker.cuda_graphs import DecodeGraphs, graph_batch_sizes
from ..worker.model_runner import ModelRunner
from ..worker.step_buffer import layout
from .parallel_config import ParallelConfig


def _cut(r: ScheduledRequest, a: int, b: int) -> ScheduledRequest:
    """Tokens a:b of a scheduled request; only the piece that ends at its last token samples."""
    if a == 0 and b == len(r.token_ids):
        return r
    last = b == len(r.token_ids)
    return replace(r, token_ids=r.token_ids[a:b], start_pos=r.start_pos + a, sample=r.sample and last,
                   num_cached_tokens=r.num_cached_tokens if a == 0 else 0,
                   fork_seq_ids=r.fork_seq_ids if last else [],
                   prompt_logprob_targets=r.prompt_logprob_targets[a:b])     # row j scores target j


def split_micro_batches(scheduled: list[ScheduledRequest], n: int) -> list[list[ScheduledRequest]]:
    """The step's tokens in n runs of about equal size (fewer if there are fewer tokens), in order.
    A request verifying draft tokens is never cut (its rows are checked together)."""
    total = sum(len(r.token_ids) + len(r.draft_token_ids) for r in scheduled)
    n = max(1, min(n, total))
    if n == 1:
        return [list(scheduled)]
    target = -(-total // n)
    batches, current, room = [], [], target
    for r in scheduled:
        a, whole = 0, bool(r.draft_token_ids)
        while a < len(r.token_ids):
            last_batch = len(batches) == n - 1          # takes whatever is left
            b = len(r.token_ids) if whole or last_batch else min(len(r.token_ids), a + room)
            current.append(_cut(r, a, b))
            room -= (b - a) + (len(r.draft_token_ids) if b == len(r.token_ids) else 0)
            a = b
            if room <= 0 and not last_batch:
                batches.append(current)
                current, room = [], target
    if current:
        batches.append(current)
    return batches


class RankGraph:
    """A CUDA graph of one rank's layers, NCCL calls inside. Unlike the one-GPU CudaGraph it captures in
    thread-local mode: ProcessGroupNCCL's watchdog thread keeps querying events while this thread
    captures, which global mode forbids. Before capturing, the device is drained and every rank meets
    (a gloo barrier), so no eager collective is still in flight on any rank when the capture starts."""

    def __init__(self, run, pool, barrier_group=None):
        torch.cuda.synchronize()
        dist.barrier(group=barrier_group)
        self.graph = torch.cuda.CUDAGraph()
        gc.collect()              # no collection while capturing (as CudaGraph: freeing pinned memory poisons it)
        gc.disable()
        try:
            with torch.cuda.graph(self.graph, pool=pool, capture_error_mode="thread_local"):
                self.output = run()
        finally:
            gc.enable()

    def replay(self) -> torch.Tensor:
        self.graph.replay()
        return self.output


class GraphStandIn:
    """CudaGraph's stand-in on the CPU: "replay" runs the captured function again (the same calls,
    tallied in_graph the same way), so the graph bookkeeping is tested without a GPU."""

    def __init__(self, run, pool):
        self.run = run
        self.output = run()

    def replay(self) -> torch.Tensor:
        self.output = self.run()
        return self.output


class ShardRunner(ModelRunner):
    """A ModelRunner over one rank's shard. Tensor-parallel all-reduces happen inside the model (its
    row-parallel layers); pipeline hand-offs happen here, between micro-batches.

    graphs: "cuda" (capture decode graphs), "stand-in" (GraphStandIn, for CPU tests) or None (eager)."""

    def __init__(self, model, kv_cache, pc: ParallelConfig, rank: int, comm, layers: range,
                 max_num_tokens: int = 2048, max_num_seqs: int = 64, max_model_len: int | None = None,
                 graphs: str | None = None):
        super().__init__(model, kv_cache, max_num_tokens, max_num_seqs, max_model_len)
        self.pc, self.comm, self.layers = pc, comm, layers
        stage, tp_rank = pc.coords(rank)
        self.prev = pc.rank(stage - 1, tp_rank) if stage > 0 else None
        self.next = pc.rank(stage + 1, tp_rank) if stage < pc.pp - 1 else None
        self.samples = rank == pc.sampling_rank
        self.hidden_size, self.dtype = model.config.hidden_size, model.embed.weight.dtype
        self.micro_batch_tokens: list[int] = []
        self.graph_tally: dict[int, list[int]] = {}       # batch size -> bytes of each all-reduce in its graph
        self.graph_batches = self.graph_rows = 0          # micro-batches replayed this step, their padded rows
        if graphs == "cuda" and pc.tp > 1 and os.environ.get("ENGINE_TP_GRAPHS") == "0":
            log("ENGINE_TP_GRAPHS=0: tensor-parallel ranks run decode eagerly")
            graphs = None
        if graphs is not None:
            # a later stage's graph reads the previous stage's hidden state from one fixed buffer
            self.hidden_in = torch.zeros(max_num_seqs, self.hidden_size, dtype=self.dtype, device=self.device)
            capture = (lambda run, pool: RankGraph(run, pool, comm.control_group)) if graphs == "cuda" else GraphStandIn
            if self.capture_stage_graphs(graph_batch_sizes(max_num_seqs), capture) and rank == 0:
                log(f"rank 0: {len(self.graphs.graphs)} decode graphs captured"
                    + (f" ({len(self.graph_tally[max(self.graph_tally)])} all-reduces in each)" if pc.tp > 1 else ""))

    # -- CUDA graphs of this rank's layers -------------------------------------------------------
    @torch.inference_mode()
    def capture_stage_graphs(self, sizes: list[int], capture) -> bool:
        def agreed_capture(run, pool):
            size = self._capturing
            try:
                with self.comm.in_graph() as tally:
                    graph, error = capture(run, pool), None
                self.graph_tally[size] = tally
            except Exception as e:  # noqa: BLE001 - reported below, after every rank has said how it went
                graph, error = None, e
            ok = torch.tensor([0 if error else 1], dtype=torch.int32)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN, group=self.comm.control_group)
            if error is not None:
                raise error
            if not ok.item():
                raise RuntimeError("another rank could not capture this size")
            return graph

        def forward(size: int) -> torch.Tensor:
            self._capturing = size
            return self._stage_forward(size)
        self.graphs = DecodeGraphs(forward, lambda size: self.prepare_inputs(SchedulerOutput(), pad_to=size),
                                   sizes, lambda size: None, agreed_capture)
        self._graph_generation = self.buffer.generation
        if not self.graphs.capture_all():
            self.graphs, self.graph_tally = None, {}
        return self.graphs is not None

    def release_graphs(self) -> None:
        """Free every captured graph before the process group is left: NCCL cannot destroy a
        communicator while a graph that captured one of its calls lives (ncclCommDestroy waits for
        them, so close() hung on the first two-GPU run). DecodeGraphs' closures point back at this
        runner, a cycle: collect it now rather than whenever the collector runs."""
        self.graphs, self.graph_tally = None, {}
        gc.collect()

    def _stage_forward(self, size: int) -> torch.Tensor:
        """This rank's layers over a decode batch of `size`, reading the step buffer's fixed addresses
        (and, after the first stage, hidden_in); the hidden state out, never logits (see execute)."""
        offsets, _ = layout(dict(input_ids=size, positions=size, slot_mapping=size, seq_lens=size,
                                 query_start_loc=size + 1, block_tables=size * self.max_blocks_per_seq))
        v = self.buffer.views(offsets)
        meta = AttentionMetadata(v["slot_mapping"], v["block_tables"].view(size, self.max_blocks_per_seq),
                                 v["seq_lens"], v["query_start_loc"])
        hidden = self.hidden_in[:size] if self.prev is not None else None
        return self.model(v["input_ids"], v["positions"], self.attn.bind(meta), hidden=hidden, layers=self.layers)

    def _graph_size(self, batch: list[ScheduledRequest]) -> int | None:
        """The captured size this micro-batch replays (decode rows only), or None: eager."""
        if self.graphs is None or self.buffer.generation != self._graph_generation:
            return None
        if not all(r.num_tokens == 1 and r.sample and not r.draft_token_ids for r in batch):
            return None
        return self.graphs.size_for(len(batch))

    def _replay(self, size: int, hidden: torch.Tensor | None) -> torch.Tensor:
        if hidden is not None:
            self.hidden_in[:hidden.shape[0]].copy_(hidden)
        with self.comm.in_graph():            # a stand-in replay re-issues the calls: not counted twice
            out = self.graphs.replay(size)
        self.comm.count_graph(self.graph_tally[size])
        self.graph_batches, self.graph_rows = self.graph_batches + 1, self.graph_rows + size
        return out.clone()                   # the next replay overwrites it; a send may still read it

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput | None:
        """This rank's share of the step; the sampling rank returns the ModelRunnerOutput, others None."""
        for seq_id in out.finished_seq_ids:          # the same order as ModelRunner.execute
            self.generators.forget(seq_id)
        self.kv_cache.swap_out(out.blocks_to_swap_out)
        self.kv_cache.swap_in(out.blocks_to_swap_in)
        self.kv_cache.copy_blocks(out.blocks_to_copy)
        batches = split_micro_batches(out.scheduled, self.pc.num_micro_batches) if out.scheduled else []
        self.micro_batch_tokens = [sum(r.num_tokens + len(r.draft_token_ids) for r in b) for b in batches]
        t0 = time.perf_counter()
        rows, self.graph_batches, self.graph_rows = [], 0, 0
        for i, batch in enumerate(batches):
            size = self._graph_size(batch)
            inputs = self.prepare_inputs(SchedulerOutput(scheduled=batch), pad_to=size, draw=False)
            tokens = sum(r.num_tokens + len(r.draft_token_ids) for r in batch)   # the real rows: no padding sent
            hidden = None
            if self.prev is not None:
                hidden = self.comm.recv((tokens, self.hidden_size), self.dtype, self.device, self.prev)
            with self.comm.compute(i):
                if size is not None:
                    hidden = self._replay(size, hidden)[:tokens]
                else:
                    hidden = self.model(inputs.input_ids, inputs.positions, self.attn.bind(inputs.meta),
                                        hidden=hidden, layers=self.layers)
            if self.next is not None:
                self.comm.isend(hidden, self.next)
            elif self.samples and inputs.logits_indices.numel():
                rows.append(hidden[inputs.logits_indices])
        self.comm.wait_sends()
        t1 = time.perf_counter()
        if not self.samples:
            return None
        graph_rows = self.graph_rows if self.graph_batches == len(batches) else 0    # every micro-batch replayed
        if not rows:
            return ModelRunnerOutput(forward_s=t1 - t0, cuda_graph_batch=graph_rows)
        logits = self.model.compute_logits(torch.cat(rows))   # rows follow the sampling requests in order
        # The whole step's draws (the same rows, in the same order), each seeded generator advanced once
        whole = self.prepare_inputs(out)
        result = ModelRunnerOutput(forward_s=t1 - t0, cuda_graph_batch=graph_rows)
        self.sample(out, whole, logits, result)
        result.sample_s = time.perf_counter() - t1
        return result
