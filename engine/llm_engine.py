"""LLMEngine: add requests, call step() until nothing is left, read the tokens as they come.

One step, and the record handed across each boundary (engine/core/records.py):

    Scheduler.schedule()  ──SchedulerOutput──►  ModelRunner.execute()  ──ModelRunnerOutput──►
    who runs, how many tokens,                  swaps, copy-on-write, one forward
    which blocks                                pass, one sample per sampling row

    Scheduler.update_from_output()  ──SequenceOutput──►  OutputProcessor  ──►  StreamEvents
    advance, append, fork, free                          text, stop strings,    + a StepRecord
                                                         metrics, outputs          in the trace

The engine is not thread-safe: one thread calls add_request / step / abort (LLM runs a loop thread
for that and feeds streams from it).
"""
from __future__ import annotations

import time

import torch
from collections.abc import Hashable

from .config import EngineConfig
from .core.block_manager import AllocatorState, BlockManager
from .core.records import ModelRunnerOutput, SchedulerOutput
from .core.scheduler import Scheduler
from .core.sequence import Sequence, SequenceStatus
from .core.static_batching import StaticBatchScheduler
from .core.step_trace import ScheduledEntry, StepRecord, StepTrace
from .model.llama import Llama
from .output_processor import OutputProcessor
from .spec_decode.factory import make_proposer
from .spec_decode.stats import SpecDecodeStats
from .outputs import RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .worker.kv_cache import KVCache
from .worker.memory import plan_kv_cache
from .worker.model_runner import ModelRunner


