"""ModelRunner: turn one SchedulerOutput into one forward pass, and return the logits to sample.

Every scheduled sequence contributes its new tokens to one flat batch (no padding):

    seq A: decode 1 token      input_ids  [ a7 | b0 b1 b2 b3 | c4 ]
    seq B: prefill chunk of 4  positions  [  7 |  0  1  2  3 |  4 ]
    seq C: decode 1 token      query_start_loc [0, 1, 5, 6]

Only a sequence whose new tokens reach its last known token gets a logits row (a decode, or the
final chunk of a prefill); a middle chunk of a chunked prefill only fills the KV cache.
"""
from __future__ import annotations

import torch

from .attention import AttentionMetadata, PagedAttention
from .block_manager import BlockManager
from .kv_cache import KVCache
from .model import Llama
from .scheduler import SchedulerOutput
from .sequence import Sequence


class ModelRunner:
    def __init__(self, model: Llama, kv_cache: KVCache, block_manager: BlockManager):
        self.model, self.kv_cache, self.block_manager = model, kv_cache, block_manager
        self.device = kv_cache.device
        self.block_size = kv_cache.block_size

    def prepare(self, out: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int], list[Sequence]]:
        input_ids, positions, slots, tables, seq_lens, qsl = [], [], [], [], [], [0]
        logit_rows, sampled = [], []
        bs = self.block_size
        for s in out.scheduled:
            seq, start = s.seq, s.seq.num_computed_tokens
            end = start + s.num_new_tokens
            table = self.block_manager.block_ids(seq.seq_id)
            input_ids += seq.token_ids[start:end]
            positions += range(start, end)
            slots += [table[p // bs] * bs + p % bs for p in range(start, end)]
            tables.append(table)
            seq_lens.append(end)
            qsl.append(qsl[-1] + s.num_new_tokens)
            if end == seq.num_tokens:          # reaches the newest token: sample what comes next
                logit_rows.append(qsl[-1] - 1)
                sampled.append(seq)
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        dev, i32 = self.device, torch.int32
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            block_tables=torch.tensor(padded, dtype=i32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=i32, device=dev),
            query_start_loc=torch.tensor(qsl, dtype=i32, device=dev),
        )
        ids = torch.tensor(input_ids, dtype=torch.long, device=dev)
        pos = torch.tensor(positions, dtype=torch.long, device=dev)
        return ids, pos, meta, logit_rows, sampled

    @torch.inference_mode()
    def execute(self, out: SchedulerOutput) -> tuple[torch.Tensor | None, list[Sequence]]:
        """Move blocks as the scheduler asked, run the model, return (logits [R, vocab], their sequences).

        Order matters: swap-outs read blocks that this same step may hand to someone else, and
        copy-on-write reads blocks before anything is written into them.
        """
        self.kv_cache.swap_out(out.blocks_to_swap_out)
        self.kv_cache.swap_in(out.blocks_to_swap_in)
        self.kv_cache.copy_blocks(out.blocks_to_copy)
        if not out.scheduled:
            return None, []
        ids, pos, meta, rows, sampled = self.prepare(out)
        attn = PagedAttention(self.kv_cache, meta, self.model.config.head_dim)
        hidden = self.model(ids, pos, attn)
        if not rows:
            return None, []
        # The LM head only for rows that are sampled: a 2,000-token prefill needs one row, not 2,000.
        logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
        return logits, sampled
