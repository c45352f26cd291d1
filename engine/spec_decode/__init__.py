"""Speculative decoding: proposers guess, the target verifies k + 1 tokens in one pass, rejection
sampling keeps the output exactly the target's (chapter 18).

    proposer.py           the interface: DraftRequest in, Draft (token ids, probabilities or None) out
    ngram.py              prompt lookup: the tokens after the last earlier match of the recent suffix
    model_drafter.py      k batched draft passes through the paged machinery (the two model proposers)
    early_exit.py         the target's first L layers + its norm and LM head, in the target's KV cache
    draft_model.py        a separate small model with its own KV cache on the target's block tables
    speculator.py         the runner's half: drafts into the record before the pass, verdicts after
    rejection_sampler.py  greedy matching and exact rejection sampling
    stats.py              SpecDecodeStats, the closed form (1 - a^(k+1)) / (1 - a)
    factory.py            make_speculator: the proposer a config names, on the runner's parts; DraftModels

The settings (SpeculativeConfig) live in engine/config.py with the engine's other knobs; the
scheduler's half (lookahead slots, rollback) in core/scheduler.py and core/block_manager.py. This
package sits above worker/: the model proposers are made from the runner's parts, and the runner
only calls the Speculator it is handed.
"""
from ..config import SpeculativeConfig
from .stats import SpecDecodeStats, expected_speedup, expected_tokens_per_pass

__all__ = ["SpeculativeConfig", "SpecDecodeStats", "expected_tokens_per_pass", "expected_speedup"]
