"""Early-exit self-drafting (LayerSkip-style): the target's own first L layers are the draft model.

    target   embed ─► layer 0 … layer L-1 ─► layer L … layer 29 ─► norm ─► LM head     (verifies)
    draft    embed ─► layer 0 … layer L-1 ───────────────────────► norm ─► LM head     (drafts)

Nothing extra is loaded: the draft is a prefix of the target's layers, then the target's own final
norm and LM head. It drafts well only if the model was trained to exit early (LayerSkip trains for
it); SmolLM2 was not, so its shallow layers guess the next token far less often than the whole
stack does. `python -m engine bench spec` measures how often.

Its KV cache is the target's own. Layer i of the draft *is* layer i of the target, so for every
token the target has already computed, the draft's layer-i keys and values are exactly the ones
in the target's cache: there is nothing to copy and nothing to keep in step. The draft reads those
slots, and writes its own guesses' K/V for layers 0..L-1 into the lookahead slots the scheduler
reserved. The verify pass that follows recomputes every layer for the newest token and the drafts
and writes over those slots before any query reads them, so the draft's writes never reach the
target's answer; a rejected guess's slots are simply written again later.

On a GPU each draft pass replays a CUDA graph of those L layers (ModelRunner.capture_draft_graphs):
a pass is a decode batch with the decode layout, so it reads the runner's step buffer at the
addresses the target's own decode graphs read, and costs about L/30 of a graphed decode step
instead of an eager pass's launches. The argmax of each pass is read back (the next pass needs it).
"""
from __future__ import annotations

import torch

from ..core.records import ScheduledRequest, SchedulerOutput
from ..model.attention import PagedAttention, PagedKV
from ..model.llama import Llama
from .model_drafter import ModelDrafter


class EarlyExitProposer(ModelDrafter):
    method = "early_exit"

    def __init__(self, model: Llama, kv_cache: PagedKV, num_layers: int, prepare_inputs, runner=None):
        super().__init__(prepare_inputs)
        if not 1 <= num_layers < model.config.num_layers:
            raise ValueError(f"early exit after {num_layers} of {model.config.num_layers} layers is not a draft")
        self.model, self.num_layers = model, num_layers
        self.attn = PagedAttention(kv_cache, model.config.head_dim)    # the target's cache, layers < L only
        self.runner = runner
        self.graphs = runner.capture_draft_graphs(num_layers) if runner is not None else None

    def draft_pass(self, rows: list[ScheduledRequest]) -> torch.Tensor:
        if self.runner is not None:
            logits = self.runner.replay_draft(self.graphs, SchedulerOutput(scheduled=rows))
            if logits is not None:
                return logits
        return super().draft_pass(rows)

    def forward_logits(self, inputs) -> torch.Tensor:
        hidden = self.model(inputs.input_ids, inputs.positions, self.attn.bind(inputs.meta), num_layers=self.num_layers)
        return self.model.compute_logits(hidden[inputs.logits_indices])
