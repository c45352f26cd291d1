"""LLMEngine: add requests, call step() until nothing is left, read the tokens as they come.

One step:

    Scheduler.schedule()  ─►  ModelRunner.execute()  ─►  sample  ─►  append, stop checks, outputs
    who runs, how many        swaps, copy-on-write,      one token     finished sequences free
    tokens, which blocks      one forward pass           per row       their blocks at once

and a StepRecord of it goes into the trace. The engine is not thread-safe: one thread calls
add_request / step / abort (LLM runs a loop thread for that and feeds streams from it).
"""
from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Hashable

import torch

from .block_manager import AllocatorState, BlockManager
from .config import EngineConfig
from .detokenizer import IncrementalDetokenizer
from .kv_cache import KVCache, num_blocks_for
from .model import Llama
from .model_runner import ModelRunner
from .outputs import RequestMetrics, RequestOutput, StreamEvent
from .sampler import make_generator, sample
from .sampling_params import SamplingParams
from .scheduler import Scheduler, SchedulerOutput
from .sequence import Sequence, SequenceStatus
from .trace import ScheduledEntry, StepRecord, StepTrace

MAX_KEPT_OUTPUTS = 1024     # finished outputs waiting for take_output(); the oldest are dropped


class LLMEngine:
    def __init__(self, model: Llama, config: EngineConfig | None = None, tokenizer=None,
                 static_batching: bool = False):
        self.model, self.tokenizer = model, tokenizer
        self.config = config = config or EngineConfig()
        weight = model.embed.weight
        self.device, self.dtype = weight.device, weight.dtype
        num_blocks = num_blocks_for(model.config, config.block_size, self.dtype, self.device,
                                    config.num_kv_blocks, config.kv_cache_bytes)
        if config.num_kv_blocks is None:    # a memory budget: never more than the batch could ever fill
            full_batch = config.max_num_seqs * -(-min(config.max_model_len, model.config.max_position_embeddings)
                                                 // config.block_size)
            num_blocks = min(num_blocks, full_batch)
        num_swap = config.swap_space_blocks if config.preemption_mode == "swap" else 0
        self.block_manager = BlockManager(num_blocks, config.block_size, config.enable_prefix_caching, num_swap)
        self.kv_cache = KVCache(model.config, num_blocks, config.block_size, self.dtype, self.device, num_swap)
        self.scheduler = Scheduler(config, self.block_manager, static_batching)
        self.runner = ModelRunner(model, self.kv_cache, self.block_manager)
        self.trace = StepTrace(config.trace_capacity)
        self.max_model_len = min(config.max_model_len, model.config.max_position_embeddings)
        stop = {model.config.eos_token_id, getattr(tokenizer, "eos_token_id", None)}
        self.eos_token_ids = frozenset(i for i in stop if i is not None)
        self._seq_ids = itertools.count()
        self._requests: dict[str, list[Sequence]] = {}          # unfinished request id -> its samples
        self._detok: dict[int, IncrementalDetokenizer] = {}
        self._outputs: OrderedDict[str, RequestOutput] = OrderedDict()
        self._padding_events: dict[int, StreamEvent] = {}   # static batching: final events held back
        self._step = 0

    # -- requests ------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None,
                    arrival_s: float | None = None, prompt_text: str | None = None) -> list[str]:
        """Queue a request; returns the ids its outputs will carry (request_id, or request_id:i for n > 1).

        `prompt` is text (tokenized here) or token ids; `prompt_text` names the text that token ids
        came from, for the RequestOutput."""
        params = params or SamplingParams()
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already running")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer; pass token ids instead")
            text, ids = prompt, self.tokenizer.encode(prompt).ids
        else:
            text, ids = prompt_text, list(prompt)
        self._check_fits(len(ids), params)
        seq = Sequence(next(self._seq_ids), request_id, ids, params,
                       arrival_s if arrival_s is not None else time.perf_counter(),
                       generator=make_generator(params.seed), prompt=text, num_samples_to_fork=params.n - 1)
        self._requests[request_id] = [seq]
        self._detok[seq.seq_id] = self._new_detok(params)
        self.scheduler.add(seq)
        return [self._output_id(request_id, i, params.n) for i in range(params.n)]

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

    def _new_detok(self, params: SamplingParams) -> IncrementalDetokenizer | None:
        return IncrementalDetokenizer(self.tokenizer, params.stop) if self.tokenizer is not None else None

    @staticmethod
    def _output_id(request_id: str, index: int, n: int) -> str:
        return request_id if n == 1 else f"{request_id}:{index}"

    def abort(self, request_id: str) -> None:
        """Stop a request wherever it is (waiting, running, swapped); its blocks are freed at once."""
        for seq in self._requests.pop(request_id, []):
            if not seq.is_finished:
                seq.finish_reason = "abort"
                self._release(seq, time.perf_counter())

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def unfinished_request_ids(self) -> list[str]:
        return list(self._requests)

    def take_output(self, output_id: str) -> RequestOutput | None:
        """The RequestOutput of a finished (or aborted) sample, handed over once."""
        return self._outputs.pop(output_id, None)

    # -- one step ------------------------------------------------------------------------------
    def step(self) -> list[StreamEvent]:
        """Schedule, run the model once, sample; returns one StreamEvent per token generated."""
        pool = self.block_manager.pool
        before = (pool.num_allocated, pool.num_freed, pool.num_shared, pool.num_evicted)
        t0 = time.perf_counter()
        out = self.scheduler.schedule()
        t1 = time.perf_counter()
        logits, sampled = self.runner.execute(out)
        entries = [ScheduledEntry(self._name(s.seq), s.seq.seq_id, s.kind, s.num_new_tokens,
                                  s.seq.num_computed_tokens, s.num_cached_tokens) for s in out.scheduled]
        for s in out.scheduled:
            s.seq.num_computed_tokens += s.num_new_tokens
            self.block_manager.cache_full_blocks(s.seq.seq_id, s.seq.token_ids, s.seq.num_computed_tokens)
        t2 = time.perf_counter()
        events, finished = self._sample_and_append(logits, sampled) if logits is not None else ([], [])
        for seq, _ in out.preempted:
            if seq.is_padding:          # static batching: a finished request lost its seat, so it is done
                events.append(self._padding_events[seq.seq_id])
                finished.append(self._release(seq, time.perf_counter()))
        t3 = time.perf_counter()
        self._record(out, entries, finished, before, t0, t1 - t0, t2 - t1, t3 - t2)
        return events

    def _sample_and_append(self, logits: torch.Tensor, sampled: list[Sequence]):
        rows, seqs = [], []
        for row, seq in enumerate(sampled):
            for s in [seq] + self._fork(seq):      # n > 1: the samples draw from the same logits row
                rows.append(row)
                seqs.append(s)
        tokens = sample(logits[rows], [s.params for s in seqs], [s.generator for s in seqs])
        now = time.perf_counter()
        events, finished = [], []
        for seq, token in zip(seqs, tokens):
            seq.append_token(token, now)
            if seq.is_padding:
                if seq.num_tokens >= self.max_model_len:           # padding cannot go on: release it
                    events.append(self._padding_events[seq.seq_id])
                    finished.append(self._release(seq, now))
                continue
            event = self._check_stop(seq, token)
            if event.finished and self.scheduler.static_batching:
                seq.num_output_tokens_final = len(seq.output_token_ids)   # keep computing: no early exit
                self._padding_events[seq.seq_id] = event
                continue
            if event.finished:
                finished.append(self._release(seq, now))
            events.append(event)
        if self.scheduler.static_batching and self.scheduler.running and \
                all(s.is_padding for s in self.scheduler.running.values()):
            for seq in list(self.scheduler.running.values()):         # the batch is over: release everyone
                events.append(self._padding_events.pop(seq.seq_id))
                finished.append(self._release(seq, now))
        return events, finished

    def _fork(self, seq: Sequence) -> list[Sequence]:
        """The first time a prompt is complete, its other n - 1 samples split off, sharing its blocks."""
        if seq.num_samples_to_fork == 0:
            return []
        children = []
        for i in range(1, seq.num_samples_to_fork + 1):
            seed = None if seq.params.seed is None else seq.params.seed + i
            child = Sequence(next(self._seq_ids), seq.request_id, seq.prompt_token_ids, seq.params, seq.arrival_s,
                             sample_index=i, generator=make_generator(seed), prompt=seq.prompt,
                             token_ids=list(seq.token_ids), num_computed_tokens=seq.num_computed_tokens)
            self.block_manager.fork(seq.seq_id, child.seq_id)
            self.scheduler.add_running(child)
            self._requests[seq.request_id].append(child)
            self._detok[child.seq_id] = self._new_detok(seq.params)
            children.append(child)
        seq.num_samples_to_fork = 0
        return children

    def _check_stop(self, seq: Sequence, token: int) -> StreamEvent:
        detok, p = self._detok[seq.seq_id], seq.params
        is_eos = token in self.eos_token_ids and not p.ignore_eos
        delta = detok.add(token) if detok is not None and not is_eos else ""
        if is_eos or (detok is not None and detok.stopped):
            seq.finish_reason = "stop"
        elif len(seq.output_token_ids) >= p.max_tokens or seq.num_tokens >= self.max_model_len:
            seq.finish_reason = "length"
        seq.text = detok.text if detok is not None else ""
        return StreamEvent(self._name(seq), token, delta, seq.text, seq.finish_reason is not None, seq.finish_reason)

    def _release(self, seq: Sequence, now: float) -> str:
        """Finish one sample: free its blocks, keep its RequestOutput for take_output()."""
        self.scheduler.finish(seq)
        seq.finished_s = now
        self._detok.pop(seq.seq_id, None)
        self._padding_events.pop(seq.seq_id, None)
        name = self._name(seq)
        metrics = RequestMetrics(seq.arrival_s, seq.first_token_s, list(seq.token_times_s), now)
        self._outputs[name] = RequestOutput(name, seq.prompt or "", seq.text, seq.output_token_ids,
                                            seq.finish_reason, metrics, list(seq.prompt_token_ids))
        while len(self._outputs) > MAX_KEPT_OUTPUTS:
            self._outputs.popitem(last=False)
        samples = self._requests.get(seq.request_id, [])
        if samples and all(s.is_finished for s in samples) and samples[0].num_samples_to_fork == 0:
            del self._requests[seq.request_id]
        return name

    def _name(self, seq: Sequence) -> str:
        return self._output_id(seq.request_id, seq.sample_index, seq.params.n)

    # -- trace & introspection -----------------------------------------------------------------
    def _record(self, out: SchedulerOutput, entries, finished, before, start, sched_s, fwd_s, sample_s) -> None:
        pool, s = self.block_manager.pool, self.scheduler
        alloc, freed, shared, evicted = before
        self.trace.append(StepRecord(
            step=self._step, start_s=start, schedule_s=sched_s, forward_s=fwd_s, sample_s=sample_s,
            entries=entries, num_batched_tokens=out.num_batched_tokens,
            num_prefill_tokens=sum(e.num_tokens for e in entries if e.kind == "prefill"),
            num_decode_tokens=sum(e.num_tokens for e in entries if e.kind == "decode"),
            preempted=[(self._name(q), mode) for q, mode in out.preempted],
            swapped_in=[self._name(q) for q in out.swapped_in], finished=finished,
            blocks_allocated=pool.num_allocated - alloc, blocks_freed=pool.num_freed - freed,
            blocks_shared=pool.num_shared - shared, blocks_copied=len(out.blocks_to_copy),
            blocks_evicted=pool.num_evicted - evicted, num_free_blocks=pool.num_free, num_blocks=pool.num_blocks,
            prefix_query_tokens=out.prefix_query_tokens, prefix_hit_tokens=out.prefix_hit_tokens,
            num_running=len(s.running), num_waiting=len(s.waiting), num_swapped=len(s.swapped)))
        self._step += 1

    def allocator_state(self) -> AllocatorState:
        """The block manager's state with owners named by output id instead of internal sequence id."""
        names: dict[Hashable, str] = {seq.seq_id: self._name(seq) for seqs in self._requests.values() for seq in seqs}
        state = self.block_manager.state()
        for block in state.blocks:
            block.owners = [names.get(o, o) for o in block.owners]
        state.tables = {names.get(o, o): t for o, t in state.tables.items()}
        state.swapped = {names.get(o, o): t for o, t in state.swapped.items()}
        return state

    def num_free_blocks(self) -> int:
        return self.block_manager.num_free_blocks

    def sequence_status(self, output_id: str) -> SequenceStatus | None:
        request_id = output_id.rsplit(":", 1)[0] if output_id not in self._requests else output_id
        for seq in self._requests.get(request_id, []):
            if self._name(seq) == output_id:
                return seq.status
        return None