class LLMEngine:
    def __init__(self, model: Llama, config: EngineConfig | None = None, tokenizer=None,
                 static_batching: bool = False, scheduler_cls: type[Scheduler] | None = None,
                 runner_factory=None, draft_model: Llama | None = None):
        """`runner_factory`: tensor/pipeline parallel executors (engine/distributed); `draft_model`: the
        loaded draft for speculative_config {"method": "draft_model", ...}."""
        self.model, self.tokenizer = model, tokenizer
        self.config = config = config or EngineConfig()
        weight = model.embed.weight
        self.device, self.dtype = weight.device, weight.dtype
        spec = config.speculative_config
        if spec is not None:
            spec.check_against(model.config.num_layers)
            if static_batching or (scheduler_cls is not None and issubclass(scheduler_cls, StaticBatchScheduler)):
                raise ValueError("speculative decoding runs with continuous batching only, not static batching")
        draft_bytes = 0
        if draft_model is not None:
            from .worker.kv_cache import bytes_per_block
            draft_bytes = bytes_per_block(draft_model.config, config.block_size, draft_model.embed.weight.dtype)
        self.kv_plan = plan_kv_cache(model, config, extra_bytes_per_block=draft_bytes)
        self.max_model_len = self.kv_plan.max_model_len
        num_blocks, num_swap = self.kv_plan.num_blocks, config.swap_space_blocks if config.preemption_mode == "swap" else 0
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching, num_swap)
        if runner_factory is None:
            self.kv_cache = KVCache(model.config, num_blocks, config.block_size, self.dtype, self.device, num_swap)
            self.runner = ModelRunner(model, self.kv_cache, config.max_num_batched_tokens, config.max_num_seqs,
                                      self.max_model_len, cuda_graphs=not config.enforce_eager)
        else:   # tensor/pipeline parallel (engine/distributed): rank 0's executor, which drives every rank
            self.runner = runner_factory(num_blocks, num_swap, config.block_size)
            self.kv_cache = self.runner.kv_cache      # rank 0's shard of the cache
        stop = {model.config.eos_token_id, getattr(tokenizer, "eos_token_id", None)}
        scheduler_cls = scheduler_cls or (StaticBatchScheduler if static_batching else Scheduler)
        self.scheduler = scheduler_cls(config, self.block_manager, self.max_model_len,
                                       frozenset(i for i in stop if i is not None))
        if spec is not None:
            if runner_factory is not None:
                raise ValueError("speculative decoding runs in one process, not with tensor/pipeline parallel workers")
            self.runner.speculator.proposer = make_proposer(spec, self.runner, draft_model, num_swap)
        self.output_processor = OutputProcessor(tokenizer, self.scheduler)
        self.trace = StepTrace(config.trace_capacity)
        self.spec_stats = SpecDecodeStats()       # every sampling pass of every sequence, since the start
        self._step = 0

    @property
    def eos_token_ids(self) -> frozenset[int]:
        return self.scheduler.eos_token_ids

    @eos_token_ids.setter
    def eos_token_ids(self, ids) -> None:
        self.scheduler.eos_token_ids = frozenset(ids)

    # -- requests ------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None,
                    arrival_s: float | None = None, prompt_text: str | None = None) -> list[str]:
        """Queue a request; returns the ids its outputs will carry (request_id, or request_id:i for n > 1).

        `prompt` is text (tokenized here) or token ids; `prompt_text` names the text that token ids
        came from, for the RequestOutput."""
        params = params or SamplingParams()
        if request_id in self.output_processor.requests:
            raise ValueError(f"request {request_id!r} is already running")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids instead")
            text, ids = prompt, self.tokenizer.encode_ids(prompt)
        else:
            text, ids = prompt_text, list(prompt)
        self._check_fits(len(ids), params)
        seq = Sequence(self.scheduler.new_seq_id(), request_id, ids, params, num_samples_to_fork=params.n - 1)
        self.output_processor.add(seq.seq_id, request_id, seq.name, text, ids, params,
                                  arrival_s if arrival_s is not None else time.perf_counter())
        self.scheduler.add(seq)
        return [request_id if params.n == 1 else f"{request_id}:{i}" for i in range(params.n)]

    def _check_fits(self, prompt_len: int, params: SamplingParams) -> None:
        total = prompt_len + params.max_tokens
        if prompt_len == 0:
            raise ValueError("the prompt must contain at least one token")
        if total > self.max_model_len:
            raise ValueError(f"prompt ({prompt_len}) + max_tokens ({params.max_tokens}) exceeds max_model_len {self.max_model_len}")
        if not self.config.enable_chunked_prefill and total > self.config.max_num_batched_tokens:
            # a preempted request re-prefills prompt + output in one step: it must fit one budget
            raise ValueError(f"without chunked prefill, prompt + max_tokens ({total}) must fit max_num_batched_tokens")
        if params.n > self.config.max_num_seqs:
            raise ValueError(f"n = {params.n} samples can never run together under max_num_seqs = {self.config.max_num_seqs}")
        if self.block_manager.blocks_for(total) > self.block_manager.num_blocks:
            raise ValueError(f"{total} tokens need more KV blocks than the cache has ({self.block_manager.num_blocks})")

    def abort(self, request_id: str) -> None:
        """Stop a request wherever it is (waiting, running, swapped); its blocks are freed at once."""
        for seq_id in self.output_processor.seq_ids(request_id):
            self.scheduler.finish(seq_id, "abort")
        self.output_processor.release(self.scheduler.take_finished())

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def unfinished_request_ids(self) -> list[str]:
        return list(self.output_processor.requests)

    def take_output(self, output_id: str) -> RequestOutput | None:
        """The RequestOutput of a finished (or aborted) sample, handed over once."""
        return self.output_processor.outputs.pop(output_id, None)

    # -- one step ------------------------------------------------------------------------------
    def step(self) -> list[StreamEvent]:
        """Schedule, run the model once, update, produce outputs; one StreamEvent per new token."""
        blocks_before = self.block_manager.pool.counters()
        t0 = time.perf_counter()
        scheduled = self.scheduler.schedule()
        t1 = time.perf_counter()
        result = self.runner.execute(scheduled)
        t2 = time.perf_counter()
        updates = self.scheduler.update_from_output(scheduled, result)
        for update in updates:
            self.spec_stats.add(update.verified, len(update.new_token_ids))
        events, finished = self.output_processor.process(updates)
        t3 = time.perf_counter()
        self._record(scheduled, result, finished, blocks_before, t0, t1 - t0, t3 - t2)
        return events

    def _record(self, out: SchedulerOutput, result: ModelRunnerOutput, finished, blocks_before, start,
                sched_s, output_s) -> None:
        pool, s = self.block_manager.pool, self.scheduler
        alloc, freed, shared, evicted = (now - then for now, then in zip(pool.counters(), blocks_before))
        verified = {v.seq_id: v for v in result.verified}
        entries = [ScheduledEntry.of(r, verified.get(r.seq_id)) for r in out.scheduled]
        verify = [e for e in entries if e.kind == "verify"]
        self.trace.append(StepRecord(
            step=self._step, start_s=start, schedule_s=sched_s, prepare_s=result.prepare_s,
            propose_s=result.propose_s, forward_s=result.forward_s, sample_s=result.sample_s, output_s=output_s,
            gpu_forward_s=result.gpu_forward_s, gpu_sample_s=result.gpu_sample_s,
            cuda_graph_batch=result.cuda_graph_batch,
            entries=entries, num_batched_tokens=sum(e.num_tokens + e.num_draft_tokens for e in entries),
            num_prefill_tokens=sum(e.num_tokens for e in entries if e.kind == "prefill"),
            num_decode_tokens=sum(e.num_tokens for e in entries if e.kind == "decode"),
            num_padding_tokens=sum(e.num_tokens for e in entries if e.padding),
            num_verify_tokens=sum(e.num_tokens + e.num_draft_tokens for e in verify),
            num_draft_tokens=sum(e.num_draft_tokens for e in verify),
            num_accepted_tokens=sum(e.num_accepted_tokens for e in verify),
            preempted=list(out.preempted), swapped_in=list(out.swapped_in), finished=finished,
            blocks_allocated=alloc, blocks_freed=freed, blocks_shared=shared, blocks_copied=len(out.blocks_to_copy),
            blocks_evicted=evicted, num_free_blocks=pool.num_free, num_blocks=pool.num_blocks,
            prefix_query_tokens=out.prefix_query_tokens, prefix_hit_tokens=out.prefix_hit_tokens,
            num_running=len(s.running), num_waiting=len(s.waiting), num_swapped=len(s.swapped), parallel=result.parallel))
        self._step += 1

    def close(self) -> None:
        """Stop what the engine started: a parallel engine's worker processes (nothing otherwise)."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()

    # -- introspection -------------------------------------------------------------------------
    def allocator_state(self) -> AllocatorState:
        """The block manager's state with owners named by output id instead of internal sequence id."""
        names: dict[Hashable, str] = {seq_id: seq.name for seq_id, seq in self.scheduler.seqs.items()}
        state = self.block_manager.state()
        for block in state.blocks:
            block.owners = [names.get(o, o) for o in block.owners]
        state.tables = {names.get(o, o): t for o, t in state.tables.items()}
        state.swapped = {names.get(o, o): t for o, t in state.swapped.items()}
        return state

    def cached_kv(self, block: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The K and V stored in one slot of the paged cache (block, offset), every layer:
        two [num_layers, num_kv_heads * head_dim] float32 tensors, copied to the CPU."""
        ks, vs = zip(*(self.kv_cache.layer(i) for i in range(self.model.config.num_layers)))
        return (torch.stack([k[block, offset].flatten() for k in ks]).float().cpu(),
                torch.stack([v[block, offset].flatten() for v in vs]).float().cpu())

    @property
    def kv_bytes_per_value(self) -> int:
        """Bytes of one number in the KV cache (its dtype on this device)."""
        return self.kv_cache.layer(0)[0].element_size()

    def num_free_blocks(self) -> int:
        return self.block_manager.num_free_blocks

    def sequence_status(self, output_id: str) -> SequenceStatus | None:
        seq = self.scheduler.seqs.get(self.output_processor.names.get(output_id, -1))
        return seq.status if seq is not None else None
