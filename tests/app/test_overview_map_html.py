"""The overview map's HTML (app/overview_map.py): every stage a link to a chapter that exists, the
compact copy's "you are here", the theme carried, labels escaped, and the live figures from a step."""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

pytest.importorskip("markdown_it")

from app import overview_map as om  # noqa: E402
from app.content import list_chapters  # noqa: E402
from app.links import Links  # noqa: E402

SLUGS = {c.slug for c in list_chapters(strict=True)}


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


@pytest.mark.parametrize("compact", [False, True])
def test_every_stage_links_to_an_existing_chapter(compact):
    html = om.overview_map_html(None, compact=compact)
    stages = re.findall(r'<a class="ovm-link" href="\?chapter=([^"&]+)"[^>]*data-stage="(\w+)"', html)
    assert {k for _, k in stages} == {s.key for s in om.STAGES}       # each stage drawn once, as a link
    assert len(stages) == len(om.STAGES)
    for slug, _ in stages:
        assert slug in SLUGS, slug
    # the journey order: text first, the sampler last of the model, GPU memory last of all
    keys = [k for _, k in stages]
    assert keys[0] == "text" and keys.index("sampler") < keys.index("kv") and keys[-1] == "gpu"
    assert keys.index("attention") > keys.index("blocks") < keys.index("mlp") < keys.index("logits")


def test_every_chapter_has_its_place_on_the_map():
    assert set(om.HERE) == SLUGS                  # a new chapter must say where it sits
    for slug, keys in om.HERE.items():
        assert keys and set(keys) <= {s.key for s in om.STAGES}, slug


@pytest.mark.parametrize("slug", sorted(SLUGS))
def test_the_compact_copy_marks_this_chapters_stages(slug):
    html = om.overview_map_html(slug, compact=True)
    marked = re.findall(r'data-stage="(\w+)"[^>]*aria-current="location"', html)
    assert set(marked) == set(om.HERE[slug])
    if slug == "recap":                     # every stage: one "you are here" for the whole map
        assert html.count("you are here") == 1 and "the whole journey" in html
    else:
        assert html.count("you are here") == len(om.HERE[slug])
    assert html.startswith("<nav ") and "aria-label=" in html


def test_kv_cache_chapter_is_on_the_kv_pages_stage_only():
    html = om.overview_map_html("kv-cache", compact=True)
    assert re.findall(r'data-stage="(\w+)"[^>]*aria-current', html) == ["kv"]
    assert 'aria-current' not in om.overview_map_html(None)          # the cover: nothing is "here"


def test_dark_theme_links_keep_the_theme():
    for compact in (False, True):
        hrefs = _hrefs(om.overview_map_html("tokens", compact=compact, links=Links(dark=True)))
        assert hrefs and all("theme=dark" in h for h in hrefs)
    assert all("theme" not in h for h in _hrefs(om.overview_map_html("tokens", links=Links())))
    idle = om.live_html(None, links=Links(dark=True))
    assert _hrefs(idle) and all("theme=dark" in h for h in _hrefs(idle))


def test_labels_are_escaped(monkeypatch):
    evil = om.Stage("tokens", '<b onmouseover="x">T&</b>', '<i>', "tokens", '<u>', "model", 'say "hi" <script>')
    monkeypatch.setattr(om, "STAGES", tuple(evil if s.key == "tokens" else s for s in om.STAGES))
    html = om.overview_map_html("tokens") + om.overview_map_html("tokens", compact=True)
    assert "<b onmouseover" not in html and "<script>" not in html and "<i>" not in html and "<u>" not in html
    assert "&lt;b onmouseover=&quot;x&quot;&gt;T&amp;&lt;/b&gt;" in html and "&lt;script&gt;" in html


def _stats(entries, free=300, total=364, step=41):
    last = SimpleNamespace(step=step, entries=[SimpleNamespace(request_id=r, kind=k, num_tokens=n,
                                                               num_computed_before=c) for r, k, n, c in entries])
    return SimpleNamespace(last=last, num_blocks=total, num_free_blocks=free)


def test_request_view_reads_this_readers_request_from_the_step():
    stats = _stats([("req-1", "decode", 1, 40), ("req-2", "prefill", 64, 0), ("req-3", "decode", 1, 9)])
    v = om.request_view(stats, {"req-1"}, block_size=16)
    assert v["phase"] == "decode" and v["cached"] == 41 and v["blocks"] == 3     # ceil(41 / 16)
    assert (v["batch"], v["yours"], v["others"]) == (3, 1, 2) and v["kv_used"] == 64
    assert om.request_view(stats, set(), 16) is None
    waiting = om.request_view(stats, {"req-9"}, 16)
    assert waiting["phase"] == "waiting" and waiting["blocks"] == 0
    pre = om.request_view(stats, {"req-2"}, 16)
    assert pre["phase"] == "prefill" and pre["step_tokens"] == 64 and pre["blocks"] == 4
    style = om.live_style(v)
    assert style["--ovm-blocks"] == "3" and style["--ovm-batch"] == "3" and style["--ovm-kv-pct"] == "18"
    assert all(re.fullmatch(r"\d+", x) for x in style.values())    # CSS counters read integers only


def test_live_line_says_the_phase_and_the_blocks_in_words():
    v = om.request_view(_stats([("req-1", "decode", 1, 40), ("req-2", "decode", 1, 5)]), {"req-1"}, 16)
    line = om.live_html(v)
    assert 'data-phase="decode"' in line and "3 KV blocks" in line and "with 1 other request " in line
    assert line.count('class="ovm-kvcell"') == 3 and "ovm-seat-you" in line
    alone = om.live_html(om.request_view(_stats([("req-1", "decode", 1, 0)]), {"req-1"}, 16))
    assert "1 KV block<" in alone and "alone" in alone         # no "1 blocks"
    done = om.live_html(None, done=v)
    assert 'data-phase="done"' in done and "freed" in done
    assert om.live_html(None, compact=True) == ""               # a chapter's header: nothing while idle
    assert 'data-phase="idle"' in om.live_html(None)


def test_the_first_paint_preview_shows_the_static_map():
    pytest.importorskip("panel")
    from app.shell import preview_html
    cover = preview_html("", "", [om.overview_map(None)])
    assert '<div class="ovm-block ovm-block-full">' in cover and 'data-stage="gpu"' in cover
    assert "live widget appears here" not in cover         # drawn, not a placeholder
    chapter = preview_html("", "", [om.overview_map("kv-cache", compact=True)])
    assert "ovm-block-compact" in chapter and 'aria-current="location"' in chapter
