"""The engine side of the generate widget: one greedy reply streamed from the shared engine, and the
forward passes it cost, read from the engine's step trace (no Panel, no HTML here).

The counter does not assume "1 prefill + N−1 decodes": it reads the engine's step trace for this
request (widgets/common/passes.py), so it says when part of the prompt came from the prefix cache,
when a long prompt was prefilled in chunks, when the request was preempted, and whether other
readers' requests shared its passes. Times are the steps' wall times as the engine measured them.

    reply = run_generation(llm, "What is the capital of France?", 32, chat=True)
    reply.tokens   [(token id, the text it completed), ...]      reply.passes   RequestPasses
    reply.prompt_tokens   what the model read: [(text, "yours" | "template" | "special"), ...]
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from widgets.common.passes import RequestPasses, request_passes
from widgets.common.sharing import Reader, Refused

POST_EVERY_S = 0.1            # partial replies at most ten times a second


@dataclass(slots=True)
class Reply:
    tokens: list[tuple[int, str]] = field(default_factory=list)   # (token id, the text it completed)
    passes: RequestPasses = field(default_factory=RequestPasses)
    reason: str | None = None                                     # set once the reply has ended
    queued: int | None = None                                     # waiting for a seat: place in the queue
    prompt_tokens: list[tuple[str, str]] = field(default_factory=list)   # what the model read (prompt_pieces)


def prompt_pieces(llm, prompt: str, chat: bool) -> list[tuple[str, str]]:
    """What the model reads for this prompt, one (text, role) per token: "yours" for the reader's own
    words, "special" for the chat template's special tokens (<|im_start|>, <|im_end|>), "template" for
    the rest of the template (its system turn, the role names, line breaks). A 7-token question becomes
    37 tokens this way: chapter 1's counter says "37 tokens computed", and this shows why."""
    tok = llm.tokenizer
    text = llm.format_prompt(prompt, chat)
    enc = tok.encode(text)
    start = text.rfind(prompt)                # the user's turn: the template writes the prompt once, last
    end = start + len(prompt)
    out = []
    for tid, (a, b) in zip(enc.ids, enc.spans):
        role = ("special" if tid in tok.special_ids else
                "yours" if start >= 0 and start <= a and b <= end else "template")
        out.append((tok.decode([tid]), role))
    return out


def run_generation(llm, prompt: str, max_tokens: int, chat: bool, should_stop=lambda: False,
                   post=lambda reply: None, reader: Reader | None = None, on_cancel=None) -> Reply:
    """Stream one greedy reply; the pass counter comes from the engine's trace for this request.
    The reader's share comes first (widgets/common/sharing.py): at most a few generations per page,
    and a server-wide seat, waiting in line (its place posted) when every seat is taken."""
    reader = reader or Reader()
    try:
        with reader.generation(should_stop, on_place=lambda place: post(Reply(queued=place))):
            return _stream_reply(llm, prompt, max_tokens, chat, should_stop, post, reader, on_cancel)
    except Refused:
        if should_stop():
            return Reply(reason="abort")     # stopped (or left) while waiting in line
        raise


def _stream_reply(llm, prompt, max_tokens, chat, should_stop, post, reader: Reader, on_cancel) -> Reply:
    from engine import SamplingParams
    start = llm.num_steps()
    reply, request_id, last_post = Reply(prompt_tokens=prompt_pieces(llm, prompt, chat)), None, 0.0
    stream = llm.stream(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens), chat=chat)
    try:
        for ev in stream:
            if request_id is None:
                request_id = ev.request_id
                reader.requests.add(request_id)          # the dashboard marks it "yours"
                if on_cancel is not None:                # the reader leaves: abort now, not a token later
                    on_cancel(lambda rid=request_id: llm.abort(rid))
            reply.tokens.append((ev.token_id, ev.text_delta))
            if ev.finished:
                reply.reason = ev.finish_reason
                break
            if should_stop():
                reply.reason = "abort"
                break
            if time.monotonic() - last_post >= POST_EVERY_S:
                last_post = time.monotonic()
                # only the passes behind the tokens received so far: the engine may be a step ahead
                reply.passes = request_passes(llm.trace_since(start), request_id).upto(len(reply.tokens))
                post(Reply(list(reply.tokens), reply.passes, prompt_tokens=reply.prompt_tokens))
    finally:
        stream.close()             # stopped early: the engine aborts the request and frees its blocks
        reader.requests.discard(request_id)
    if request_id is not None:
        reply.passes = request_passes(llm.trace_since(start), request_id)
    return reply


def reply_record(reply: Reply) -> dict:
    """A finished reply as JSON-able data (what the saved example keeps per prompt)."""
    p = reply.passes
    return {"tokens": reply.tokens, "reason": reply.reason, "prompt_tokens": reply.prompt_tokens,
            "passes": {"passes": p.passes, "prefill_passes": p.prefill_passes,
                       "decode_passes": p.decode_passes, "chunks": p.chunks,
                       "cached_prompt_tokens": p.cached_prompt_tokens,
                       "prefill_s": p.prefill_s, "decode_s": p.decode_s}}


def saved_reply(d: dict) -> Reply:
    """The Reply a saved record was made from."""
    passes = RequestPasses(**{k: v for k, v in d["passes"].items() if k in RequestPasses.__slots__})
    return Reply([tuple(t) for t in d["tokens"]], passes, d["reason"],
                 prompt_tokens=[tuple(t) for t in d.get("prompt_tokens", [])])
