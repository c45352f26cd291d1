"""An OpenAI-compatible HTTP API on the shared engine (`python -m engine serve`), the way vLLM's users call
a model: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (stream: true as server-sent
events).

    errors.py      APIError: every refusal in OpenAI's JSON shape (400 naming the field, 401, 404, 429, 500)
    protocol.py    request bodies -> ParsedPrompts + one SamplingParams, or a 400 naming the field
    responses.py   StreamEvents -> OpenAI's answers, whole or as chunks, with usage and logprobs
    generation.py  a request's prompts on the engine, each read on a thread, handed to the event loop;
                   cancel() aborts them (their KV blocks are freed at the next gap between steps)
    state.py       ApiState: the engine, the key, the limits (ServerLimits), admission (429)
    handlers.py    the Tornado handlers, and api_routes() to mount them in any Tornado application
    server.py      ApiServer: the routes on their own port (a background thread or the main one)
"""
from .errors import APIError
from .handlers import api_routes
from .server import ApiServer, make_app
from .state import ApiState, ServerLimits

__all__ = ["ApiServer", "ApiState", "ServerLimits", "APIError", "api_routes", "make_app"]
