"""What the server answers, in OpenAI's JSON shapes, built from the engine's StreamEvents.

    /v1/completions       {"id": "cmpl-…", "object": "text_completion", "choices": [{"index", "text", "logprobs",
                           "finish_reason", "stop_reason"}], "usage": {"prompt_tokens", "completion_tokens",
                           "total_tokens"}}; streamed: the same object per chunk, "text" the new text
    /v1/chat/completions  {"id": "chatcmpl-…", "object": "chat.completion", "choices": [{"index", "message":
                           {"role": "assistant", "content"}, "logprobs": {"content": [...]}, "finish_reason"}],
                           "usage"}; streamed: "chat.completion.chunk" objects whose "delta" carries the role
                           first, then the new text

A request with several prompts (completions) or n > 1 has one choice per (prompt, sample): index
prompt * n + sample, as OpenAI numbers them. Log-probabilities come from the engine's Logprob records
(the raw logits' distribution); "stop_reason" (vLLM's extra field) is the stop string or token id that
ended a choice.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from ..outputs import Logprob, StreamEvent


@dataclass(slots=True)
class Choice:
    """One (prompt, sample) as it is generated."""
    index: int
    text: str = ""                       # all text so far
    num_tokens: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    logprobs: list = field(default_factory=list)   # per token: the answer's logprobs entry (when asked)
    text_offset: int = 0                 # completions' logprobs: where this token's text starts


class Answer:
    """One request's answer: its choices as events arrive, and the JSON objects to send."""

    def __init__(self, kind: str, model: str, num_prompts: int, n: int, prompt_tokens: int,
                 top_logprobs: int | None):
        self.kind, self.model, self.n, self.top_logprobs = kind, model, n, top_logprobs
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.prompt_tokens = prompt_tokens
        self.choices = [Choice(i) for i in range(num_prompts * n)]

    # -- events in ------------------------------------------------------------------------------------
    def add(self, prompt_index: int, event: StreamEvent) -> tuple[Choice, str, dict | None]:
        """Take one token of one sample; returns its choice, the new text, and the token's logprobs entry."""
        choice = self.choices[prompt_index * self.n + event.index]
        delta = event.text[len(choice.text):] if event.text.startswith(choice.text) else event.text_delta
        offset = len(choice.text)
        choice.text = event.text if event.text.startswith(choice.text) else choice.text + delta
        choice.num_tokens += 1
        entry = None
        if self.top_logprobs is not None and event.logprobs is not None:
            entry = self._logprob_entry(event.token_id, event.logprobs, offset)
            choice.logprobs.append(entry)
        if event.finished:
            choice.finish_reason, choice.stop_reason = event.finish_reason, event.stop_reason
        return choice, delta, entry

    @property
    def completion_tokens(self) -> int:
        return sum(c.num_tokens for c in self.choices)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}

    # -- log-probabilities ----------------------------------------------------------------------------
    def _logprob_entry(self, token_id: int, entries: dict[int, Logprob], offset: int) -> dict:
        chosen = entries[token_id]
        top = sorted(entries.items(), key=lambda kv: kv[1].rank)[:self.top_logprobs]
        text = chosen.decoded_token or ""
        if self.kind == "chat":
            return {"token": text, "logprob": chosen.logprob, "bytes": list(text.encode("utf-8")),
                    "top_logprobs": [{"token": lp.decoded_token or "", "logprob": lp.logprob,
                                      "bytes": list((lp.decoded_token or "").encode("utf-8"))} for _, lp in top]}
        return {"token": text, "logprob": chosen.logprob, "offset": offset,
                "top": {(lp.decoded_token or ""): lp.logprob for _, lp in top}}

    def _logprobs_json(self, entries: list[dict]) -> dict | None:
        if self.top_logprobs is None:
            return None
        if self.kind == "chat":
            return {"content": entries}
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [e["top"] for e in entries], "text_offset": [e["offset"] for e in entries]}

    # -- the answer out -------------------------------------------------------------------------------
    def response(self) -> dict:
        """The whole answer (stream: false)."""
        choices = []
        for c in self.choices:
            common = {"index": c.index, "logprobs": self._logprobs_json(c.logprobs),
                      "finish_reason": c.finish_reason, "stop_reason": c.stop_reason}
            if self.kind == "chat":
                choices.append({"message": {"role": "assistant", "content": c.text}, **common})
            else:
                choices.append({"text": c.text, **common})
        return {"id": self.id, "object": "chat.completion" if self.kind == "chat" else "text_completion",
                "created": self.created, "model": self.model, "choices": choices, "usage": self.usage()}

    def chunk(self, choice: Choice, delta: str | None, entry: dict | None, *, role: bool = False,
              include_usage: bool = False) -> dict:
        """One streamed chunk for one choice: its new text (chat: the role first), and its finish_reason
        on the last one."""
        finish = choice.finish_reason if delta is not None else None
        body: dict = {"index": choice.index,
                      "logprobs": self._logprobs_json([entry]) if entry is not None else None,
                      "finish_reason": finish}
        if finish is not None:
            body["stop_reason"] = choice.stop_reason
        if self.kind == "chat":
            body["delta"] = {"role": "assistant", "content": ""} if role else ({"content": delta} if delta else {})
        else:
            body["text"] = delta or ""
        out = {"id": self.id, "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
               "created": self.created, "model": self.model, "choices": [body]}
        if include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self) -> dict:
        """stream_options.include_usage: the last chunk, no choices, the token counts."""
        return {"id": self.id, "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
                "created": self.created, "model": self.model, "choices": [], "usage": self.usage()}
