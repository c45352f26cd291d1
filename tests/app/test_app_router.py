"""Routing without a browser: bad directives become visible notices, never exceptions."""
from __future__ import annotations

import pytest

pytest.importorskip("panel")
pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app import router  # noqa: E402
from app.render import Notice, PlannedWidget, WidgetSegment  # noqa: E402


def _text(pane) -> str:
    return pane.object if hasattr(pane, "object") else ""


def test_unknown_widget_directive_shows_a_notice():
    pane = router._segment(WidgetSegment("no-such-widget", {}), dark=False)
    assert "Unknown widget" in _text(pane) and 'role="alert"' in _text(pane)


def test_widget_with_bad_arguments_shows_a_notice(monkeypatch):
    monkeypatch.setattr(router, "shared_engine", lambda: object())
    pane = router._segment(WidgetSegment("generate", {"no_such_arg": 1}), dark=False)
    assert "could not be built" in _text(pane)


def test_planned_widget_and_notice_render_as_text():
    assert "coming" in _text(router._segment(PlannedWidget("tokenizer", "type <b>text</b>"), dark=False))
    assert "&lt;b&gt;" in _text(router._segment(PlannedWidget("tokenizer", "type <b>text</b>"), dark=False))
    assert 'role="alert"' in _text(router._segment(Notice("broken"), dark=False))


@pytest.mark.parametrize("value", [[b"x" * 100_000], [b"\xff\xfe<script>"], [], None])
def test_query_arguments_are_bounded_and_decoded(value):
    args = {} if value is None else {"chapter": value}
    got = router._arg(args, "chapter")
    assert got is None or (isinstance(got, str) and len(got) <= router.MAX_ARG_BYTES)
