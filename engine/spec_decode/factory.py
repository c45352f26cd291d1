"""Setting speculative decoding up: the proposer a SpeculativeConfig names, wired to the runner it
drafts for, and the draft models it loads (once each, whatever number of engines use them).

    LLMEngine  ─ builds ─►  ModelRunner  ─ its model, KV cache, prepare_inputs ─►  make_speculator
               ◄───────────────────── Speculator(proposer), handed to the runner ──────────┘
"""
from __future__ import annotations

from pathlib import Path

from ..config import EngineConfig, SpeculativeConfig
from ..loader.model_loader import load_llama
from ..loader.tokenizer import TextTokenizer
from ..model.llama import Llama
from .draft_model import DraftModelProposer
from .early_exit import EarlyExitProposer
from .ngram import NgramProposer
from .proposer import Proposer
from .rule import SpeculationRule
from .speculator import Speculator


def make_speculator(spec: SpeculativeConfig | None, runner, draft_model: Llama | None = None,
                    num_swap_blocks: int = 0, proposer: Proposer | None = None) -> Speculator:
    """The runner's half of speculative decoding. `proposer` replaces the one `spec` names (the tests
    and `bench spec` plug in an oracle with a known acceptance rate that way); with neither, the
    speculator drafts nothing and only verifies the drafts a record brings."""
    if proposer is None and spec is not None:
        proposer = make_proposer(spec, runner, draft_model, num_swap_blocks)
    return Speculator(proposer, SpeculationRule.from_config(spec, draft_cost(spec, runner.model, draft_model)
                                                            if proposer is not None else 0.0))


def draft_cost(spec: SpeculativeConfig | None, target: Llama, draft_model: Llama | None = None) -> float:
    """A guessed token's cost in target decode steps, by the weights it reads (decode is memory-bound):
    an n-gram lookup 0, early exit L of the target's layers, a draft model its size over the target's."""
    if spec is None or spec.method == "ngram":
        return 0.0
    if spec.method == "early_exit":
        return spec.num_layers / target.config.num_layers
    if draft_model is None or draft_model is target:
        return 1.0
    size = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return size(draft_model) / size(target)


def make_proposer(spec: SpeculativeConfig, runner, draft_model: Llama | None = None, num_swap_blocks: int = 0):
    """`runner` is the target's ModelRunner: the model proposers build their inputs with its
    prepare_inputs and write into its KV cache (early exit) or one laid out like it (draft model)."""
    if spec.method == "ngram":
        return NgramProposer(spec.prompt_lookup_min, spec.prompt_lookup_max)
    if spec.method == "early_exit":
        return EarlyExitProposer(runner.model, runner.kv_cache, spec.num_layers, runner.prepare_inputs, runner)
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


class DraftModels:
    """The draft models that draft_model configs name, for one target: each loaded once, on the
    target's device and in its dtype, and kept (the shared engine and every sandbox reuse it)."""

    def __init__(self, target: Llama, tokenizer: TextTokenizer, source: Path | None):
        self.target, self.tokenizer, self.source = target, tokenizer, source
        self._loaded: dict[str, Llama] = {}

    def for_config(self, config: EngineConfig) -> Llama | None:
        """The draft for `config`'s speculative_config (None unless its method is draft_model)."""
        spec = config.speculative_config
        if spec is None or spec.method != "draft_model":
            return None
        key = str(Path(spec.model).expanduser().resolve())
        if self.source is not None and key == str(Path(self.source).resolve()):
            return self.target                      # the target drafting for itself: a perfect, costly draft
        if key not in self._loaded:
            draft, tokenizer, _ = load_llama(spec.model)
            probe = "def f(x):\n    return x + 1  # Hello, world!"
            if tokenizer.encode_ids(probe) != self.tokenizer.encode_ids(probe):
                raise ValueError(f"speculative_config: 'model' {spec.model} does not use the target's tokenizer")
            weight = self.target.embed.weight
            self._loaded[key] = draft.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
        return self._loaded[key]
