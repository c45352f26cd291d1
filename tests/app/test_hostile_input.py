"""Hostile input at the app's edges: path traversal in slugs reads nothing, `theme` and `sentence`
cannot inject markup, the generate widget's limits say so, and a huge value is refused or clipped."""
from __future__ import annotations

import pathlib

import pytest

pn = pytest.importorskip("panel")
pytest.importorskip("markdown_it")

from app.content import find_chapter, list_chapters  # noqa: E402
from widgets.common.text import clamp, clip, esc  # noqa: E402

TRAVERSAL = ["../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "/etc/passwd", "what-is-an-llm/../../../etc/passwd",
             "..\\..\\windows\\win.ini", "01-what-is-an-llm.md", "\x00", "a" * 5000]
PAYLOAD = '"><script>alert(1)</script><img src=x onerror=alert(1)>'


@pytest.mark.parametrize("slug", TRAVERSAL, ids=range(len(TRAVERSAL)))
def test_a_traversal_slug_finds_nothing_and_reads_no_file(slug, monkeypatch):
    chapters = list_chapters()
    opened = []
    monkeypatch.setattr(pathlib.Path, "open", lambda self, *a, **k: opened.append(self) or (_ for _ in ()).throw(OSError))
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, *a, **k: opened.append(self) or "")
    assert find_chapter(slug, chapters) is None and opened == []


def _markup(component) -> str:
    out = []
    for obj in component.select(pn.pane.HTML):
        out.append(str(obj.object))
    return "\n".join(out)


@pytest.mark.parametrize("query", [{"theme": [PAYLOAD.encode()]}, {"chapter": [PAYLOAD.encode()]},
                                   {"page": [PAYLOAD.encode()], "theme": [b"dark" + PAYLOAD.encode()]}])
def test_url_parameters_cannot_inject_markup(query, monkeypatch):
    import app.router as router
    from app.engine_handle import EngineHandle
    idle = EngineHandle(random_weights=True)
    monkeypatch.setattr(idle, "start", lambda: None)          # pages only: no engine load in this test
    monkeypatch.setattr(router, "shared_engine", lambda: idle)
    html = _markup(router.build(query))
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert 'data-theme="dark' not in html or "dark" + PAYLOAD not in html


def test_a_reader_sentence_with_markup_is_escaped_wherever_it_shows():
    assert "<" not in esc(PAYLOAD) and ">" not in esc(PAYLOAD) and '"' not in esc(PAYLOAD)


def test_limits_say_what_they_did():
    text, note = clip("x" * 1_000_000, 400)
    assert len(text) == 400 and "400" in note
    assert clamp(10**9, 1, 128, "Max new tokens") == (128, "Max new tokens is 1–128: using 128, not 1,000,000,000.")
    assert clamp("12; DROP", 1, 128, "Max new tokens")[1].startswith("Max new tokens must be a whole number")


def test_a_dead_engine_thread_shows_in_the_header():
    from types import SimpleNamespace

    from app.engine_handle import EngineHandle
    from widgets.common.handle import EngineStatus
    from app.engine_status import status_html
    handle = EngineHandle(random_weights=True)
    handle._status = EngineStatus.READY
    handle._llm = SimpleNamespace(loop=SimpleNamespace(alive=True, failure=None))
    assert handle.snapshot().status is EngineStatus.READY
    handle._llm.loop = SimpleNamespace(alive=False, failure="SystemExit: injected")
    snap = handle.snapshot()
    assert snap.status.value == "stopped" and "SystemExit" in snap.detail
    html = status_html(snap)
    assert 'data-state="stopped"' in html and "The engine stopped (SystemExit: injected)" in html
