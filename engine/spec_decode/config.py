"""SpeculativeConfig: which proposer drafts, and how many tokens it may guess per step.

The dictionary uses vLLM's names, so the same settings read the same in both engines:

    {"method": "ngram",       "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    {"method": "early_exit",  "num_speculative_tokens": 4, "num_layers": 8}
    {"method": "draft_model", "num_speculative_tokens": 4, "model": "path/to/small-model"}

A wrong field is refused here, with its name, before any model is loaded.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

METHODS = ("ngram", "early_exit", "draft_model")
MAX_SPECULATIVE_TOKENS = 16     # a verify row is 1 + k query tokens; past ~8 the last drafts almost never survive


@dataclass(slots=True, frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int = 1          # ngram: shortest suffix worth matching
    prompt_lookup_max: int = 4          # ngram: longest suffix tried first
    num_layers: int | None = None       # early_exit: how many of the target's layers draft
    model: str | None = None            # draft_model: a GGUF file or Hugging Face folder

    @classmethod
    def from_dict(cls, d: "dict | SpeculativeConfig") -> "SpeculativeConfig":
        if isinstance(d, SpeculativeConfig):
            return d
        if not isinstance(d, dict):
            raise ValueError(f"speculative_config must be a dict, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"speculative_config: unknown field(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        for name in ("method", "num_speculative_tokens"):
            if name not in d:
                raise ValueError(f"speculative_config: '{name}' is required")
        config = cls(**d)
        config.check()
        return config

    def check(self) -> None:
        def bad(field: str, why: str):
            raise ValueError(f"speculative_config: '{field}' {why}, got {getattr(self, field)!r}")

        if self.method not in METHODS:
            bad("method", f"must be one of {', '.join(METHODS)}")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            bad("num_speculative_tokens", f"must be an integer from 1 to {MAX_SPECULATIVE_TOKENS}")
        for name in ("prompt_lookup_min", "prompt_lookup_max"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad(name, "must be a positive integer")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            bad("prompt_lookup_min", f"must not exceed prompt_lookup_max ({self.prompt_lookup_max})")
        if self.method == "early_exit":
            if self.num_layers is None:
                bad("num_layers", "is required for method 'early_exit'")
            if not isinstance(self.num_layers, int) or isinstance(self.num_layers, bool) or self.num_layers < 1:
                bad("num_layers", "must be a positive integer")
        elif self.num_layers is not None:
            bad("num_layers", f"is only for method 'early_exit', not {self.method!r}")
        if self.method == "draft_model":
            if not self.model or not isinstance(self.model, str):
                bad("model", "is required for method 'draft_model' (a GGUF file or Hugging Face folder)")
        elif self.model is not None:
            bad("model", f"is only for method 'draft_model', not {self.method!r}")

    def check_against(self, num_target_layers: int) -> None:
        """What needs the target: an early exit must leave at least one layer out."""
        if self.method == "early_exit" and self.num_layers >= num_target_layers:
            raise ValueError(f"speculative_config: 'num_layers' must be below the target's {num_target_layers} "
                             f"layers (an exit after every layer is the target itself), got {self.num_layers}")

    @property
    def context_needed(self) -> int | None:
        """How many of a sequence's latest tokens the proposer reads (None = all of them)."""
        return {"ngram": None, "early_exit": 1, "draft_model": 2}[self.method]

    def to_dict(self) -> dict:
        d = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.method == "ngram":
            d |= {"prompt_lookup_min": self.prompt_lookup_min, "prompt_lookup_max": self.prompt_lookup_max}
        elif self.method == "early_exit":
            d["num_layers"] = self.num_layers
        else:
            d["model"] = self.model
        return d
