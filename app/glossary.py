"""The glossary: terms, aliases and definitions from ``content/glossary.yaml``.

Where ``content/glossary.yaml`` is absent, the files of ``content/glossary-parts/*.yaml`` are read
instead (a writer's terms kept in a part of their own resolve before they are merged into the one file).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from app.content import CONTENT_DIR, parsed


@dataclass(slots=True, frozen=True)
class Term:
    term: str
    aliases: tuple[str, ...]
    short: str
    long: str
    chapter: str          # slug of the chapter that introduces it

    @property
    def anchor(self) -> str:
        return term_anchor(self.term)


def term_anchor(term: str) -> str:
    """A stable, HTML-id-safe anchor: 'KV cache' -> 'kv-cache', 'top-p' -> 'top-p'."""
    slug = re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")
    return slug or "term"


def _key(text: str) -> str:
    # Case-insensitive, whitespace-tolerant: "KV  cache" and "kv cache" are the same mark.
    return " ".join(text.split()).casefold()


@dataclass(slots=True)
class Glossary:
    terms: list[Term]
    _index: dict[str, Term] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for t in self.terms:
            for name in (t.term, *t.aliases):
                # First definition wins; a later duplicate alias must not silently steal a mark.
                self._index.setdefault(_key(name), t)

    def lookup(self, name: str) -> Term | None:
        return self._index.get(_key(name))

    def sorted_terms(self) -> list[Term]:
        return sorted(self.terms, key=lambda t: t.term.casefold())


def _parse(text: str, source: str) -> list[Term]:
    data = yaml.safe_load(text) or []
    if not isinstance(data, list):
        raise ValueError(f"{source}: the glossary must be a YAML list")
    terms = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not item.get("term"):
            raise ValueError(f"{source}: entry {i} has no 'term'")
        terms.append(Term(
            term=str(item["term"]),
            aliases=tuple(str(a) for a in (item.get("aliases") or [])),
            short=str(item.get("short") or ""),
            long=str(item.get("long") or ""),
            chapter=str(item.get("chapter") or ""),
        ))
    return terms


def _read_terms(path: Path) -> tuple[Term, ...]:
    return tuple(_parse(path.read_text(encoding="utf-8"), path.name))


def glossary_sources(content_dir: Path = CONTENT_DIR) -> list[Path]:
    merged = content_dir / "glossary.yaml"
    if merged.exists():
        return [merged]
    return sorted((content_dir / "glossary-parts").glob("*.yaml"))


def load_glossary(content_dir: Path = CONTENT_DIR) -> Glossary:
    terms: list[Term] = []
    for path in glossary_sources(content_dir):
        terms.extend(parsed(path, _read_terms))
    return Glossary(terms)
