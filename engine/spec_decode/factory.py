"""make_proposer: the proposer a SpeculativeConfig names, wired to the runner it drafts for."""
from __future__ import annotations

from ..model.llama import Llama
from .config import SpeculativeConfig
from .draft_model import DraftModelProposer
from .early_exit import EarlyExitProposer
from .ngram import NgramProposer


def make_proposer(spec: SpeculativeConfig, runner, draft_model: Llama | None = None, num_swap_blocks: int = 0):
    """`runner` is the target's ModelRunner: the model proposers build their inputs with its
    prepare_inputs and write into its KV cache (early exit) or one laid out like it (draft model)."""
    if spec.method == "ngram":
        return NgramProposer(spec.prompt_lookup_min, spec.prompt_lookup_max)
    if spec.method == "early_exit":
        return EarlyExitProposer(runner.model, runner.kv_cache, spec.num_layers, runner.prepare_inputs)
    if draft_model is None:
        raise ValueError("speculative_config: method 'draft_model' needs the draft loaded: LLM loads 'model' "
                         "for you; an LLMEngine takes it as draft_model=")
    target = runner.model.config
    if draft_model.config.vocab_size != target.vocab_size:
        raise ValueError(f"speculative_config: 'model' has a vocabulary of {draft_model.config.vocab_size} tokens, "
                         f"the target {target.vocab_size}: a draft must share the target's tokenizer")
    if draft_model.embed.weight.device != runner.model.embed.weight.device:
        raise ValueError("speculative_config: the draft model must sit on the target's device")
    return DraftModelProposer(draft_model, runner.kv_cache, runner.prepare_inputs, num_swap_blocks)
