"""The reader's sentence, carried from widget to widget in the URL (one reader follows one sentence from tokens to KV blocks).

What a reader types into chapter 2's tokenizer becomes the default input of every later widget, so
one reader follows one sentence from tokens to logits to KV blocks, and a copied link shares it:

    ?chapter=tokens&sentence=Why%20is%20the%20sky%20blue%3F

* A widget whose text box *is* the reader's sentence adds ``SENTENCE_SOURCE`` to that box's
  ``css_classes``. The page script (assets/widgets.js) copies the box's text into the URL as you type
  (``history.replaceState``: no reload, no extra Back-button entries), and adds it to every link to
  another chapter, so the next page opens with it.
* Any widget reads it with ``reader_sentence(default)``: the URL's sentence, cut to
  ``SENTENCE_LIMIT`` characters, or ``default`` when the URL has none. It is reader text: escape it.
"""
from __future__ import annotations

import panel as pn

SENTENCE_ARG = "sentence"
SENTENCE_LIMIT = 1000          # characters kept in the URL (longer text is used, but not shared)
SENTENCE_SOURCE = "sentence-source"
MAX_ARG_BYTES = 4096


def query_arg(name: str) -> str | None:
    """One query argument of this session's URL as text (None outside a session or when absent)."""
    if pn.state.curdoc is None or pn.state.curdoc.session_context is None:
        return None
    values = pn.state.session_args.get(name) or []
    if not values:
        return None
    raw = values[0][:MAX_ARG_BYTES]
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def reader_sentence(default: str) -> str:
    """The sentence the reader brought in the URL, or ``default``."""
    value = query_arg(SENTENCE_ARG)
    if value is None or not value.strip():
        return default
    return value[:SENTENCE_LIMIT]
