"""Generation: a request's prompts run on the shared engine, their tokens handed to the server's event loop.

    event loop (tornado)                     one thread per prompt            the engine loop thread
    ────────────────────                     ─────────────────────            ──────────────────────
    async for item in gen.items():  ◄─────── for event in llm.stream(...):  ◄── steps, one token each
    cancel() ── llm.abort(request id) ─────────────────────────────────────► freed at the next gap

`LLM.stream` blocks between tokens, so each prompt's stream is read on a thread of its own, which posts
every event into an asyncio queue; the event loop never waits on the engine. A client that goes away
calls cancel(): the engine aborts the request at the next gap between two steps (its KV blocks are freed
there) and the stream ends; a stream still before its first token is closed on its first token, which
aborts it the same way.
"""
from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..inputs import ParsedPrompt
from ..outputs import StreamEvent
from ..sampling_params import SamplingParams

_names = itertools.count()


@dataclass(slots=True)
class Item:
    prompt_index: int
    event: StreamEvent | None = None     # one token
    error: BaseException | None = None   # the stream failed (a refusal at submission, an engine fault)


class Generation:
    def __init__(self, llm, prompts: list[ParsedPrompt], params: SamplingParams, source: str = "api"):
        self.llm, self.prompts, self.params, self.source = llm, prompts, params, source
        self.loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._request_ids: dict[int, str] = {}     # prompt index -> the engine's request id, once known
        self._threads: list[threading.Thread] = []
        self.cancelled = False

    def start(self) -> Generation:
        name = next(_names)
        for i, prompt in enumerate(self.prompts):
            t = threading.Thread(target=self._run, args=(i, prompt), name=f"api-{name}-{i}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    async def items(self) -> AsyncIterator[Item]:
        """Every token of every prompt as it comes, and an error item if a stream fails; ends when every
        prompt's stream has ended."""
        running = len(self.prompts)
        while running:
            item = await self._queue.get()
            if item is None:
                running -= 1
            else:
                yield item

    def cancel(self) -> None:
        """Abort what is still running (from the event loop: returns at once)."""
        self.cancelled = True
        self._cancelled.set()
        with self._lock:
            ids = list(self._request_ids.values())
        for request_id in ids:
            self.llm.abort(request_id)

    # -- the prompt threads -----------------------------------------------------------------------------
    def _run(self, i: int, prompt: ParsedPrompt) -> None:
        tokens = {"prompt_token_ids": prompt.token_ids} | ({"prompt": prompt.text} if prompt.text else {})
        stream = self.llm.stream(tokens, self.params, source=self.source)
        try:
            for event in stream:
                with self._lock:
                    if i not in self._request_ids:
                        rid = event.request_id if self.params.n == 1 else event.request_id.rsplit(":", 1)[0]
                        self._request_ids[i] = rid
                self._post(Item(i, event))
                if self._cancelled.is_set():      # cancelled before its request id was known
                    break
        except BaseException as exc:              # handed to the event loop, which answers for it
            self._post(Item(i, error=exc))
        finally:
            stream.close()                        # an unfinished stream aborts its request here
            self._post(None)

    def _post(self, item: Item | None) -> None:
        try:
            self.loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:                      # the event loop has closed: the server is gone
            self._cancelled.set()
