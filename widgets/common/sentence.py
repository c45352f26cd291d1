"""The reader's sentence, carried from widget to widget in the URL; each chapter's worked example stays.

What a reader types into chapter 2's tokenizer travels with them, so one reader can follow one
sentence from tokens to logits to KV blocks, and a copied link shares it:

    ?chapter=attention&sentence=My%20dog%20chased%20the%20red%20ball          the chapter's example
    ?chapter=attention&sentence=My%20dog%20chased%20the%20red%20ball&mine=1   the reader's sentence

The prose of every chapter quotes figures from its own example ("␣is gives 0.89 to ␣capital"), so a
carried sentence never replaces the example silently: each sentence-driven widget opens on the
chapter's example and offers one control, "Use my sentence: “…”", which reloads the page with
``mine=1``; then it reads "Back to the chapter's example". ``mine`` is the page's own choice: links to
other chapters carry ``sentence`` but never ``mine`` (assets/widgets.js), so every chapter opens on its
example again. No sentence, or one equal to the example, shows no control.

* A widget whose text box *is* the reader's sentence adds ``SENTENCE_SOURCE`` to that box's
  ``css_classes``. The page script copies the box's text into the URL as you type
  (``history.replaceState``: no reload, no extra Back-button entries) with ``mine=1``: typing your own
  sentence is using it. The control follows the URL (the script keeps its label and link in step).
* A widget reads the text it starts from with ``Widget.reader_sentence(example)`` (widgets/common/base.py):
  the URL's sentence when ``mine=1`` (cut to ``SENTENCE_LIMIT`` characters), else ``example``; the base
  puts the control under the widget's status line. ``reader_sentence(example)`` here is the same choice
  without the control. It is reader text: escape it.
"""
from __future__ import annotations

from urllib.parse import quote, urlencode

import panel as pn

from widgets.common.text import esc

SENTENCE_ARG = "sentence"
MINE_ARG = "mine"              # "1": this page's widgets use the carried sentence instead of the example
SENTENCE_LIMIT = 1000          # characters kept in the URL (longer text is used, but not shared)
SENTENCE_SOURCE = "sentence-source"
CHOICE = "sentence-choice"     # the control's class: assets/widgets.js finds it and keeps it in step
MAX_ARG_BYTES = 4096
LABEL_CHARS = 60               # the label's text is cut here (CSS ellipsis cuts it sooner on a phone)


def _text(raw) -> str:
    raw = raw[:MAX_ARG_BYTES]
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


def session_args() -> dict[str, list]:
    """This session's query arguments ({} outside a session)."""
    from widgets.common.gate import in_session     # (gate → theme → this module: imported when called)
    return (pn.state.session_args or {}) if in_session() else {}


def query_arg(name: str, args: dict | None = None) -> str | None:
    """One query argument of this session's URL (or of ``args``) as text; None when absent."""
    values = (session_args() if args is None else args).get(name) or []
    return _text(values[0]) if values else None


def carried_sentence(args: dict | None = None) -> str | None:
    """The sentence the reader brought in the URL (cut to the limit), or None when there is none."""
    value = query_arg(SENTENCE_ARG, args)
    if value is None or not value.strip():
        return None
    return value[:SENTENCE_LIMIT]


def uses_mine(args: dict | None = None) -> bool:
    """Whether this page was asked to use the carried sentence (``mine=1``)."""
    return query_arg(MINE_ARG, args) in ("1", "true", "yes")


def reader_sentence(example: str, args: dict | None = None) -> str:
    """The text a widget starts from: the reader's sentence if this page uses it, else the example."""
    sentence = carried_sentence(args)
    return sentence if sentence is not None and uses_mine(args) else example


def page_href(args: dict, mine: bool) -> str:
    """A link to this same page with ``mine`` set or cleared, every other argument kept (relative: the
    browser resolves ``?…`` against the page's own path)."""
    pairs = [(k, _text(v)) for k, values in args.items() if k != MINE_ARG for v in values]
    if mine:
        pairs.append((MINE_ARG, "1"))
    return "?" + urlencode(pairs, quote_via=quote)


def choice_html(example: str, args: dict | None = None) -> str:
    """The one control: "Use my sentence: “…”" (showing the example) or "Back to the chapter's example"
    (showing the reader's). Always rendered, hidden when there is nothing to choose, so that the page
    script can show it once the reader types a sentence of their own."""
    args = session_args() if args is None else args
    sentence, mine = carried_sentence(args), uses_mine(args)
    show = sentence is not None and sentence.strip() != example.strip()
    if show and mine:
        verb, quoted, hint = "Back to the chapter's example", "", "Your sentence is shown; the text quotes the example's figures."
        name = verb
    else:
        short = (sentence or "")[:LABEL_CHARS] + ("…" if len(sentence or "") > LABEL_CHARS else "")
        verb, quoted, hint = "Use my sentence:", f"“{short}”", ""
        name = f"Use my sentence: “{sentence or ''}”"
    return (f'<div class="sc-row"{"" if show else " hidden"}>'
            f'<a class="{CHOICE}" href="{esc(page_href(args, not mine))}" data-mine="{0 if mine else 1}" '
            f'data-example="{esc(example)}" title="{esc(name)}" aria-label="{esc(name)}">'
            f'<span class="sc-verb">{esc(verb)}</span> <span class="sc-text">{esc(quoted)}</span></a>'
            f'<span class="w-small sc-hint">{esc(hint)}</span></div>')
