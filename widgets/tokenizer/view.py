"""What the tokenizer playground shows, as HTML: each tokenizer's column of coloured spans and id row,
the samples' table, and the length line. Everything from the reader is escaped here.

Each coloured span and its ids in the id row share a ``data-link`` value: hovering one lights the
other (assets/widgets.js).
"""
from __future__ import annotations

from widgets.common import esc, label_html, plural, show_token
from widgets.common.sentence import SENTENCE_LIMIT
from widgets.tokenizer.compute import Tokenized

NUM_COLOURS = 6          # --w-c0 … --w-c5 in assets/widgets.css


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


def columns_html(results: list[Tokenized], show_ws: bool, label: str, prefix: str = "") -> str:
    """The two columns side by side (keys "s" and "g": SmolLM2's, then GPT-2's), each with the label."""
    label = f'<p class="tk-label">{label_html(label)}</p>'
    cols = "".join(render(tk, key, show_ws, label) for tk, key in zip(results, "sg"))
    return f'{prefix}<div class="tk-cols">{cols}</div>'


def samples_html(stats: dict, label: str) -> str:
    names = list(next(iter(stats.values()))) if stats else []
    # Long names may break after a hyphen; "GPT-2" must not.
    head = "".join(f"<th>{esc(n).replace('-', '-<wbr>') if len(n) > 12 else esc(n)}</th>" for n in names)
    rows = []
    for kind, by_tok in stats.items():
        cells = "".join(f"<td><b>{chars / tokens:.1f}</b> <span class=\"w-small\">({tokens:,})</span></td>"
                        if tokens else "<td>–</td>" for tokens, chars in by_tok.values())
        chars = next(iter(by_tok.values()))[1]
        rows.append(f"<tr><th scope=\"row\">{esc(kind)} <span class=\"w-small\">({chars} characters)</span></th>{cells}</tr>")
    return (f'<table class="tk-samples"><caption>Characters per token (and tokens) for the three samples '
            f"{label_html(label)}</caption><thead><tr><th>sample</th>{head}</tr></thead>"
            f'<tbody>{"".join(rows)}</tbody></table>')


def length_html(text: str, limit: int) -> str:
    """'2,000 characters · limit 20,000', and whether the text still fits in the page's link."""
    shared = "" if len(text) <= SENTENCE_LIMIT else " · too long to carry in the page's link"
    return f'<p class="w-small tk-length">{len(text):,} characters · limit {limit:,}{shared}</p>'
