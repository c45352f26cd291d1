"""A separate, smaller draft model with the same tokenizer (SmolLM2-135M drafting for SmolLM2-1.7B).

Its KV cache is its own (different layers, heads and widths), but it is addressed by the *target's*
block tables: the draft cache has the same number of blocks of the same size, so the token at
position p of a sequence sits in slot block_ids[p // block_size] * block_size + p % block_size in
both caches. The block manager, prefix cache, copy-on-write and swapping then serve both at once;
the draft only has to compute every token the target computes:

    prefill / decode rows    the draft runs the same tokens at the same positions (no sampling)
    verify rows              the draft runs [x, t] at c - 1, c and drafts from t

x, the token before the newest, is recomputed because the draft may have missed it: when every draft
of the previous step was accepted, the last of them was computed by the target but never by the
draft (the draft only runs a token to guess the one after it). Recomputing a position the draft
already has writes the same values again. Prefix-cache hits are blocks both models computed, with
one exception left alone: a sequence that ended on an all-accepted step leaves that one position
unwritten in the draft cache, which can only lower a later request's acceptance, never change its
tokens (the target verifies everything).
"""
from __future__ import annotations

import torch

from ..core.records import ScheduledRequest, SchedulerOutput
from ..model.attention import PagedAttention
from ..model.llama import Llama
from ..worker.kv_cache import KVCache
from .model_drafter import ModelDrafter
from .proposer import DraftRequest


class DraftModelProposer(ModelDrafter):
    method = "draft_model"

    def __init__(self, draft: Llama, target_cache: KVCache, prepare_inputs, num_swap_blocks: int = 0):
        super().__init__(prepare_inputs)
        self.draft = draft
        self.kv_cache = KVCache(draft.config, target_cache.num_blocks, target_cache.block_size,
                                draft.embed.weight.dtype, target_cache.device, num_swap_blocks)
        self.attn = PagedAttention(self.kv_cache, draft.config.head_dim)

    def move_blocks(self, step: SchedulerOutput) -> None:
        """The same swaps and copy-on-write copies as the target's cache, in the same order."""
        self.kv_cache.swap_out(step.blocks_to_swap_out)
        self.kv_cache.swap_in(step.blocks_to_swap_in)
        self.kv_cache.copy_blocks(step.blocks_to_copy)

    def first_pass_row(self, r: DraftRequest) -> ScheduledRequest:
        tokens, start = self._catch_up(r.context_token_ids, r.start_pos)
        return ScheduledRequest(r.seq_id, "", "decode", tokens, start, r.block_ids, sample=True, sampling_params=r.params)

    @staticmethod
    def _catch_up(context: list[int], start_pos: int) -> tuple[list[int], int]:
        """[x, t] at c - 1, c: the newest token and the one before it (see the module docstring)."""
        back = 1 if start_pos >= 1 and len(context) >= 2 else 0
        return context[-1 - back:], start_pos - back

    def extra_rows(self, step: SchedulerOutput, drafting: set[int]) -> list[ScheduledRequest]:
        """Every row that does not draft this step: the draft computes its tokens too (a verify row's
        newest two, a record's own drafts included), and samples nothing."""
        rows = []
        for r in step.scheduled:
            if r.seq_id in drafting:
                continue
            if r.kind == "verify" and r.context_token_ids and not r.draft_token_ids:
                tokens, start = self._catch_up(r.context_token_ids, r.start_pos)
            else:
                tokens, start = r.token_ids + r.draft_token_ids, r.start_pos
            rows.append(ScheduledRequest(r.seq_id, "", r.kind, tokens, start, r.block_ids))
        return rows

    def forward_logits(self, inputs) -> torch.Tensor:
        hidden = self.draft(inputs.input_ids, inputs.positions, self.attn.bind(inputs.meta))
        if inputs.logits_indices.numel() == 0:
            return hidden.new_zeros((0, self.draft.config.vocab_size), dtype=torch.float32)
        return self.draft.compute_logits(hidden[inputs.logits_indices])
