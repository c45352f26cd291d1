"""The generate widget without a browser: saved example first, loading state, input notes, escaping,
the pass counter read from the engine's step trace, Stop; and the engine handle's background start.
A fake engine keeps it instant and deterministic; test_widget_toolkit.py runs the real one."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

pn = pytest.importorskip("panel")

from app.engine_handle import EngineHandle  # noqa: E402
from widgets.common.handle import EngineStatus  # noqa: E402
from widgets import REGISTRY  # noqa: E402
from widgets.generate.widget import GenerateWidget  # noqa: E402

from tests.helpers.fakes import FakeHandle, FakeLLM  # noqa: E402


def _press(w: GenerateWidget):
    w._button.clicks += 1                  # what a click on the button does


def _run(w: GenerateWidget):
    _press(w)
    assert w.jobs.wait_idle(30)


def test_registry_builds_generate_from_directive_args():
    w = REGISTRY["generate"](FakeHandle(_llm=FakeLLM([])), prompt="Hello")
    assert isinstance(w, GenerateWidget) and w._prompt.value == "Hello"
    with pytest.raises(TypeError):
        REGISTRY["generate"](FakeHandle(), no_such_arg=1)


def test_first_paint_is_the_saved_example_while_loading():
    w = GenerateWidget(FakeHandle(EngineStatus.LOADING))
    assert w._button.disabled
    status = w.gate.pane.object
    assert 'data-state="loading"' in status and "Loading the model" in status and "recorded on" in status
    assert "Paris" in w._output.object                       # the chapter's prompt has a saved reply
    assert "Forward passes" in w._stats.object and "recorded on" in w._stats.object


def test_the_saved_reply_shows_what_the_model_read_inside_the_chat_template():
    """Chapter 1's counter says "37 tokens computed" for a 7-token question: the widget shows those 37
    tokens, the reader's 7 among the template's, its special tokens marked (ux review, chapter 1)."""
    w = GenerateWidget(FakeHandle(EngineStatus.LOADING))
    stats = w._stats.object
    assert "What the model reads: 37 tokens, your 7 inside the model&#x27;s chat template" in stats or \
        "What the model reads: 37 tokens, your 7 inside the model's chat template" in stats
    assert stats.count('class="gen-ptok gen-p-yours"') == 7
    assert stats.count('class="gen-ptok gen-p-special"') == 5 and "&lt;|im_start|&gt;</span>" in stats
    assert "prompt: 37 tokens computed" in stats


def test_failed_engine_is_explained_not_blank():
    w = GenerateWidget(FakeHandle(EngineStatus.FAILED, detail="OSError: no disk"))
    assert 'data-state="failed"' in w.gate.pane.object and "no disk" in w.gate.pane.object and w._button.disabled


def test_counter_comes_from_the_step_trace_with_prefix_cache_hits():
    llm = FakeLLM(["<script>", "alert(1)", "</script>", " & done"])
    w = GenerateWidget(FakeHandle(_llm=llm), prompt="a b c")
    assert not w._button.disabled
    _run(w)
    out = w._output.object
    assert "<script>" not in out and "&lt;script&gt;" in out and "&amp; done" in out
    assert out.count('class="tok"') == 4 and 'title="token id 103"' in out
    stats = w._stats.object
    assert '<b class="gen-passes">4</b>' in stats
    assert "prompt: 3 of 18 tokens computed, 15 from the prefix cache" in stats
    assert "1 prefill pass + 3 decode passes = 4 forward passes" in stats
    assert "measured on cpu (2 threads)" in stats and "token limit" in stats
    assert llm.closed                      # the stream was closed, so the engine is free again


def test_empty_prompt_gets_a_message_and_runs_nothing():
    llm = FakeLLM(["x"])
    w = GenerateWidget(FakeHandle(_llm=llm), prompt="   ")
    _press(w)
    assert "prompt is empty" in w.notes.object and llm.seen_max_tokens is None


def test_out_of_range_max_tokens_is_clamped_with_a_visible_note():
    llm = FakeLLM(["x"] * 200)
    w = GenerateWidget(FakeHandle(_llm=llm), prompt="hi")
    w._max_tokens.value = 500
    _run(w)
    assert llm.seen_max_tokens == 128 and w._max_tokens.value == 128
    assert "Max new tokens is 1–128: using 128" in w.notes.object


def test_stop_keeps_the_partial_reply_and_closes_the_stream():
    gate = threading.Event()

    class SlowLLM(FakeLLM):
        def stream(self, prompt, params, chat=False):
            for i, ev in enumerate(super().stream(prompt, params, chat)):
                if i == 2:
                    gate.wait(30)
                yield ev

    llm = SlowLLM(["a"] * 50)
    w = GenerateWidget(FakeHandle(_llm=llm), prompt="p")
    _press(w)
    _press(w)                              # the button reads "Stop" while it runs
    gate.set()
    assert w.jobs.wait_idle(30) and llm.closed
    assert "stopped early" in w._stats.object and w._output.object.count('class="tok"') < 50


def test_leaving_the_page_mid_reply_stops_the_stream_and_shows_nothing_more():
    gate, reached = threading.Event(), threading.Event()

    class SlowLLM(FakeLLM):
        def stream(self, prompt, params, chat=False):
            for i, ev in enumerate(super().stream(prompt, params, chat)):
                if i == 2:
                    reached.set()
                    gate.wait(30)
                yield ev

    llm = SlowLLM(["a"] * 50)
    w = GenerateWidget(FakeHandle(_llm=llm), prompt="p")
    _press(w)
    assert reached.wait(30)                # what the page shows now cannot change under the read below
    before = w._output.object
    w.close()                              # what the session's end calls
    gate.set()
    deadline = time.monotonic() + 30       # the worker notices at its next token and closes the stream
    while not llm.closed and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    assert llm.closed and w._output.object == before
    assert w.jobs.submit(lambda job: 1, print) is None        # a closed runner takes no new work


def test_engine_handle_loads_once_in_the_background(monkeypatch):
    calls = []
    gate = threading.Event()

    class SlowLLM:
        device_name = "cpu (2 threads)"

        def __init__(self, **kw):
            calls.append(kw)
            gate.wait(30)

    import engine
    monkeypatch.setattr(engine, "LLM", SlowLLM)
    h = EngineHandle(random_weights=True)
    assert h.snapshot().status is EngineStatus.IDLE
    h.start()
    h.start()                                   # a second reader does not start a second load
    assert h.snapshot().status is EngineStatus.LOADING
    gate.set()
    assert h.wait(30)
    assert h.snapshot().status is EngineStatus.READY and len(calls) == 1
    assert calls[0]["random_weights"] is True


def test_engine_handle_shows_the_engines_progress_while_loading(monkeypatch):
    gate, printed = threading.Event(), threading.Event()

    class ChattyLLM:
        device_name = "cpu (1 threads)"

        def __init__(self, **kw):
            import sys
            print("[engine] unpacking: 50%", file=sys.stderr)
            printed.set()
            gate.wait(30)

    import engine
    monkeypatch.setattr(engine, "LLM", ChattyLLM)
    h = EngineHandle(random_weights=True)
    h.start()
    assert printed.wait(30)
    snap = h.snapshot()
    assert snap.status is EngineStatus.LOADING and snap.progress == "unpacking: 50%"
    gate.set()
    assert h.wait(30) and "on cpu (1 threads)" in h.snapshot().detail and h.snapshot().progress == ""


def test_engine_handle_reports_failure(monkeypatch):
    import engine

    def boom(**kw):
        raise RuntimeError("no weights here")
    monkeypatch.setattr(engine, "LLM", boom)
    h = EngineHandle(random_weights=False)
    h.start()
    assert h.wait(30)
    snap = h.snapshot()
    assert snap.status is EngineStatus.FAILED and "no weights here" in snap.detail
    with pytest.raises(RuntimeError):
        h.llm


def test_random_weights_env_var(monkeypatch):
    monkeypatch.setenv("LLM_EXPLAINER_RANDOM_WEIGHTS", "1")
    assert EngineHandle().random_weights
    monkeypatch.setenv("LLM_EXPLAINER_RANDOM_WEIGHTS", "0")
    assert not EngineHandle().random_weights


def test_progress_lines_shown_to_readers_carry_no_server_paths():
    import io
    from app.engine_handle import _ConsoleTee
    kept, console = [], io.StringIO()
    tee = _ConsoleTee(console, kept.append)
    tee.write("[engine] loading dequantized weights from /root/.cache/llm-explainer/w.safetensors\n[app] other\n")
    assert kept == ["loading dequantized weights"] and "/root/.cache" in console.getvalue()   # the console keeps it all
