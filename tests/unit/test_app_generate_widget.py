"""The generate widget's logic without a browser: loading state, escaping, pass counting, and the
engine handle's background start. A fake engine keeps it instant and deterministic."""
from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

pn = pytest.importorskip("panel")

from app.engine_handle import EngineHandle, EngineSnapshot, EngineStatus  # noqa: E402
from widgets import REGISTRY  # noqa: E402
from widgets.generate import GenerateWidget  # noqa: E402


@dataclass
class _Ev:
    token_id: int
    text_delta: str
    finished: bool
    finish_reason: str | None = None


class _Enc:
    def __init__(self, ids):
        self.ids = ids


class FakeLLM:
    device = "cpu"

    def __init__(self, deltas):
        self.deltas = deltas
        self.closed = False
        self.tokenizer = type("T", (), {"encode": staticmethod(lambda text: _Enc(list(range(len(text.split())))))})()

    def format_prompt(self, prompt, chat):
        return prompt

    def stream(self, prompt, params, chat=False):
        try:
            for i, d in enumerate(self.deltas):
                last = i == len(self.deltas) - 1
                yield _Ev(i, d, last, "length" if last else None)
        finally:
            self.closed = True


class FakeHandle:
    def __init__(self, status=EngineStatus.READY, llm=None):
        self.status, self._llm, self.started = status, llm, False

    def start(self):
        self.started = True

    def snapshot(self):
        return EngineSnapshot(self.status, "loaded in 0.1 s on cpu", False)

    @property
    def llm(self):
        return self._llm


def test_registry_builds_generate_from_directive_args():
    w = REGISTRY["generate"](FakeHandle(), prompt="Hello")
    assert isinstance(w, GenerateWidget) and w._prompt.value == "Hello"
    with pytest.raises(TypeError):
        REGISTRY["generate"](FakeHandle(), no_such_arg=1)


def test_loading_state_is_shown_and_button_disabled_until_ready():
    h = FakeHandle(EngineStatus.LOADING)
    w = GenerateWidget(h)
    assert w._button.disabled and "Loading the model" in w._status.object
    h.status = EngineStatus.READY
    assert w._show_engine_state() and not w._button.disabled


def test_failed_engine_is_explained_not_blank():
    h = FakeHandle(EngineStatus.FAILED)
    w = GenerateWidget(h)
    assert w._show_engine_state() and "could not be loaded" in w._status.object and w._button.disabled


def test_tokens_are_escaped_and_each_counts_one_forward_pass():
    llm = FakeLLM(["<script>", "alert(1)", "</script>", " & done"])
    w = GenerateWidget(FakeHandle(llm=llm), prompt="a b c")
    w._prompt_tokens = 3
    w._worker(llm, "a b c", params=None)
    w._drain()
    out = w._output.object
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp; done" in out
    assert out.count('class="tok"') == 4 and 'title="token id 3"' in out
    assert '<b class="gen-passes">4</b>' in w._stats.object
    assert "1 prefill over 3 prompt tokens, 3 decode" in w._stats.object
    assert "measured on cpu" in w._stats.object and "token limit" in w._stats.object
    assert llm.closed                     # the stream was closed, so the engine is free again


def test_leaving_mid_generation_stops_and_closes_the_stream():
    llm = FakeLLM(["a"] * 50)
    w = GenerateWidget(FakeHandle(llm=llm))
    w._cancel.set()
    w._worker(llm, "p", params=None)
    assert llm.closed and w._queue.qsize() <= 2


def test_engine_handle_loads_once_in_the_background(monkeypatch):
    calls = []
    gate = threading.Event()

    class SlowLLM:
        device = "cpu"

        def __init__(self, **kw):
            calls.append(kw)
            gate.wait(5)

    import engine
    monkeypatch.setattr(engine, "LLM", SlowLLM)
    h = EngineHandle(random_weights=True)
    assert h.snapshot().status is EngineStatus.IDLE
    h.start()
    h.start()                                   # a second reader does not start a second load
    assert h.snapshot().status is EngineStatus.LOADING
    gate.set()
    assert h.wait(5)
    assert h.snapshot().status is EngineStatus.READY and len(calls) == 1
    assert calls[0]["random_weights"] is True


def test_engine_handle_reports_failure(monkeypatch):
    import engine

    def boom(**kw):
        raise RuntimeError("no weights here")
    monkeypatch.setattr(engine, "LLM", boom)
    h = EngineHandle(random_weights=False)
    h.start()
    assert h.wait(5)
    snap = h.snapshot()
    assert snap.status is EngineStatus.FAILED and "no weights here" in snap.detail
    with pytest.raises(RuntimeError):
        h.llm


def test_random_weights_env_var(monkeypatch):
    monkeypatch.setenv("LLM_EXPLAINER_RANDOM_WEIGHTS", "1")
    assert EngineHandle().random_weights
    monkeypatch.setenv("LLM_EXPLAINER_RANDOM_WEIGHTS", "0")
    assert not EngineHandle().random_weights
