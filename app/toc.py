"""The book's fixed table of contents: 21 sections in four parts.

The cover page lists every section even before its file lands. Whatever a chapter's front matter
says (title, subtitle, minutes) wins over these defaults, so the cover follows the writers.
"""
from __future__ import annotations

from dataclasses import dataclass

from app.content import PARTS, Chapter, default_part
from app.render import DIRECTIVE_RE

# A chapter's "Check yourself" questions each hide their answer behind this summary.
QUESTION_MARK = "<summary>Show answer</summary>"


@dataclass(slots=True, frozen=True)
class TocEntry:
    number: int
    slug: str
    title: str
    subtitle: str
    part: int
    minutes: int | None        # None until the chapter file exists
    available: bool            # a chapter file exists, so the entry is a link
    widgets: int = 0           # widget directives in the chapter: time the minutes do not count
    questions: int = 0         # "Check yourself" questions: likewise


def _extras(c: Chapter) -> tuple[int, int]:
    """How many widgets and questions a chapter holds. Its minutes are the prose's alone (the reading-time
    test counts words at 250 a minute), so the cover names these beside them instead of guessing a time."""
    widgets = sum(1 for line in c.body.splitlines() if DIRECTIVE_RE.match(line.strip()))
    return widgets, c.body.count(QUESTION_MARK)


_DEFAULTS: list[tuple[str, str, str]] = [
    ("what-is-an-llm", "What is an LLM?", 'And what does "inference" mean?'),
    ("tokens", "Tokens", "Text → numbers the model can see"),
    ("embeddings", "Embeddings", "Token IDs → vectors"),
    ("attention", "Attention", "Queries, keys, and values"),
    ("multi-head-attention", "Multi-head attention", "Many attentions in parallel"),
    ("positional-encoding", "Positional encoding", "Telling the model where each token sits"),
    ("mlp-block", "The MLP block", "Per-token nonlinear processing"),
    ("transformer-block", "A full transformer block", "Putting it together"),
    ("full-model", "Stacking into a full model", "From embeddings to logits"),
    ("sampling", "Sampling", "Logits → the next token"),
    ("prefill-and-decode", "Prefill and decode", "The two phases of inference"),
    ("kv-cache", "The KV cache", "Why decode is cheap and memory is expensive"),
    ("gpu-memory-hierarchy", "GPU memory hierarchy", "Where data actually lives on H100s"),
    ("continuous-batching", "Continuous batching", "Stop wasting GPU steps"),
    ("paged-attention", "Paged attention", "KV cache as a page table"),
    ("prefix-caching", "Prefix caching", "Shared system prompts for free"),
    ("chunked-prefill", "Chunked prefill", "Stop blocking decoders with one big prompt"),
    ("speculative-decoding", "Speculative decoding", "Draft fast, verify in bulk"),
    ("scaling-out", "Scaling out", "Tensor parallelism vs pipeline parallelism"),
    ("throughput-vs-latency", "Throughput vs latency", "What knobs move what"),
    ("recap", "Recap", "And further reading"),
]


def table_of_contents(chapters: list[Chapter]) -> list[TocEntry]:
    """All 21 planned sections, each filled from its chapter file when that file exists. A chapter
    file with a slug outside the plan is listed too, so nothing a writer adds is hidden."""
    by_slug = {c.slug: c for c in chapters}
    entries = []
    for number, (slug, title, subtitle) in enumerate(_DEFAULTS, start=1):
        c = by_slug.pop(slug, None)
        if c is None:
            entries.append(TocEntry(number, slug, title, subtitle, default_part(number), None, False))
        else:
            entries.append(TocEntry(c.number, c.slug, c.title, c.subtitle or subtitle, c.part, c.minutes, True,
                                    *_extras(c)))
    for c in by_slug.values():
        entries.append(TocEntry(c.number, c.slug, c.title, c.subtitle, c.part, c.minutes, True, *_extras(c)))
    return sorted(entries, key=lambda e: (e.number, e.slug))


def by_part(entries: list[TocEntry]) -> list[tuple[int, str, list[TocEntry]]]:
    return [(p, name, [e for e in entries if e.part == p]) for p, name in PARTS.items()]
