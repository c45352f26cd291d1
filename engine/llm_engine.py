"""LLMEngine: add requests, call step() until nothing is left, read the tokens as they come.

One step, and the record handed across each boundary (engine/core/records.py):

    Scheduler.schedule()  ──SchedulerOutput──►  ModelRunner.execute()  ──ModelRunnerOutput──►
    who runs, how many tokens,                  swaps, copy-on-write, one forward
    which blocks                                pass, one sample per sampling row

    Scheduler.update_from_output()  ──SequenceOutput──►  OutputProcessor  ──►  StreamEvents
    advance, append, fork, free     ◄──stopped seq ids──  text, stop strings,    + a StepRecord
                                                         metrics, outputs          in the trace

The output processor never calls the scheduler: the sequences a stop string ended come back to
step(), which asks the scheduler to finish them; the scheduler stays the one owner of sequence state.

The engine is not thread-safe: one thread calls add_request / step / abort (LLM runs a loop thread
for that and feeds streams from it).
"""
from __future__ import annotations

import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import torch

from .config import EngineConfig
from .core.block_manager import AllocatorState, BlockManager
from .core.records import ModelRunnerOutput, SchedulerOutput
from .core.scheduler import Scheduler
from .core.sequence import Sequence
from .core.static_batching import StaticBatchScheduler
from .core.step_trace import ScheduledEntry, StepRecord, StepTrace
from .model.llama import Llama
from .model.sampler import request_seed
from .output_processor import OutputProcessor
from .outputs import RequestOutput, StreamEvent
from .sampling_params import SamplingParams
from .spec_decode.factory import make_speculator
from .spec_decode.proposer import Proposer
from .spec_decode.stats import SpecDecodeStats
from .worker.kv_cache import KVCache, bytes_per_block
from .worker.memory import plan_kv_cache
from .worker.model_runner import ModelRunner


@dataclass(slots=True, frozen=True)
class EngineCounts:
    """The engine between two steps, in plain numbers: for a loop or a dashboard that must not reach
    into the scheduler or the block pool."""
    steps: int                        # steps run so far
    num_running: int
    num_waiting: int
    num_swapped: int
    num_blocks: int
    num_free_blocks: int
    budget: int                       # the step's token budget (max_num_batched_tokens)
    last: StepRecord | None           # the latest step's record


