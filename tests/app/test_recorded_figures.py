"""GPU figures in the chapters come from the recorded files: every {recorded:...} a chapter names is in its
file (or reads "not recorded yet" when the file does not exist), every label names the model the figures were
measured with (issue 27 #6: SmolLM2 figures sat under Llama-3-8B tables with nothing saying whose they were),
and no chapter types a recorded label itself."""
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
           "model": {"name": "SmolLM2-135M-Instruct", "weights": "random", "dtype": "bfloat16"},
           "results": {"rows": [{"batch": 1, "prompt_tokens": 128, "itl_ms": 2.4137, "ttft_ms": 9.0},
                                {"batch": 8, "prompt_tokens": 128, "itl_ms": 2.9, "ttft_ms": 20.0}],
                       "kv_cache_speedup": {"speedup": 7.25}}}


def render(text: str) -> str:
    return ChapterRenderer(load_glossary(), lambda a: a).render(text).segments[0].html


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_every_recorded_figure_a_chapter_names_is_in_its_recorded_file(chapter):
    body = chapter.body
    assert body.count("{recorded") == (len(rf.FIGURE_RE.findall(body)) + len(rf.SOURCE_RE.findall(body))
                                       + len(rf.IF_RE.findall(body))), "a malformed {recorded...} directive"
    for m in rf.FIGURE_RE.finditer(body):
        rec = load_recorded(m["name"])
        if rec is None:
            assert rf.figure(m["name"], m["path"], m["fmt"]) == (rf.NOT_YET, None)
        else:                                   # raises MissingFigure when the file lacks the number
            assert rf.lookup(rec["results"], m["path"]) is not None, m.group(0)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_every_recorded_figure_a_chapter_shows_names_its_model(chapter):
    """Each recorded file a chapter cites says which model it measured, and the rendered label says it too."""
    names = {m["name"] for regex in (rf.FIGURE_RE, rf.SOURCE_RE, rf.IF_RE) for m in regex.finditer(chapter.body)}
    html = "".join(getattr(s, "html", "") for s in ChapterRenderer(load_glossary(), lambda a: a)
                   .render(chapter.body).segments)
    for name in sorted(names):
        rec = load_recorded(name)
        if rec is None:
            continue                            # "not recorded yet": nothing to attribute
        model = rf.model_of(rec)                # raises MissingModel: a figure nobody can attribute
        assert model and f"measured on {rec['device']}, {model}" in rf.source_label(rec)
        if f"{{recorded-source:{name}}}" in chapter.body:
            assert html.count(f"{html_escape(model)}, recorded by") >= 1, (name, model)


def html_escape(text: str) -> str:
    import html
    return html.escape(text)


def test_a_recorded_file_without_a_model_shows_no_figure(monkeypatch):
    """The template requires the model: a file that does not name one gives no number and no label."""
    anonymous = {k: v for k, v in LATENCY.items() if k != "model"}
    with pytest.raises(rf.MissingModel):
        rf.model_of(anonymous)
    monkeypatch.setattr(rf, "load_recorded", lambda name: anonymous)
    html = render("ITL {recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms}; {recorded-source:latency}.")
    assert "2.41" not in html and html.count("not recorded yet") == 2
    # older files name the model in their results (latency.json's workload), the kernel benchmark its shapes
    older = dict(anonymous, results={**LATENCY["results"], "workload": {"model": "SmolLM2-135M-Instruct",
                                                                        "weights": "random", "dtype": "bfloat16"}})
    assert rf.model_of(older) == "SmolLM2-135M-Instruct with random weights in bfloat16"
    kernels = dict(anonymous, results={"what": "decode kernel, SmolLM2 attention shapes (9 q heads, 3 kv heads)"})
    assert rf.model_of(kernels) == "SmolLM2 attention shapes: 9 q heads, 3 kv heads"


def test_a_paragraph_waits_for_its_recording(monkeypatch):
    """{recorded-if:NAME|fallback} keeps its paragraph once NAME is recorded, else shows the fallback alone."""
    body = "Before.\n\n{recorded-if:latency|Not measured on a GPU yet.} On a GPU ({recorded-source:latency}), " \
           "{recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms} a token.\n\nAfter."
    monkeypatch.setattr(rf, "load_recorded", lambda name: LATENCY)
    html = render(body)
    assert ">2.41 ms</span>" in html and "Not measured on a GPU yet" not in html and "recorded-if" not in html
    monkeypatch.setattr(rf, "load_recorded", lambda name: None)
    html = render(body)
    assert "Not measured on a GPU yet." in html and "not recorded yet" not in html and "On a GPU" not in html
    assert "Before." in html and "After." in html
    monkeypatch.setattr(rf, "load_recorded", lambda name: {k: v for k, v in LATENCY.items() if k != "model"})
    assert "Not measured on a GPU yet." in render(body)          # no model, no paragraph


def test_chapter_14_cites_serve_sim_as_the_benchmark_writes_it():
    """Chapter 14's GPU paragraph reads fields that `bench serve-sim` really reports (a small CPU run here),
    saved the way the GPU record is made: the report's workload, engine, results and ratios as "results"."""
    from engine.bench import serve_sim
    report = serve_sim.run(["--small", "--num-requests", "6", "--scale", "0.05"])
    results = {k: report[k] for k in ("workload", "engine", "warmup", "results", "continuous_vs_static")}
    body = next(c for c in CHAPTERS if c.number == 14).body
    paths = [m["path"] for m in rf.FIGURE_RE.finditer(body) if m["name"] == "serve-sim"]
    assert len(paths) >= 2 and "{recorded-if:serve-sim|" in body
    for path in paths:
        assert rf.lookup(results, path) > 0, path
    recorded = load_recorded("serve-sim")       # the sentence says what workload it was: the record must agree
    if recorded is not None:
        workload = recorded["results"]["workload"]
        assert "all sent at once" in body and workload["request_rate"] == "all at t=0"
        assert "a mix of chat, summaries and code" in body and workload["pattern"] == "mixed"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda c: c.slug)
def test_no_chapter_types_a_recorded_label_itself(chapter):
    text = chapter.body.lower()
    assert "(recorded" not in text and "recorded on" not in text and "recorded by" not in text


def test_the_gpu_chapters_show_recorded_figures():
    by_number = {c.number: c.body for c in CHAPTERS}
    for n, name in ((11, "latency"), (11, "throughput"), (12, "latency"), (14, "serve-sim"), (20, "latency"),
                    (20, "throughput")):
        assert f"{{recorded:{name}:" in by_number[n] and f"{{recorded-source:{name}}}" in by_number[n], (n, name)


def test_a_recorded_figure_renders_its_value_and_label(monkeypatch):
    monkeypatch.setattr(rf, "load_recorded", lambda name: LATENCY if name == "latency" else None)
    html = render("ITL {recorded:latency:rows[batch=1,prompt_tokens=128].itl_ms|ms}, "
                  "{recorded:latency:kv_cache_speedup.speedup|x}; {recorded-source:latency}.")
    assert ">2.41 ms</span>" in html and ">7.25×</span>" in html
    label = ("measured on NVIDIA H200, SmolLM2-135M-Instruct with random weights in bfloat16, recorded by "
             "`python -m engine bench latency --random-weights`, 2026-11-26")
    assert f'title="{label}"' in html
    assert label.replace("`python", "<code>python").replace("weights`", "weights</code>") in html


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
