"""The HTTP endpoints (Tornado handlers), each answering JSON in OpenAI's shapes, errors included.

    GET  /v1/models               the served model
    POST /v1/completions          text in, text out (protocol.parse_completion)
    POST /v1/chat/completions     messages in, the assistant's reply out (protocol.parse_chat)
    GET  /health                  200 once the engine is up (503 while loading, or if its thread stopped)
    anything else under /v1/      404

Every request is checked for the API key first (401). A generation request is read and checked whole
(400 naming the field) before it is admitted (429 when busy) and runs on the shared engine
(generation.py); with "stream": true the answer goes out as server-sent events, `data: {json}` per token
and `data: [DONE]` at the end. A refusal the engine itself makes when the request is submitted still
arrives before the first byte of the answer, so it is a 400 too. A client that goes away aborts its
request: the engine frees its KV blocks at the next gap between steps. Nothing unexpected reaches the
client as a traceback: it gets a 500 with one sentence, the server's log gets the traceback.
"""
from __future__ import annotations

import json
import logging

from tornado.iostream import StreamClosedError
from tornado.web import HTTPError, RequestHandler

from ..engine_loop import EngineClosed
from .errors import APIError, bad_request
from .generation import Generation
from .protocol import parse_chat, parse_completion
from .responses import Answer
from .state import ApiState

log = logging.getLogger("engine.serve")


