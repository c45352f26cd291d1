"""Incremental detokenization: token ids in, text deltas out, with O(1) work per token (amortised).

Decoding all the ids so far on every token costs O(n) per token, O(n²) per request. Instead, only a
short window at the end is decoded twice per token:

    ids   ... 318  1110  262 | 3797 | 3290          prefix_offset  read_offset  len(ids)
                  already emitted   last emitted    new: not emitted yet
    text  = decode(ids[prefix_offset:]) minus decode(ids[prefix_offset:read_offset])

The window starts one emitted piece early, so a tokenizer that treats a first token differently
(a leading space) sees the same context both times. While a multi-byte character is only partly
generated the window decodes to a trailing U+FFFD; nothing is emitted until the rest arrives.

Stop strings: text that could still turn out to be the start of a stop string is held back (at most
len(stop) - 1 characters), so a stop string is never half-streamed; flush() hands the rest out when
the request ends for another reason.
"""
from __future__ import annotations

from .loader.tokenizer import TextTokenizer


class IncrementalDetokenizer:
    def __init__(self, tokenizer: TextTokenizer, stop: list[str] | None = None):
        self.tokenizer, self.stop = tokenizer, [s for s in (stop or []) if s]
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[int] = []
        self.text = ""               # everything decoded so far (cut before a stop string once found)
        self.num_emitted = 0         # characters of text already handed out as deltas
        self.stopped = False
        self.stop_string: str | None = None   # the stop string that ended the text, once found
        self._prefix_offset = self._read_offset = 0

    def add(self, token_id: int, check_stop: bool = True) -> str:
        """Append a token; return the newly completed text that is safe to show. Sets `stopped` when a
        stop string appears (the stop string and anything after it are never emitted); with
        check_stop=False (min_tokens not reached yet) the new text is not searched."""
        self.ids.append(token_id)
        piece = self._decode_new(final=False)
        if not piece:
            return ""                 # a character is only partly generated: wait for the rest
        searched_from = max(0, len(self.text) - self._hold)    # a stop string may straddle the old end
        self.text += piece
        for s in self.stop if check_stop else ():
            at = self.text.find(s, searched_from)
            if at != -1:
                self.text, self.stopped, self.stop_string = self.text[:at], True, s
                return self._emit(len(self.text))
        return self._emit(len(self.text) - self._hold)

    def flush(self) -> str:
        """The request is over: the held-back rest of the text, and a character left half generated
        (as U+FFFD, as a full decode shows it)."""
        if not self.stopped:
            self.text += self._decode_new(final=True)
        return self._emit(len(self.text))

    def _decode_new(self, final: bool) -> str:
        """Text of the ids after read_offset, decoded in the window that starts at prefix_offset."""
        if self._read_offset == len(self.ids):
            return ""
        decode = self.tokenizer.decode
        prefix = decode(self.ids[self._prefix_offset:self._read_offset], skip_special_tokens=True) \
            if self._read_offset > self._prefix_offset else ""
        window = decode(self.ids[self._prefix_offset:], skip_special_tokens=True)
        if not final and (len(window) <= len(prefix) or window.endswith("\ufffd")):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
        return window[len(prefix):]

    @property
    def emitted_text(self) -> str:
        return self.text[:self.num_emitted]

    def _emit(self, upto: int) -> str:
        upto = max(upto, self.num_emitted)
        delta, self.num_emitted = self.text[self.num_emitted:upto], upto
        return delta
