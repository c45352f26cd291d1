"""The OpenAI-compatible API inside `panel serve app`: the same routes as `python -m engine serve`
(engine/serve), mounted on Bokeh's Tornado application beside the pages, on the readers' shared engine.

    curl http://localhost:5006/v1/completions -H "Content-Type: application/json" \\
         -d '{"model": "SmolLM2-135M-Instruct", "prompt": "The capital of France is", "max_tokens": 16}'

Such a request is one more request in the engine's batch: its request id begins with "api-", so the engine
dashboard (cover, chapter 14) draws it as an API chip beside the readers' own. It gets the readers' limits
(API_LIMITS): at most SEATS requests at once (one more is a 429 with Retry-After), the Generate widget's
MAX_NEW_TOKENS, prompts of at most MAX_PROMPT_TOKENS. Until the model has loaded every request is a 503
that says so. LLM_EXPLAINER_API_KEY, when set, is the key every request must bring
(`Authorization: Bearer <key>`, else 401): for a public deployment.
"""
from __future__ import annotations

import os

from engine.serve import APIError, ApiState, ServerLimits, api_routes
from widgets.common.sharing import SEATS
from widgets.generate.widget import MAX_NEW_TOKENS

MAX_PROMPT_TOKENS = 512           # a few paragraphs: the Generate box holds 400 characters, about 100 tokens
API_LIMITS = ServerLimits(max_concurrent=SEATS, max_waiting=4 * SEATS, max_tokens=MAX_NEW_TOKENS,
                          max_prompts=SEATS, max_prompt_tokens=MAX_PROMPT_TOKENS, retry_after_s=2)
LOADING_RETRY_S = 5
API_KEY_ENV = "LLM_EXPLAINER_API_KEY"


def shared_llm():
    """The shared engine's LLM once it is ready; a 503 that says why before that (loading, failed)."""
    from app.engine_handle import shared_engine
    handle = shared_engine()
    snap = handle.snapshot()
    if snap.status.value != "ready":
        detail = f" ({snap.detail})" if snap.detail else ""
        raise APIError(503, f"the model is {snap.status.value}{detail}: try again in a few seconds",
                       code="model_not_ready", headers={"Retry-After": str(LOADING_RETRY_S)})
    return handle.llm


def api_rules() -> list[tuple]:
    """The API's routes as (pattern, handler, kwargs), for Bokeh's Tornado application."""
    return api_routes(ApiState(shared_llm, api_key=os.environ.get(API_KEY_ENV) or None, limits=API_LIMITS,
                               source="api"))
