"""ModelRunner: one SchedulerOutput in, one forward pass and its samples, one ModelRunnerOutput out.

It reads nothing but the record: no block manager, no live sequences. Every scheduled request
contributes its new tokens to one flat batch (no padding, except in a CUDA graph's batch):

    A: decode 1 token        input_ids        [ a7 | b0 b1 b2 b3 | c4 ]
    B: prefill chunk of 4    positions        [  7 |  0  1  2  3 |  4 ]
    C: decode 1 token        query_start_loc  [0, 1, 5, 6]
                             slot_mapping     block_ids[p // block_size] * block_size + p % block_size

Only a request with sample=True gets logits: its last token's row (plus one per draft token when
it verifies drafts). A middle chunk of a chunked prefill only fills the KV cache, unless its request
asked for prompt_logprobs: then every row that predicts a prompt token gets logits too.

On a GPU the step waits for the device once: inputs are written into pinned host memory and copied
in one non-blocking copy (step_buffer.py), the sampler runs on the device (sampler.sample_tokens),
and the only read back is the sampled token ids, with any log-probabilities asked for packed beside
them (sampler.token_logprobs). Decode batches replay a captured CUDA graph
(cuda_graphs.py), and so do verify batches (each row its newest token and k drafts, padded to k);
prefill and mixed batches run eagerly.

Speculative decoding (engine/spec_decode/) is handed in as a `speculator`: before the forward pass
it fills in each verify row's drafts (a new record with draft_token_ids), after it it judges each
verify row's k + 1 logits rows on the device (greedy match or rejection sampling, every row at once),
and those verdicts travel back in the step's one read with the plain draws. The runner knows only
four calls (forget, move_blocks, propose, verify_on_device): spec_decode builds its proposers
from the runner's parts (its model, KV cache and input preparation), so it sits above the runner.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.records import ModelRunnerOutput, ScheduledRequest, SchedulerOutput, TokenLogprobs
from ..model.attention import AttentionMetadata, PagedAttention
from ..loader.progress import log
from ..model.llama import Llama
from ..model.sampler import (SamplingBatch, SeededGenerators, logit_adjustments, sample_tokens, to_device,
                             token_logprobs, unpack_logprobs)
from .cuda_graphs import CudaGraph, DecodeGraphs, decode_plan, graph_batch_sizes
from .kv_cache import KVCache
from .step_buffer import StepBuffer, layout

_DRAW_FIELDS = ("sampled", "top_k", "temperature", "top_p", "min_p", "u")   # one entry per random draw


@dataclass(slots=True)
class StepInputs:
    input_ids: torch.Tensor        # [T] (T includes a CUDA graph's padding rows)
    positions: torch.Tensor        # [T]
    meta: AttentionMetadata
    logits_indices: torch.Tensor   # [L]: the hidden rows that get logits, in request order
    sampling: SamplingBatch        # one draw per sampled row (forked siblings draw from one row)
    draw_seq_ids: list[int] = field(default_factory=list)           # the sequence each draw belongs to
    verify: list[tuple[ScheduledRequest, int]] = field(default_factory=list)  # (request, first logits row)
    draw_logprobs: list[int | None] = field(default_factory=list)   # each draw's logprobs k (None: not asked)
    prompt_rows: list[PromptRows] = field(default_factory=list)     # chunks that score their prompt tokens


@dataclass(slots=True)
class PromptRows:
    """A chunk's rows that predict prompt tokens (prompt_logprobs): logits rows first .. first + len(targets)."""
    seq_id: int
    first_row: int                 # its first logits row
    first_position: int            # the prompt position of the token its first row predicts
    targets: list[int]             # the prompt tokens its rows predict, in order
    k: int                         # top tokens to report per position


