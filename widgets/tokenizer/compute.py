"""Text -> coloured token spans and an id row, for the tokenizer playground (no Panel here).

The engine's tokenizer gives each token a character span, widened to whole visible characters
(grapheme clusters), so a span never splits what the reader sees. When several tokens share one
visible character (an emoji is 4 UTF-8 bytes, often 2–4 byte-level tokens), their spans overlap;
we merge them into one coloured segment that carries all their ids:

    text      W h a t ␣ i s ␣ 👋🏽
    tokens    [What][␣is][␣][👋🏽 byte tokens 1..4 ]
    segments  [What][␣is][␣][        👋🏽        ]   <- one segment, ids [.., .., .., ..]

So the segments' texts, in order, are exactly the input text. Each segment and its ids in the id row
share a ``data-link`` value: hovering one lights the other (assets/widgets.js).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import regex

from widgets.common.text import esc, plural, show_token

NUM_COLOURS = 6          # --w-c0 … --w-c5 in assets/widgets.css


@dataclass(slots=True)
class Segment:
    start: int                     # [start, end) character offsets into the text
    end: int
    ids: list[int] = field(default_factory=list)    # tokens drawn as this one span (empty: untokenized gap)
    first: int = 0                 # index of its first token


@dataclass(slots=True)
class Tokenized:
    name: str                      # the tokenizer's name, as the engine reports it
    vocab_size: int
    text: str
    ids: list[int]
    segments: list[Segment]
    took_s: float = 0.0            # server time to tokenize and place the spans

    @property
    def num_chars(self) -> int:
        """Visible characters (grapheme clusters): what a reader would count."""
        return count_chars(self.text)

    @property
    def chars_per_token(self) -> float | None:
        return self.num_chars / len(self.ids) if self.ids else None


def count_chars(text: str) -> int:
    return len(regex.findall(r"\X", text))


def segments_from_spans(text: str, spans: list[tuple[int, int]]) -> list[Segment]:
    """Merge overlapping token spans into segments that tile the text exactly."""
    segs: list[Segment] = []
    cursor = 0
    for i, (s, e) in enumerate(spans):
        if segs and segs[-1].ids and (s < segs[-1].end or e <= s):   # shares a visible character (or is empty)
            segs[-1].end = max(segs[-1].end, e)
            segs[-1].ids.append(i)
            cursor = segs[-1].end
            continue
        if s > cursor:                                          # text no token covers (never in byte BPE)
            segs.append(Segment(cursor, s))
        segs.append(Segment(max(s, cursor), max(e, s, cursor), [i], i))
        cursor = max(cursor, e)
    if cursor < len(text):
        segs.append(Segment(cursor, len(text)))
    return segs


def tokenize(tokenizer, text: str) -> Tokenized:
    """One tokenizer's view of ``text``: ids, and segments whose ids are token positions."""
    t0 = time.perf_counter()
    enc = tokenizer.encode(text)
    segs = segments_from_spans(text, enc.spans)
    for seg in segs:                                           # positions -> token ids
        seg.ids = [enc.ids[i] for i in seg.ids]
    return Tokenized(tokenizer.name, tokenizer.vocab_size, text, enc.ids, segs, time.perf_counter() - t0)


def _visible(text: str, show_ws: bool) -> str:
    out = esc(text)
    if show_ws:
        out = (out.replace(" ", '<span class="ws">·</span>').replace("\t", '<span class="ws">→</span>\t')
               .replace("\n", '<span class="ws">↵</span>\n'))
    return out


def render(tk: Tokenized, key: str, show_ws: bool = False, label: str = "") -> str:
    """One tokenizer's column: name, counts, coloured spans, the id row, the hover readout."""
    n = len(tk.ids)
    cpt = f"{tk.chars_per_token:.1f}" if tk.chars_per_token else "–"
    spans, ids = [], []
    colour = 0
    for seg in tk.segments:
        piece = tk.text[seg.start:seg.end]
        if not seg.ids:
            spans.append(_visible(piece, show_ws))
            continue
        link = f"{key}{seg.first}"
        which = (f"token {seg.first + 1}" if len(seg.ids) == 1
                 else f"tokens {seg.first + 1}–{seg.first + len(seg.ids)} (one character, {len(seg.ids)} byte-level tokens)")
        id_text = " ".join(str(i) for i in seg.ids)
        tip = esc(f"{which} of {n}: “{show_token(piece)}” = id {id_text}")
        spans.append(f'<span class="tk c{colour % NUM_COLOURS}" data-link="{link}" data-tip="{tip}">'
                     f"{_visible(piece, show_ws)}</span>")
        # The id row's spans borrow the tip of their coloured span (widgets.js): half the bytes.
        ids.extend(f'<span class="tid c{colour % NUM_COLOURS}" data-link="{link}">{tid}</span>' for tid in seg.ids)
        colour += 1
    empty = '<span class="placeholder">(empty: type something)</span>' if not tk.text else ""
    return (f'<div class="tk-col" data-tokenizer="{esc(key)}">'
            f'<p class="tk-head"><b>{esc(tk.name)}</b> · vocabulary {tk.vocab_size:,}</p>'
            f'<p class="tk-stats"><b class="tk-count">{plural(n, "token")}</b> · '
            f'{plural(tk.num_chars, "character")} · {cpt} characters per token</p>'
            f'<div class="tk-out">{"".join(spans)}{empty}</div>'
            f'<div class="tk-ids" aria-label="token ids">{" ".join(ids)}</div>'
            f'<p class="hover-readout w-small" aria-live="polite">Hover or tap a coloured piece to see its id.</p>'
            f'{label}</div>')
