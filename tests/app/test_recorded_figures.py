"""GPU figures in the chapters come from the recorded files: every {recorded:...} a chapter names is in its
file (or reads "not recorded yet" when the file does not exist), and no chapter types a recorded label itself."""
from __future__ import annotations

import pytest

pytest.importorskip("markdown_it")
pytest.importorskip("mdit_py_plugins")

from app import recorded_figures as rf  # noqa: E402
from app.content import list_chapters  # noqa: E402
from app.glossary import load_glossary  # noqa: E402
from app.render import ChapterRenderer  # noqa: E402
from engine import load_recorded  # noqa: E402

CHAPTERS = list_chapters(strict=True)
LATENCY = {"name": "latency", "device": "NVIDIA H200", "date": "2026-11-26", "commit": "abc",
           "command": "python -m engine bench latency --random-weights",
           "results": {"rows": [{"batch": 1, "prompt_tokens": 128, "itl_ms": 2.4137, "ttft_ms": 9.0},
                                {"batch": 8, "prompt_tokens": 128, "itl_ms": 2.9, "ttft_ms": 20.0}],
                       "kv_cache_speedup": {"speedup": 7.25}}}


def render(text: str) -> str:
    return ChapterRenderer(load_glossary(), lambda a: a).render(text).segments[0].html


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_every_recorded_figure_a_chapter_names_is_in_its_recorded_file(chapter):
    body = chapter.body
    assert body.count("{recorded") == len(rf.FIGURE_RE.findall(body)) + len(rf.SOURCE_RE.findall(body)), \
        "a malformed {recorded...} directive"
    for m in rf.FIGURE_RE.finditer(body):
        rec = load_recorded(m["name"])
        if rec is None:
            assert rf.figure(m["name"], m["path"], m["fmt"]) == (rf.NOT_YET, None)
        else:                                   # raises MissingFigure when the file lacks the number
            assert rf.lookup(rec["results"], m["path"]) is not None, m.group(0)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_no_chapter_types_a_recorded_label_itself(chapter):
    text = chapter.body.lower()
    assert "(recorded" not in text and "recorded on" not in text and "recorded by" not in text


def test_the_gpu_chapters_show_recorded_figures():
    by_number = {c.number: c.body for c in CHAPTERS}
    for n, name in ((11, "latency"), (12, "latency"), (14, "throughput"), (20, "latency"), (20, "throughput")):
        assert f"{{recorded:{name}:" in by_number[n] and f"{{recorded-source:{name}}}" in by_number[n], (n, name)


def test_a_recorded_figure_renders_its_value_and_label(monkeypatch):
    monkeypatch.setattr(rf, "load_recorded", lambda name: LATENCY if name == "latency" else None)
    html = render("ITL {recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms}, "
                  "{recorded:latency:kv_cache_speedup.speedup|x}; {recorded-source:latency}.")
    assert ">2.41 ms</span>" in html and ">7.25×</span>" in html
    assert 'title="measured on NVIDIA H200 (recorded by `python -m engine bench latency --random-weights`, 2026-11-26)"' in html
    assert "measured on NVIDIA H200 (recorded by <code>python -m engine bench latency --random-weights</code>" in html


def test_missing_files_and_paths_say_not_recorded_yet(monkeypatch):
    monkeypatch.setattr(rf, "load_recorded", lambda name: None)
    html = render("{recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms} and {recorded-source:latency}")
    assert html.count("not recorded yet") == 2 and "python -m engine bench latency --record" in html
    monkeypatch.setattr(rf, "load_recorded", lambda name: LATENCY)
    assert "not recorded yet" in render("{recorded:latency:rows[batch=64,prompt_tokens=128].itl_ms|ms}")


def test_lookup_selects_exactly_one_row():
    rows = LATENCY["results"]
    assert rf.lookup(rows, "rows[batch=8,prompt_tokens=128].ttft_ms") == 20.0
    for bad in ("rows[prompt_tokens=128].itl_ms", "rows[batch=2].itl_ms", "rows.itl_ms", "kv_cache_speedup",
                "nothing.here"):
        with pytest.raises(rf.MissingFigure):
            rf.lookup(rows, bad)
    assert [rf.format_value(v, f) for v, f in ((31234.5, "tok/s"), (0.456, "pct"), (4262.7, "gb/s"), (125.4, "ms"))] \
        == ["31,234 tokens/s", "46%", "4,263 GB/s", "125 ms"]


def test_chapter_11_explains_a_flat_ttft_only_while_the_recording_is_flat():
    # The prose says the two recorded first-token times are nearly equal and why; a re-recorded file whose
    # TTFT climbs with the prompt must take that paragraph with it (this test then says so).
    from widgets.prefill_decode.view import flat_ttft_note
    body = next(c for c in list_chapters() if c.slug == "prefill-and-decode").body
    rows = load_recorded("latency")["results"]["rows"]
    one = {r["prompt_tokens"]: r["ttft_ms"] for r in rows if r["batch"] == 1}
    says_flat = "Those two are nearly equal" in body
    assert says_flat == (one[2048] < 1.5 * one[128]), "chapter 11's flat-TTFT paragraph no longer fits latency.json"
    assert bool(flat_ttft_note([r for r in rows if r["batch"] == 1])) == says_flat


def test_flat_ttft_note_needs_a_long_span_that_barely_grows():
    from widgets.prefill_decode.view import flat_ttft_note
    flat = [{"prompt_tokens": 128, "ttft_ms": 17.2}, {"prompt_tokens": 2048, "ttft_ms": 18.3}]
    assert "barely grows from 128 to 2,048" in flat_ttft_note(flat)
    climbs = [{"prompt_tokens": 128, "ttft_ms": 3.0}, {"prompt_tokens": 2048, "ttft_ms": 30.0}]
    short = [{"prompt_tokens": 128, "ttft_ms": 17.2}, {"prompt_tokens": 256, "ttft_ms": 17.3}]
    assert flat_ttft_note(climbs) == flat_ttft_note(short) == flat_ttft_note(flat[:1]) == ""