class ApiHandler(RequestHandler):
    """JSON in and out, the key checked, every error in OpenAI's shape."""

    def initialize(self, state: ApiState) -> None:
        self.state = state

    def prepare(self) -> None:
        if not self.state.authorized(self.request.headers.get("Authorization")):
            self.set_header("WWW-Authenticate", "Bearer")
            raise APIError(401, "a valid API key is required: send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    def check_xsrf_cookie(self) -> None:      # an API called with keys, not a form (Panel's app may turn XSRF on)
        pass

    def send_json(self, body: dict, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def _handle_request_exception(self, e: BaseException) -> None:
        """Tornado's hook for an exception out of a handler method: an APIError is our answer; anything
        else is logged with its traceback and answered with one sentence."""
        if isinstance(e, APIError):
            if self._finished:
                return
            if self._headers_written:         # too late for a status: end the stream with the error
                self._end_stream_with(e)
                return
            self.clear()
            for name, value in e.headers.items():
                self.set_header(name, value)
            if e.status == 401:
                self.set_header("WWW-Authenticate", "Bearer")
            self.send_json(e.body(), e.status)
            return
        super()._handle_request_exception(e)     # logs, then write_error below

    def write_error(self, status_code: int, **kwargs) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, HTTPError) and exc.log_message and status_code < 500:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code == 405:
            message = f"{self.request.method} is not allowed on {self.request.path}"
        elif status_code < 500:
            message = self._reason
        else:
            message = "the server failed while answering this request (the details are in its log)"
        self.send_json(APIError(status_code, message).body(), status_code)   # (send_error has cleared the headers)

    def _end_stream_with(self, e: APIError) -> None:
        try:
            self.write(f"data: {e.json()}\n\ndata: [DONE]\n\n")
            self.finish()
        except StreamClosedError:
            pass


class NotFound(ApiHandler):
    def prepare(self) -> None:
        super().prepare()
        raise APIError(404, f"there is no {self.request.path} here: the API is GET /v1/models, "
                            f"POST /v1/completions and POST /v1/chat/completions", code="not_found")


class Models(ApiHandler):
    def get(self) -> None:
        llm = self.state.llm()
        self.send_json({"object": "list", "data": [{
            "id": self.state.model_name(llm), "object": "model", "created": 0, "owned_by": "engine",
            "root": llm.config.name, "max_model_len": llm.engine.max_model_len}]})


class Health(RequestHandler):
    def initialize(self, state: ApiState) -> None:
        self.state = state

    def get(self) -> None:
        try:
            alive = self.state.llm().alive
        except APIError:
            alive = False
        self.set_status(200 if alive else 503)
        self.finish()


class Generate(ApiHandler):
    """POST: read and check the body, admit it, run it, answer whole or as a stream."""
    parse = None        # protocol.parse_completion or parse_chat

    def initialize(self, state: ApiState) -> None:
        super().initialize(state)
        self.generation: Generation | None = None
        self.client_gone = False

    async def post(self) -> None:
        llm = self.state.llm()
        try:
            body = json.loads(self.request.body or b"")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise bad_request(f"the request body is not valid JSON: {e}") from None
        request = type(self).parse(body, self.state.model_limits(llm))
        self.state.admit(llm)
        try:
            self.generation = Generation(llm, request.prompts, request.params, self.state.source).start()
            answer = Answer(request.kind, request.model, len(request.prompts), request.params.n,
                            sum(len(p.token_ids) for p in request.prompts), request.top_logprobs)
            if request.stream:
                await self._stream(answer, request.include_usage)
            else:
                await self._whole(answer)
        finally:
            if self.generation is not None and not self._finished:
                self.generation.cancel()
            self.state.release()

    async def _whole(self, answer: Answer) -> None:
        async for item in self.generation.items():
            if item.error is not None:
                self.generation.cancel()
                raise self._refusal(item.error)
            answer.add(item.prompt_index, item.event)
        if not self.client_gone:
            self.send_json(answer.response())

    async def _stream(self, answer: Answer, include_usage: bool) -> None:
        chat = answer.kind == "chat"
        async for item in self.generation.items():
            if item.error is not None:
                self.generation.cancel()
                raise self._refusal(item.error)      # a 400/500, or an error event if the stream has begun
            if self.client_gone:
                continue                             # drained until the aborted streams end
            if not self._headers_written:
                self.set_header("Content-Type", "text/event-stream; charset=utf-8")
                self.set_header("Cache-Control", "no-cache")
                self.set_header("X-Accel-Buffering", "no")
            choice, delta, entry = answer.add(item.prompt_index, item.event)
            chunks = []
            if chat and choice.num_tokens == 1:
                chunks.append(answer.chunk(choice, None, None, role=True, include_usage=include_usage))
            if delta or entry is not None or item.event.finished:
                chunks.append(answer.chunk(choice, delta, entry, include_usage=include_usage))
            await self._send(chunks)
        if self.client_gone:
            return
        if not self._headers_written:                # nothing was generated (cannot happen: one token at least)
            self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        tail = [answer.usage_chunk()] if include_usage else []
        await self._send(tail, done=True)
        if not self.client_gone:
            self.finish()

    async def _send(self, chunks: list[dict], done: bool = False) -> None:
        if not chunks and not done:
            if self._headers_written:
                return
            # The first token came but no text yet (a stop string's prefix held back, half a UTF-8
            # character): the 200 and its headers go out now all the same, so a client whose timeout
            # covers the wait for headers (the openai client's does) sees its stream begin.
        self.write("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + ("data: [DONE]\n\n" if done else ""))
        try:
            await self.flush()
        except StreamClosedError:
            self._client_left()

    def on_connection_close(self) -> None:
        self._client_left()

    def _client_left(self) -> None:
        if self.client_gone or self.generation is None:
            return
        self.client_gone = True
        if not self._finished:
            self.state.counts.disconnects += 1
            self.generation.cancel()

    def _refusal(self, exc: BaseException) -> APIError:
        """An error from the engine, as the client sees it."""
        if isinstance(exc, (ValueError, TypeError)):       # refused when submitted (n, KV blocks, ...)
            return bad_request(str(exc))
        if isinstance(exc, EngineClosed):
            return APIError(503, "the engine is shutting down")
        log.error("a request failed in the engine", exc_info=exc)
        return APIError(500, "the engine failed while running this request (the details are in the server's log)")


class Completions(Generate):
    parse = staticmethod(parse_completion)


class ChatCompletions(Generate):
    parse = staticmethod(parse_chat)


def api_routes(state: ApiState, prefix: str = "") -> list[tuple]:
    """The API's routes as (pattern, handler, kwargs), for a Tornado Application or Panel's ROUTES."""
    kw = {"state": state}
    return [(rf"{prefix}/v1/models/?", Models, kw), (rf"{prefix}/v1/completions/?", Completions, kw),
            (rf"{prefix}/v1/chat/completions/?", ChatCompletions, kw), (rf"{prefix}/health", Health, kw),
            (rf"{prefix}/v1(/.*)?", NotFound, kw)]
