"""The OpenAI-compatible API inside `panel serve app` (app/openai_api.py): a 503 that says why until the
shared engine is ready, the readers' limits, and the optional key. The server itself is driven end to end
by tests/ui/test_reliability.py (the official client, the dashboard's API chip)."""
from __future__ import annotations

import pytest

pytest.importorskip("panel")
pytest.importorskip("tornado")

import app.engine_handle as engine_handle  # noqa: E402
from app import openai_api  # noqa: E402
from engine.serve import APIError  # noqa: E402
from widgets.common.handle import EngineSnapshot, EngineStatus  # noqa: E402


class Handle:
    def __init__(self, status: EngineStatus, detail: str = "", llm=None):
        self.status, self.detail, self.llm = status, detail, llm

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(self.status, self.detail, False)


@pytest.mark.parametrize("status, detail, says", [
    (EngineStatus.LOADING, "", "the model is loading"),
    (EngineStatus.FAILED, "no space left on device", "the model is failed (no space left on device)"),
])
def test_until_the_engine_is_ready_every_request_is_a_503_that_says_why(monkeypatch, status, detail, says):
    monkeypatch.setattr(engine_handle, "shared_engine", lambda: Handle(status, detail))
    with pytest.raises(APIError) as err:
        openai_api.shared_llm()
    assert err.value.status == 503 and says in err.value.message
    assert err.value.headers["Retry-After"] == str(openai_api.LOADING_RETRY_S)


def test_once_ready_the_api_runs_on_the_shared_llm(monkeypatch):
    llm = object()
    monkeypatch.setattr(engine_handle, "shared_engine", lambda: Handle(EngineStatus.READY, llm=llm))
    assert openai_api.shared_llm() is llm


def test_the_readers_limits_and_the_optional_key(monkeypatch):
    from widgets.common.sharing import SEATS
    from widgets.generate.widget import MAX_NEW_TOKENS
    limits = openai_api.API_LIMITS
    assert (limits.max_concurrent, limits.max_tokens) == (SEATS, MAX_NEW_TOKENS)
    monkeypatch.delenv(openai_api.API_KEY_ENV, raising=False)
    state = openai_api.api_rules()[0][2]["state"]
    assert state.authorized(None) and state.source == "api"
    monkeypatch.setenv(openai_api.API_KEY_ENV, "sk-site")
    state = openai_api.api_rules()[0][2]["state"]
    assert not state.authorized(None) and not state.authorized("Bearer wrong")
    assert state.authorized("Bearer sk-site")
    assert {r[0] for r in openai_api.api_rules()} >= {"/v1/models/?", "/v1/completions/?",
                                                      "/v1/chat/completions/?"}
