"""N-gram prompt lookup: guess that the text repeats itself.

Take the last n tokens of the sequence (n from prompt_lookup_max down to prompt_lookup_min), find
the most recent earlier place where the same n tokens occur, and propose the tokens that followed
there. Code that reuses names, an answer quoting its question, a list that keeps its pattern:

    context   ... def area ( r ) : return 3.14 * r * r  \\n  def volume ( r ) : return 3.14 * r
    suffix                                                                          3.14 * r
    earlier match            ... return [3.14 * r] * r \\n def ...
    proposal                                  * r \\n def                      (k = 4)

It costs no model pass, only a search over the token ids (bytes.rfind over the ids packed as int32:
a few microseconds for a thousand tokens), and it names tokens without probabilities: a point-mass draft,
which rejection sampling treats as q = 1 on the guess. Open prose rarely repeats 2+ tokens exactly,
so there it mostly finds nothing, and the row is a plain decode.
"""
from __future__ import annotations

from array import array

from ..core.records import SchedulerOutput
from .proposer import Draft, DraftRequest


def ngram_lookup(tokens: list[int], k: int, n_min: int, n_max: int) -> list[int]:
    """The tokens after the most recent earlier occurrence of the longest matching suffix (up to k).

    An occurrence followed by k whole tokens is preferred: in a loop ("7 7 7 7") the most recent one
    overlaps the suffix and has a single token after it."""
    length = len(tokens)
    packed = array("i", tokens).tobytes()           # 4 bytes a token: a C-speed substring search
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        suffix = packed[4 * (length - n):]
        for end in (length - k, length - 1):        # where the match must end: k tokens before the last, then 1
            if end >= n and (start := _rfind_token(packed, suffix, end)) is not None:
                return tokens[start + n:start + n + k]
    return []


def _rfind_token(packed: bytes, pattern: bytes, end: int) -> int | None:
    """The last token index where `pattern` starts and ends by token `end`, aligned on a token."""
    stop = 4 * end
    while (at := packed.rfind(pattern, 0, stop)) != -1:
        if at % 4 == 0:                             # aligned on a token, not straddling two
            return at // 4
        stop = at + len(pattern) - 1                # look further left
    return None


class NgramProposer:
    method = "ngram"

    def __init__(self, n_min: int, n_max: int):
        self.n_min, self.n_max = n_min, n_max

    def propose(self, requests: list[DraftRequest], step: SchedulerOutput) -> list[Draft]:
        return [Draft(ngram_lookup(r.context_token_ids, r.max_drafts, self.n_min, self.n_max)) if r.max_drafts
                else Draft([]) for r in requests]

    def forget(self, seq_ids: list[int]) -> None:
        pass
