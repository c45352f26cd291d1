"""Chapter files, slugs and the table of contents (no server, no browser)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mdit_py_plugins")     # app.toc counts each chapter's widgets and questions (not on the GPU machine)

from app.content import find_chapter, list_chapters, load_chapter, neighbours, split_front_matter, FrontMatterError  # noqa: E402,E501
from app.toc import table_of_contents  # noqa: E402

CHAPTERS = list_chapters(strict=True)      # strict: a broken front matter fails here, not silently


def test_every_chapter_has_front_matter():
    assert CHAPTERS, "no chapters in content/"
    for c in CHAPTERS:
        assert c.title and c.subtitle, c.path.name
        assert c.part in (1, 2, 3, 4) and c.minutes > 0, c.path.name


def test_numbers_and_slugs_are_unique_and_parts_follow_numbers():
    assert len({c.number for c in CHAPTERS}) == len(CHAPTERS)
    assert len({c.slug for c in CHAPTERS}) == len(CHAPTERS)
    for c in CHAPTERS:
        expected = 1 if c.number <= 10 else 2 if c.number <= 14 else 3 if c.number <= 18 else 4
        assert c.part == expected, f"{c.path.name}: part {c.part}, expected {expected}"


@pytest.mark.parametrize("slug", [
    "../../etc/passwd", "..", "/etc/passwd", "what-is-an-llm/../../x", "x" * 10_000, "<script>",
    "What-Is-An-LLM", "01-what-is-an-llm", "what-is-an-llm.md", "", None, "what-is-an-llm\x00",
])
def test_find_chapter_rejects_anything_but_a_listed_slug(slug):
    assert find_chapter(slug, CHAPTERS) is None


def test_find_chapter_finds_listed_slugs():
    for c in CHAPTERS:
        assert find_chapter(c.slug, CHAPTERS) is c


def test_neighbours_walk_the_book_in_order():
    prev_ch, next_ch = neighbours(CHAPTERS[0], CHAPTERS)
    assert prev_ch is None and (next_ch is None or next_ch.number > CHAPTERS[0].number)
    _, last_next = neighbours(CHAPTERS[-1], CHAPTERS)
    assert last_next is None


def test_front_matter_errors_are_reported(tmp_path: Path):
    with pytest.raises(FrontMatterError):
        split_front_matter("no front matter here")
    with pytest.raises(FrontMatterError):
        split_front_matter("---\ntitle: x\n")
    bad = tmp_path / "05-bad.md"
    bad.write_text("---\n- a list\n---\nbody\n")
    with pytest.raises(FrontMatterError):
        load_chapter(bad)
    # The server skips a broken file instead of failing every page.
    good = tmp_path / "01-good.md"
    good.write_text("---\ntitle: Good\nsubtitle: s\npart: 1\nminutes: 3\n---\nbody\n")
    assert [c.slug for c in list_chapters(tmp_path)] == ["good"]
    with pytest.raises(FrontMatterError):
        list_chapters(tmp_path, strict=True)


def test_toc_lists_21_sections_and_uses_front_matter():
    toc = table_of_contents(CHAPTERS)
    assert [e.number for e in toc][:21] == list(range(1, 22))
    by_slug = {e.slug: e for e in toc}
    for c in CHAPTERS:
        e = by_slug[c.slug]
        assert e.available and e.minutes == c.minutes and e.title == c.title
    assert {e.part for e in toc} == {1, 2, 3, 4}


def test_a_file_is_parsed_once_until_it_changes(tmp_path):
    from app.content import parsed
    calls = []

    def parse(path):
        calls.append(path)
        return path.read_text()
    f = tmp_path / "01-demo.md"
    f.write_text("one")
    assert parsed(f, parse) == "one" and parsed(f, parse) == "one" and len(calls) == 1
    f.write_text("two, longer")                      # a writer's edit shows on the next page view
    assert parsed(f, parse) == "two, longer" and len(calls) == 2
