"""Chapters on disk: discovery, front matter, and the only way a URL slug becomes a file.

A slug from the URL is never joined into a path. We list ``content/NN-slug.md`` once per call,
build a ``slug -> Chapter`` map from the names we found, and look the slug up in that map. A slug
that is not a key (``../../etc/passwd``, 10 kB of text, ``<script>``) simply is not found.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
CONTENT_DIR = ROOT / "content"

# The four parts of the book; a chapter names its own in its front matter (`part: 2`). Chapter numbers
# are fixed by file name.
PARTS: dict[int, str] = {
    1: "Foundations",
    2: "How serving actually works",
    3: "vLLM internals",
    4: "Scaling out",
}

FILE_RE = re.compile(r"^(?P<num>\d{2})-(?P<slug>[a-z0-9]+(?:-[a-z0-9]+)*)\.md$")
# Shape check before the map lookup: cheap, and it keeps junk out of log lines.
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_SLUG_LEN = 64


@dataclass(slots=True, frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    subtitle: str
    part: int
    minutes: int
    body: str          # Markdown after the front matter
    path: Path


class FrontMatterError(ValueError):
    pass


def split_front_matter(text: str) -> tuple[dict, str]:
    """Return (front matter dict, body). The block must be the first thing in the file."""
    if not text.startswith("---"):
        raise FrontMatterError("file does not start with a '---' front-matter block")
    lines = text.splitlines(keepends=True)
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            meta = yaml.safe_load("".join(lines[1:i])) or {}
            if not isinstance(meta, dict):
                raise FrontMatterError("front matter is not a mapping")
            return meta, "".join(lines[i + 1:])
    raise FrontMatterError("front-matter block is not closed with '---'")


def default_part(number: int) -> int:
    # Fallback when a writer leaves out `part:`: chapters 1-10, 11-14, 15-18 and 19-21.
    return 1 if number <= 10 else 2 if number <= 14 else 3 if number <= 18 else 4


_PARSED: dict[tuple[Path, object], tuple[tuple[int, int], object]] = {}


def parsed(path: Path, parse):
    """``parse(path)``, parsed again only when the file changed (its mtime or size). Every page view
    reads the chapter list and the glossary; parsing their YAML each time was ~40% of a page's build on
    the server. Writers still see an edit on the next page view."""
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _PARSED.get((path, parse))
    if hit is not None and hit[0] == stamp:
        return hit[1]
    value = parse(path)
    _PARSED[(path, parse)] = (stamp, value)
    return value


def load_chapter(path: Path) -> Chapter:
    return parsed(path, _read_chapter)


def _read_chapter(path: Path) -> Chapter:
    m = FILE_RE.match(path.name)
    if m is None:
        raise FrontMatterError(f"{path.name}: not an NN-slug.md file name")
    meta, body = split_front_matter(path.read_text(encoding="utf-8"))
    number = int(m["num"])
    part = int(meta.get("part") or default_part(number))
    return Chapter(
        number=number,
        slug=m["slug"],
        title=str(meta.get("title") or m["slug"].replace("-", " ").capitalize()),
        subtitle=str(meta.get("subtitle") or ""),
        part=part if part in PARTS else default_part(number),
        minutes=int(meta.get("minutes") or 0),
        body=body,
        path=path,
    )


def list_chapters(content_dir: Path = CONTENT_DIR, strict: bool = False) -> list[Chapter]:
    """Every chapter file present now, in book order. Writers add files while the server runs, so the
    folder is listed per page view (a file is parsed again only once it changed). With ``strict=False``
    (the server) a file with broken front matter is skipped and logged, so one bad file cannot take the
    site down; the tests call it with ``strict=True`` so the bad file fails CI instead."""
    chapters = []
    for p in sorted(content_dir.glob("[0-9][0-9]-*.md")):
        if not FILE_RE.match(p.name):
            continue
        try:
            chapters.append(load_chapter(p))
        except (FrontMatterError, yaml.YAMLError, ValueError, OSError) as exc:
            if strict:
                raise
            log.warning("skipping %s: %s", p.name, exc)
    return sorted(chapters, key=lambda c: c.number)


def is_plausible_slug(slug: str | None) -> bool:
    return bool(slug) and len(slug) <= MAX_SLUG_LEN and SLUG_RE.match(slug) is not None


def find_chapter(slug: str | None, chapters: list[Chapter]) -> Chapter | None:
    """Look a URL slug up among the chapters we listed. Never touches the file system."""
    if not is_plausible_slug(slug):
        return None
    return next((c for c in chapters if c.slug == slug), None)


def neighbours(chapter: Chapter, chapters: list[Chapter]) -> tuple[Chapter | None, Chapter | None]:
    i = next(i for i, c in enumerate(chapters) if c.slug == chapter.slug)
    prev_ch = chapters[i - 1] if i > 0 else None
    next_ch = chapters[i + 1] if i + 1 < len(chapters) else None
    return prev_ch, next_ch