class ModelRunner:
    def __init__(self, model: Llama, kv_cache: KVCache, max_num_tokens: int = 2048, max_num_seqs: int = 64,
                 max_model_len: int | None = None, cuda_graphs: bool = False, speculator=None,
                 num_speculative_tokens: int = 0):
        self.model, self.kv_cache = model, kv_cache
        self.speculator = speculator       # spec_decode's Speculator, or None: no verify rows expected
        self.device = kv_cache.device
        self.block_size = bs = kv_cache.block_size
        self.attn = PagedAttention(kv_cache, model.config.head_dim)   # built once, bound per step
        self.generators = SeededGenerators()
        # A CUDA graph's block table has one fixed width: enough blocks for the longest sequence.
        self.max_blocks_per_seq = -(-(max_model_len or model.config.max_position_embeddings) // bs)
        self.buffer = StepBuffer(self.device)
        # Room for the largest step, so no step reallocates (which would strand captured graphs): drafts
        # ride beside the token budget, and lookahead slots may add a block or two past max_model_len.
        # (A verify graph of s rows holds s * (k + 1) tokens, padding included.)
        n, s = max_num_tokens + max(8, num_speculative_tokens + 1) * max_num_seqs, max_num_seqs
        self.buffer.reserve(layout(dict(
            input_ids=n, positions=n, slot_mapping=n, seq_lens=s, query_start_loc=s + 1,
            block_tables=s * (self.max_blocks_per_seq + 8), logits_indices=n, sample_rows=s,
            **dict.fromkeys(_DRAW_FIELDS, s)))[1])
        self.graphs: DecodeGraphs | None = None
        self.verify_graphs: DecodeGraphs | None = None   # speculative decoding's verify steps, k drafts a row
        self.verify_k = 0
        self._graph_generation = -1
        if cuda_graphs and self.device.type == "cuda":
            self.capture_graphs(graph_batch_sizes(max_num_seqs))
            if num_speculative_tokens and self.graphs is not None:
                self.capture_verify_graphs(num_speculative_tokens, graph_batch_sizes(max_num_seqs))

    # -- CUDA graphs -------------------------------------------------------------------------------
    @torch.inference_mode()
    def capture_graphs(self, sizes: list[int], capture=CudaGraph) -> bool:
        """Capture decode graphs for these batch sizes (`capture` is swappable so CPU tests can stand in)."""
        cfg = self.model.config
        context = self.max_blocks_per_seq * self.block_size
        self.graphs = DecodeGraphs(
            self._graph_forward, lambda size: self.prepare_inputs(SchedulerOutput(), pad_to=size), sizes,
            lambda size: decode_plan(size, cfg.num_heads, cfg.num_kv_heads, context, self.device), capture)
        self._graph_generation = self.buffer.generation
        if not self.graphs.capture_all():
            self.graphs = None
        return self.graphs is not None

    @torch.inference_mode()
    def capture_verify_graphs(self, k: int, sizes: list[int], capture=CudaGraph) -> bool:
        """Capture verify graphs for k drafts a row (vLLM's uniform-decode graphs with spec tokens).

        A verify batch of B rows is B * (k + 1) tokens, row i at tokens i(k+1) .. i(k+1)+k whatever it
        drafted; the attention kernel reads each row's k + 1 queries through query_start_loc, on the
        device, so one capture serves every verify step of B rows. Only sizes whose inputs fit the
        step buffer as reserved are captured (growing it would strand the decode graphs)."""
        if self.graphs is None or k < 1:
            return False
        cfg = self.model.config
        fits = [b for b in sizes if layout(self._graph_fields(b, k)[0])[1] <= self.buffer.capacity]
        context = self._graph_fields(1, k)[1] * self.block_size
        self.verify_k = k
        self.verify_graphs = DecodeGraphs(
            lambda size: self._graph_forward(size, k),
            lambda size: self.prepare_inputs(SchedulerOutput(), pad_to=size, verify_k=k), fits,
            lambda size: decode_plan(size, cfg.num_heads, cfg.num_kv_heads, context, self.device, k + 1), capture)
        if not fits or not self.verify_graphs.capture_all():
            self.verify_graphs = None
        return self.verify_graphs is not None

    def _graph_fields(self, size: int, k: int = 0) -> tuple[dict[str, int], int]:
        """The sizes a graph of `size` rows reads, and its block-table width: a verify row's drafts may
        reach up to k slots past max_model_len's last block, so its table is that much wider."""
        width = self.max_blocks_per_seq + (-(-k // self.block_size) if k else 0)
        tokens = size * (k + 1)
        return dict(input_ids=tokens, positions=tokens, slot_mapping=tokens, seq_lens=size,
                    query_start_loc=size + 1, block_tables=size * width), width

    def _graph_forward(self, size: int, k: int = 0, num_layers: int | None = None) -> torch.Tensor:
        """Logits of every row of a decode batch of `size` (a verify batch: size * (k + 1) rows; an
        early-exit draft pass: the first num_layers layers), reading the step buffer's fixed addresses."""
        fields, width = self._graph_fields(size, k)
        v = self.buffer.views(layout(fields)[0])
        meta = AttentionMetadata(v["slot_mapping"], v["block_tables"].view(size, width),
                                 v["seq_lens"], v["query_start_loc"])
        hidden = self.model(v["input_ids"], v["positions"], self.attn.bind(meta), num_layers=num_layers)
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def capture_draft_graphs(self, num_layers: int, sizes: list[int] | None = None,
                             capture=CudaGraph) -> DecodeGraphs | None:
        """Decode graphs of the target's first num_layers layers, norm and LM head: an early-exit draft
        pass is a decode batch with the decode layout, so it replays at the same buffer addresses."""
        if self.graphs is None:
            return None
        graphs = DecodeGraphs(lambda size: self._graph_forward(size, 0, num_layers),
                              lambda size: self.prepare_inputs(SchedulerOutput(), pad_to=size),
                              sizes or self.graphs.sizes, lambda size: None, capture)
        return graphs if graphs.capture_all() else None

    def replay_draft(self, graphs: DecodeGraphs | None, out: SchedulerOutput) -> torch.Tensor | None:
        """The logits of a draft pass through capture_draft_graphs' graphs, or None: run it eagerly."""
        if graphs is None or self.buffer.generation != self._graph_generation or not all(
                r.num_tokens == 1 and r.sample and not r.draft_token_ids for r in out.scheduled):
            return None
        size = graphs.size_for(len(out.scheduled))
        if size is None:
            return None
        self.prepare_inputs(out, pad_to=size, draw=False)
        return graphs.replay(size)[:len(out.scheduled)]

    def graph_size_for(self, out: SchedulerOutput) -> int | None:
        """The captured batch size this step replays, or None to run it eagerly (prefill, mixed, too big)."""
        if self.graphs is None:
            return None
        if self.buffer.generation != self._graph_generation:     # the input buffer moved: graphs read stale memory
            log(f"CUDA graphs off, running eagerly (a step outgrew the input buffer: {self.buffer.capacity} bytes)")
            self.graphs = None
            return None
        if not all(r.num_tokens == 1 and r.sample and not r.draft_token_ids for r in out.scheduled):
            return None
        return self.graphs.size_for(len(out.scheduled))

    def verify_graph_size_for(self, out: SchedulerOutput) -> int | None:
        """The verify graph this step replays: every row one token (+ at most k drafts), some drafts."""
        if self.verify_graphs is None or self.buffer.generation != self._graph_generation:
            return None
        rows = out.scheduled
        if not any(r.draft_token_ids for r in rows) or not all(
                r.num_tokens == 1 and r.sample and not r.prompt_logprob_targets
                and len(r.draft_token_ids) <= self.verify_k for r in rows):
            return None
        return self.verify_graphs.size_for(len(rows))

    # -- inputs ------------------------------------------------------------------------------------
    def prepare_inputs(self, out: SchedulerOutput, pad_to: int | None = None, draw: bool = True,
                       verify_k: int | None = None) -> StepInputs:
        """Every tensor of the step, from the record alone, in one copy. With pad_to (a CUDA graph's
        batch size) the batch is padded to that many one-token rows and the block table is full width.
        With verify_k too, to that many rows of k + 1 tokens (a verify graph's layout: see below).
        draw=False: the forward's inputs and logits rows only, no sampler draws (a pipeline micro-batch,
        whose rows are sampled with the whole step's, so each seeded generator advances once)."""
        reqs, bs = out.scheduled, self.block_size
        lens = np.fromiter((r.num_tokens + len(r.draft_token_ids) for r in reqs), np.int64, len(reqs))
        starts = np.fromiter((r.start_pos for r in reqs), np.int64, len(reqs))
        S, T = len(reqs), int(lens.sum())
        B, Tp = (pad_to, pad_to) if pad_to else (S, T)
        W = self.max_blocks_per_seq if pad_to else max((len(r.block_ids) for r in reqs), default=0)
        logit_rows, draws, verify, prompt_rows = self._logits_and_draws(reqs, lens)
        if verify_k is not None:
            return self._prepare_verify_graph(out, pad_to, verify_k, lens, starts, logit_rows, draws, verify)
        if not draw:
            draws, verify, prompt_rows = [], [], []
        sampled = [i for i, (_, p, _, _, _) in enumerate(draws) if not p.greedy]
        h = self.buffer.begin(dict(
            input_ids=Tp, positions=Tp, slot_mapping=Tp, seq_lens=B, query_start_loc=B + 1, block_tables=B * W,
            logits_indices=len(logit_rows), sample_rows=len(draws), **dict.fromkeys(_DRAW_FIELDS, len(sampled))))

        qsl = h["query_start_loc"]
        qsl[0] = 0
        np.cumsum(lens, out=qsl[1:S + 1])
        qsl[S + 1:] = T + np.arange(1, B - S + 1)                 # padding rows: one token each
        h["seq_lens"][:S] = starts + lens
        h["seq_lens"][S:] = 1
        table = h["block_tables"].reshape(B, W)
        table.fill(0)                                             # unused entries: 0, never read
        for i, r in enumerate(reqs):
            table[i, :len(r.block_ids)] = r.block_ids
        h["input_ids"][:T] = [t for r in reqs for t in (r.token_ids + r.draft_token_ids)]
        owner = np.repeat(np.arange(S), lens)                     # the request of each token
        pos = (np.arange(T) - qsl[owner] + starts[owner]) if T != S else starts
        h["positions"][:T] = pos
        h["slot_mapping"][:T] = table[owner, pos // bs].astype(np.int64) * bs + pos % bs
        h["input_ids"][T:], h["positions"][T:], h["slot_mapping"][T:] = 0, 0, -1   # -1: write_kv skips it
        h["logits_indices"][:] = logit_rows
        h["sample_rows"][:] = [row for row, _, _, _, _ in draws]
        self._fill_draws(h, draws, sampled)
        return self._commit(B, W, draws, verify, prompt_rows)

    def _prepare_verify_graph(self, out: SchedulerOutput, B: int, K: int, lens: np.ndarray, starts: np.ndarray,
                              logit_rows: list[int], draws: list, verify: list) -> StepInputs:
        """A verify graph's inputs: B rows of R = K + 1 token slots each, whatever each row drafted.

            row i, slot j    token [t, d_1 … d_k, 0 …][j]   position start_i + j   seq_len start_i + R
            slot j > k_i     writes to slot -1 (nowhere): a padding query, its logits never read
            padding rows     token 0 at positions 0 … K, slot -1, block table all 0

        Every row's seq_len counts R queries, so the kernel's first query position is start_i for
        each; a row's real queries attend causally and never see its padding slots. The logits rows
        the sampler reads are the real ones, mapped into this layout (logits_indices)."""
        reqs, bs, R, S = out.scheduled, self.block_size, K + 1, len(out.scheduled)
        fields, W = self._graph_fields(B, K)
        sampled = [i for i, (_, p, _, _, _) in enumerate(draws) if not p.greedy]
        h = self.buffer.begin(dict(fields, logits_indices=len(logit_rows), sample_rows=len(draws),
                                   **dict.fromkeys(_DRAW_FIELDS, len(sampled))))
        h["query_start_loc"][:] = np.arange(B + 1) * R
        h["seq_lens"][:S] = starts + R
        h["seq_lens"][S:] = R
        table = h["block_tables"].reshape(B, W)
        table.fill(0)
        for i, r in enumerate(reqs):
            table[i, :len(r.block_ids)] = r.block_ids
        owner = np.repeat(np.arange(S), lens)                       # the request of each real token
        within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        at = owner * R + within                                     # each real token's slot in the layout
        base = np.zeros(B, np.int64)
        base[:S] = starts
        h["positions"][:] = np.repeat(base, R) + np.tile(np.arange(R), B)
        h["input_ids"].fill(0)
        h["input_ids"][at] = [t for r in reqs for t in (r.token_ids + r.draft_token_ids)]
        h["slot_mapping"].fill(-1)
        pos = starts[owner] + within
        h["slot_mapping"][at] = table[owner, pos // bs].astype(np.int64) * bs + pos % bs
        h["logits_indices"][:] = at[logit_rows]
        h["sample_rows"][:] = [row for row, _, _, _, _ in draws]
        self._fill_draws(h, draws, sampled)
        return self._commit(B, W, draws, verify, [])

    @staticmethod
    def _fill_draws(h: dict, draws: list, sampled: list[int]) -> None:
        h["sampled"][:] = sampled
        for j, i in enumerate(sampled):
            _, p, gen, _, _ = draws[i]
            h["temperature"][j], h["top_k"][j], h["top_p"][j], h["min_p"][j] = p.temperature, p.top_k, p.top_p, p.min_p
            h["u"][j] = torch.rand(1, generator=gen).item()       # the draw's number, from its own generator

    def _commit(self, B: int, W: int, draws: list, verify: list, prompt_rows: list) -> StepInputs:
        d = self.buffer.commit()
        meta = AttentionMetadata(d["slot_mapping"], d["block_tables"].view(B, W), d["seq_lens"], d["query_start_loc"])
        # biases, bans and penalties: small lists, copied without a wait (None when no draw has any)
        adjust = logit_adjustments([(p, r.banned_token_ids, r.prompt_token_ids, r.output_token_ids)
                                    for _, p, _, _, r in draws], self.device)
        sampling = SamplingBatch(d["sample_rows"], d["sampled"], d["temperature"], d["top_k"], d["top_p"],
                                 d["min_p"], d["u"], adjust)
        return StepInputs(d["input_ids"], d["positions"], meta, d["logits_indices"], sampling,
                          [seq_id for _, _, _, seq_id, _ in draws], verify,
                          [p.logprobs for _, p, _, _, _ in draws], prompt_rows)

    def _logits_and_draws(self, reqs: list[ScheduledRequest], lens: np.ndarray):
        """Hidden rows that get logits; each draw as (logits row, params, generator, seq_id, request); verify
        requests; the rows that score prompt tokens."""
        logit_rows, draws, verify, prompt_rows, end = [], [], [], [], 0
        for r, n in zip(reqs, lens.tolist()):
            end += n
            if r.prompt_logprob_targets:          # the chunk's first rows predict its next prompt tokens
                prompt_rows.append(PromptRows(r.seq_id, len(logit_rows), r.start_pos + 1, r.prompt_logprob_targets,
                                              r.prompt_logprobs))
                logit_rows += range(end - n, end - n + len(r.prompt_logprob_targets))
            if not r.sample:
                continue
            first = len(logit_rows)
            logit_rows += range(end - 1 - len(r.draft_token_ids), end)   # the last token, and every draft
            if r.draft_token_ids:
                verify.append((r, first))
                continue
            # n > 1: the forked siblings draw from the same row, each with its own generator
            for index, seq_id in enumerate([r.seq_id] + r.fork_seq_ids, start=r.sample_index):
                p = r.sampling_params
                gen = None if p.greedy or r.seed is None else self.generators.get(seq_id, r.seed + index,
                                                                                  r.num_output_tokens)
                draws.append((first, p, gen, seq_id, r))
        return logit_rows, draws, verify, prompt_rows

    # -- one step ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> ModelRunnerOutput:
        """Move blocks as the scheduler asked, run the model, sample.

        Order matters: swap-outs read blocks that this same step may hand to someone else, and
        copy-on-write reads blocks before anything is written into them.
        """
        t0 = time.perf_counter()
        spec = self.speculator
        for seq_id in out.finished_seq_ids:
            self.generators.forget(seq_id)
        if spec is not None:
            spec.forget(out.finished_seq_ids)
        self.kv_cache.swap_out(out.blocks_to_swap_out)
        self.kv_cache.swap_in(out.blocks_to_swap_in)
        self.kv_cache.copy_blocks(out.blocks_to_copy)
        if spec is not None:
            spec.move_blocks(out)
        if not out.scheduled:
            return ModelRunnerOutput()
        tp = time.perf_counter()
        if spec is not None:
            out = spec.propose(out)                 # verify rows get their drafts (a new record)
        propose_s = time.perf_counter() - tp
        graph_size = self.graph_size_for(out)
        verify_size = None if graph_size is not None else self.verify_graph_size_for(out)
        inputs = self.prepare_inputs(out, pad_to=graph_size or verify_size,
                                     verify_k=self.verify_k if verify_size is not None else None)
        timer = _GpuTimer(self.device)
        t1 = time.perf_counter()
        if graph_size is not None:
            logits = self.graphs.replay(graph_size)[:len(out.scheduled)]   # padding rows dropped
        elif verify_size is not None:                # the real rows of the B * (k + 1), in request order
            logits = self.verify_graphs.replay(verify_size).index_select(0, inputs.logits_indices)
        else:
            hidden = self.model(inputs.input_ids, inputs.positions, self.attn.bind(inputs.meta))
            # The LM head only for rows that are sampled: a 2,000-token prefill needs one row, not 2,000.
            logits = self.model.compute_logits(hidden[inputs.logits_indices]) if inputs.logits_indices.numel() else None
        timer.mark()
        t2 = time.perf_counter()
        result = ModelRunnerOutput(prepare_s=t1 - t0 - propose_s, forward_s=t2 - t1, propose_s=propose_s,
                                   cuda_graph_batch=graph_size or verify_size or 0)
        if logits is None:
            return result
        self.sample(out, inputs, logits, result, timer)
        if len(timer.events) < 3:                   # no plain draws (only verify rows): mark after them
            timer.mark()
        result.sample_s = time.perf_counter() - t2
        result.gpu_forward_s, result.gpu_sample_s = timer.elapsed()
        return result

    def sample(self, out: SchedulerOutput, inputs: StepInputs, logits: torch.Tensor,
               result: ModelRunnerOutput, timer: _GpuTimer | None = None) -> None:
        """Draw every sampled row on the device, then read the ids back: the step's one wait. Verify
        rows (1 + k logits rows each) are judged by the speculator: greedy match or rejection sampling."""
        if out.return_probs:
            result.sampled_probs = []
        pending = None
        if inputs.verify:
            if self.speculator is None:
                raise ValueError("a record with draft tokens reached a runner without a speculator")
            # judged on the device, every verify row at once; the verdicts ride in the step's one read
            pending = self.speculator.verify_on_device(logits, inputs.verify)
        if inputs.draw_seq_ids or inputs.prompt_rows or pending is not None:
            tail = self._sample_draws(out, inputs, logits, result, timer, pending.parts if pending else [])
        if pending is None:
            return
        verdicts = pending.finish(tail)
        for (r, _), v in zip(inputs.verify, verdicts):   # row j predicts the token after draft j - 1 (spec_decode/)
            tokens = r.draft_token_ids[:v.num_accepted] + [v.final_token_id]
            result.seq_ids.append(r.seq_id)
            result.sampled_token_ids.append(tokens)
            result.verified.append(v)
            if out.return_probs:
                result.sampled_probs.append(v.target_probs[:v.num_accepted] + [v.final_prob]
                                            if v.target_probs is not None else [1.0] * len(tokens))
            if result.sampled_logprobs is not None:
                result.sampled_logprobs.append(None)    # a request that asks for logprobs never speculates

    def _sample_draws(self, out: SchedulerOutput, inputs: StepInputs, logits: torch.Tensor,
                      result: ModelRunnerOutput, timer: _GpuTimer | None, extra: list[torch.Tensor]) -> list[float]:
        """Every plain draw and every prompt row scored, read back in one copy: token ids, their sampling
        probabilities (return_probs), the packed log-probabilities (float64 holds any token id), then
        `extra` (the speculator's verdicts), whose values are returned."""
        parts, n = [], len(inputs.draw_seq_ids)
        want = [(i, k) for i, k in enumerate(inputs.draw_logprobs) if k is not None]
        width = max([k for _, k in want] + [pr.k for pr in inputs.prompt_rows], default=0)
        if n:
            tokens, probs = sample_tokens(logits, inputs.sampling)
            parts += [tokens.double(), probs.double()] if out.return_probs else [tokens.double()]
            if want:
                draws = to_device([i for i, _ in want], torch.long, logits.device)
                parts.append(token_logprobs(logits[inputs.sampling.rows[draws]], tokens[draws], width).flatten())
        if inputs.prompt_rows:
            rows = [pr.first_row + j for pr in inputs.prompt_rows for j in range(len(pr.targets))]
            targets = [t for pr in inputs.prompt_rows for t in pr.targets]
            parts.append(token_logprobs(logits[to_device(rows, torch.long, logits.device)],
                                       to_device(targets, torch.long, logits.device), width).flatten())
        if timer is not None:
            timer.mark()                # before the read: once the values are here, this event has happened
        mine = sum(p.numel() for p in parts)
        values = torch.cat(parts + extra).tolist()
        values, tail = values[:mine], values[mine:]
        self.buffer.device_caught_up()
        ids, at = [int(t) for t in values[:n]], n
        if out.return_probs:
            result.sampled_probs = [[p] for p in values[n:2 * n]]
            at = 2 * n
        result.seq_ids = list(inputs.draw_seq_ids)
        result.sampled_token_ids = [[t] for t in ids]
        row = 2 + 2 * width

        def take(token_id: int, k: int) -> TokenLogprobs:
            nonlocal at
            at += row
            return unpack_logprobs(values[at - row:at], token_id, k, width)
        if want:
            result.sampled_logprobs = [None] * n
            for i, k in want:
                result.sampled_logprobs[i] = [take(ids[i], k)]
        for pr in inputs.prompt_rows:
            result.prompt_logprobs[pr.seq_id] = (pr.first_position, [take(t, pr.k) for t in pr.targets])
        return tail


class _GpuTimer:
    """Device time between marks, from CUDA events: read after the step's one wait, so reading them
    waits for nothing (None when they are not done, and always None on the CPU)."""

    def __init__(self, device: torch.device):
        self.on, self.events = device.type == "cuda", []
        self.mark()

    def mark(self) -> None:
        if self.on:
            self.events.append(torch.cuda.Event(enable_timing=True))
            self.events[-1].record()

    def elapsed(self) -> tuple[float | None, float | None]:
        e = self.events
        if len(e) < 3 or not e[-1].query():
            return None, None
        return e[0].elapsed_time(e[1]) / 1e3, e[1].elapsed_time(e[2]) / 1e3
