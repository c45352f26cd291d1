"""The glossary file(s): well formed, anchors unique, every introducing chapter exists."""
from __future__ import annotations

import re

from app.content import list_chapters
from app.glossary import Glossary, Term, load_glossary, term_anchor

GLOSSARY = load_glossary()


def test_entries_are_complete():
    assert GLOSSARY.terms, "no glossary entries found"
    for t in GLOSSARY.terms:
        assert t.short and len(t.short) <= 200, t.term
        assert t.long, t.term
        assert t.chapter, t.term


def test_anchors_are_unique_and_html_safe():
    anchors = [t.anchor for t in GLOSSARY.terms]
    assert len(set(anchors)) == len(anchors), [a for a in anchors if anchors.count(a) > 1]
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", a) for a in anchors)


def test_no_name_or_alias_points_at_two_terms():
    owner: dict[str, str] = {}
    clashes = []
    for t in GLOSSARY.terms:
        for name in (t.term, *t.aliases):
            key = " ".join(name.split()).casefold()
            if key in owner and owner[key] != t.term:
                clashes.append(f"{name!r}: {owner[key]} / {t.term}")
            owner.setdefault(key, t.term)
    assert not clashes, clashes


def test_introducing_chapters_exist():
    slugs = {c.slug for c in list_chapters(strict=True)}
    missing = sorted({t.chapter for t in GLOSSARY.terms} - slugs)
    assert not missing, f"glossary entries name chapters that do not exist: {missing}"


def test_lookup_is_case_and_space_insensitive():
    g = Glossary([Term("KV cache", ("key-value cache",), "s", "l", "kv-cache")])
    assert g.lookup("kv  CACHE").term == "KV cache"
    assert g.lookup("Key-Value cache").term == "KV cache"
    assert g.lookup("cache") is None
    assert term_anchor("Top-p sampling") == "top-p-sampling" and term_anchor("<b>") == "b"