class LLMEngine:
    def __init__(self, model: Llama, config: EngineConfig | None = None, tokenizer=None,
                 static_batching: bool = False, scheduler_cls: type[Scheduler] | None = None,
                 runner_factory=None, draft_model: Llama | None = None, proposer: Proposer | None = None,
                 eos_token_ids: Iterable[int] | None = None):
        """`runner_factory`: tensor/pipeline parallel executors (engine/distributed); `draft_model`: the
        loaded draft for speculative_config {"method": "draft_model", ...}; `proposer`: one to use
        instead of the one speculative_config names (an oracle, in the tests and `bench spec`);
        `eos_token_ids`: the tokens that end a sequence (default: the model's and the tokenizer's EOS)."""
        self.model, self.tokenizer = model, tokenizer
        self.config = config = config or EngineConfig()
        weight = model.embed.weight
        self.device, self.dtype = weight.device, weight.dtype
        spec = config.speculative_config
        if spec is not None:
            spec.check_against(model.config.num_layers)
            if static_batching or (scheduler_cls is not None and issubclass(scheduler_cls, StaticBatchScheduler)):
                raise ValueError("speculative decoding runs with continuous batching only, not static batching")
            if runner_factory is not None:
                raise ValueError("speculative decoding runs in one process, not with tensor/pipeline parallel workers")
        draft_bytes = 0
        if draft_model is not None:
            draft_bytes = bytes_per_block(draft_model.config, config.block_size, draft_model.embed.weight.dtype)
        self.kv_plan = plan_kv_cache(model, config, extra_bytes_per_block=draft_bytes)
        self.max_model_len = self.kv_plan.max_model_len
        num_blocks, num_swap = self.kv_plan.num_blocks, config.swap_space_blocks if config.preemption_mode == "swap" else 0
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching, num_swap)
        if runner_factory is None:
            self.kv_cache = KVCache(model.config, num_blocks, config.block_size, self.dtype, self.device, num_swap)
            self.runner = ModelRunner(model, self.kv_cache, config.max_num_batched_tokens, config.max_num_seqs,
                                      self.max_model_len, cuda_graphs=not config.enforce_eager,
                                      num_speculative_tokens=spec.num_speculative_tokens if spec else 0)
            # made second: a proposer drafts through this runner's model, KV cache and input preparation
            self.runner.speculator = make_speculator(spec, self.runner, draft_model, num_swap, proposer)
        else:   # tensor/pipeline parallel (engine/distributed): rank 0's executor, which drives every rank
            self.runner = runner_factory(num_blocks, num_swap, config.block_size)
            self.kv_cache = self.runner.kv_cache      # rank 0's shard of the cache
        if eos_token_ids is None:
            eos_token_ids = {model.config.eos_token_id, getattr(tokenizer, "eos_token_id", None)} - {None}
        scheduler_cls = scheduler_cls or (StaticBatchScheduler if static_batching else Scheduler)
        self.scheduler = scheduler_cls(config, self.block_manager, self.max_model_len, frozenset(eos_token_ids))
        self.output_processor = OutputProcessor(tokenizer)
        self.trace = StepTrace(config.trace_capacity)
        self.spec_stats = SpecDecodeStats()       # every sampling pass of every sequence, since the start
        self._step = 0
        self._num_requests = 0                    # requests added so far: names the seed of those without one

    # -- requests ------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None,
                    arrival_s: float | None = None, prompt_text: str | None = None) -> list[str]:
        """Queue a request; returns the ids its completions' events will carry (request_id, or request_id:i
        for n > 1). take_output(request_id) hands over its RequestOutput once every completion has ended.

        `prompt` is text (tokenized here) or token ids; `prompt_text` names the text that token ids
        came from, for the RequestOutput."""
        params = params or SamplingParams()
        params.check()                   # a field set after construction is checked too
        if request_id in self.output_processor.requests:
            raise ValueError(f"request {request_id!r} is already running")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids instead")
            text, ids = prompt, self.tokenizer.encode_ids(prompt)
        else:
            text, ids = prompt_text, list(prompt)
        self._check_token_ids(ids, params)
        max_tokens = params.max_tokens if params.max_tokens is not None else self.max_model_len - len(ids)
        self._check_fits(len(ids), max_tokens, params)
        # A request without a seed of its own draws from one named by its arrival under the engine's seed:
        # the same script gives the same text run after run (vLLM's LLM(seed=...)).
        seed = params.seed if params.seed is not None else request_seed(self.config.seed, self._num_requests)
        self._num_requests += 1
        seq = Sequence(self.scheduler.new_seq_id(), request_id, ids, params, num_samples_to_fork=params.n - 1,
                       max_tokens=max_tokens, seed=seed)
        self.output_processor.add(seq.seq_id, request_id, seq.name, text, ids, params,
                                  arrival_s if arrival_s is not None else time.perf_counter())
        self.scheduler.add(seq)
        return [request_id if params.n == 1 else f"{request_id}:{i}" for i in range(params.n)]

    def _check_token_ids(self, ids: list[int], params: SamplingParams) -> None:
        vocab = self.model.config.vocab_size
        for name, values in (("prompt token ids", ids), ("stop_token_ids", params.stop_token_ids),
                             ("logit_bias keys", list(params.logit_bias or {}))):
            bad = next((t for t in values if not 0 <= t < vocab), None)
            if bad is not None:
                raise ValueError(f"{name}: {bad} is outside the vocabulary [0, {vocab})")

    def _check_fits(self, prompt_len: int, max_tokens: int, params: SamplingParams) -> None:
        total = prompt_len + max_tokens
        if prompt_len == 0:
            raise ValueError("the prompt must contain at least one token")
        if max_tokens < 1:
            raise ValueError(f"the prompt ({prompt_len} tokens) leaves no room to generate within the engine's "
                             f"context, max_model_len {self.max_model_len}")
        if params.min_tokens > max_tokens:
            raise ValueError(f"min_tokens ({params.min_tokens}) exceeds the {max_tokens} tokens the context leaves "
                             f"after the prompt")
        if total > self.max_model_len:
            raise ValueError(f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) exceeds the engine's "
                             f"context, max_model_len {self.max_model_len}")
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

    def started_request_ids(self) -> set[str]:
        """Unfinished requests that have run in some step (running, swapped, or preempted with work
        done): what a step that failed half-way may have left half-updated."""
        s = self.scheduler
        return ({seq.request_id for seq in (*s.running.values(), *s.swapped)}
                | {seq.request_id for seq in s.waiting if seq.num_computed_tokens})

    def take_output(self, request_id: str) -> RequestOutput | None:
        """The RequestOutput of a request whose completions have all ended (or that was aborted), handed
        over once; None before that."""
        return self.output_processor.outputs.pop(request_id, None)

    # -- one step ------------------------------------------------------------------------------
    def step(self) -> list[StreamEvent]:
        """Schedule, run the model once, update, produce outputs; one StreamEvent per new token."""
        blocks_before = self.block_manager.pool.counters()
        t0 = time.perf_counter()
        scheduled = self.scheduler.schedule()
        t1 = time.perf_counter()
        result = self.runner.execute(scheduled)
        t2 = time.perf_counter()
        events, finished = self.process_output(scheduled, result)
        t3 = time.perf_counter()
        self._record(scheduled, result, finished, blocks_before, t0, t1 - t0, t3 - t2)
        return events

    def process_output(self, scheduled: SchedulerOutput,
                       result: ModelRunnerOutput) -> tuple[list[StreamEvent], list[str]]:
        """The second half of a step: the scheduler takes the runner's tokens, the output processor
        turns them into events; returns the events and the output ids that finished."""
        self.output_processor.add_prompt_logprobs(result.prompt_logprobs)
        updates = self.scheduler.update_from_output(scheduled, result)
        for update in updates:
            self.spec_stats.add(update.verified, len(update.new_token_ids))
        events, stopped = self.output_processor.process(updates)
        for seq_id in stopped:                         # a stop string, found in the text
            self.scheduler.finish(seq_id, "stop")
        finished = self.output_processor.release(self.scheduler.take_finished())
        return events + self.output_processor.final_events(), finished

    def _record(self, out: SchedulerOutput, result: ModelRunnerOutput, finished: list[str], blocks_before,
                start: float, schedule_s: float, output_s: float) -> None:
        pool, s = self.block_manager.pool, self.scheduler
        allocated, freed, shared, evicted = (now - then for now, then in zip(pool.counters(), blocks_before))
        verified = {v.seq_id: v for v in result.verified}
        self.trace.append(StepRecord(
            step=self._step, start_s=start, schedule_s=schedule_s, output_s=output_s,
            prepare_s=result.prepare_s, propose_s=result.propose_s, forward_s=result.forward_s,
            sample_s=result.sample_s, gpu_forward_s=result.gpu_forward_s, gpu_sample_s=result.gpu_sample_s,
            cuda_graph_batch=result.cuda_graph_batch, parallel=result.parallel,
            entries=[ScheduledEntry.of(r, verified.get(r.seq_id)) for r in out.scheduled],
            preempted=list(out.preempted), swapped_in=list(out.swapped_in), finished=finished,
            blocks_allocated=allocated, blocks_freed=freed, blocks_shared=shared,
            blocks_copied=len(out.blocks_to_copy), blocks_evicted=evicted,
            num_free_blocks=pool.num_free, num_blocks=pool.num_blocks,
            prefix_query_tokens=out.prefix_query_tokens, prefix_hit_tokens=out.prefix_hit_tokens,
            num_running=len(s.running), num_waiting=len(s.waiting), num_swapped=len(s.swapped)))
        self._step += 1

    def snapshot(self) -> EngineCounts:
        """Queues, KV blocks and the latest step's record, read between steps."""
        s, pool = self.scheduler, self.block_manager.pool
        return EngineCounts(self.trace.num_steps, len(s.running), len(s.waiting), len(s.swapped),
                            pool.num_blocks, pool.num_free, self.config.max_num_batched_tokens, self.trace.last)

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
