"""Incremental detokenization: turn a growing list of token ids into text deltas and apply stop strings."""
from __future__ import annotations

from .tokenizer import TextTokenizer


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TextTokenizer, stop: list[str] | None = None):
        self.tokenizer, self.stop = tokenizer, [s for s in (stop or []) if s]
        self.ids: list[int] = []
        self.text = ""
        self.stopped = False

    def add(self, token_id: int) -> str:
        """Append a token; return the newly completed text. Sets `stopped` when a stop string appears
        (the stop string and anything after it are not emitted)."""
        self.ids.append(token_id)
        full = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if full.endswith("\ufffd"):       # a multi-byte character is only partly generated: wait for the rest
            return ""
        for s in self.stop:
            # only look where the stop string could newly appear
            at = full.find(s, max(0, len(self.text) - len(s) + 1))
            if at != -1:
                full, self.stopped = full[:at], True
                break
        delta = full[len(self.text):] if full.startswith(self.text) else full
        self.text = full
        return delta
