"""Reader input is text: escape it, limit it, clamp numbers, and say so when we do.

    esc("<img src=x onerror=alert(1)>")   -> "&lt;img src=x onerror=alert(1)&gt;"   (safe in any pane)
    clip("…25,000 characters…", 20_000)   -> ("…first 20,000…", "Only the first 20,000 characters are used.")
    clamp(500, 1, 128, "Max new tokens")  -> (128, "Max new tokens is 1–128: using 128.")

Every helper returns the note to show beside the input (or None), so a limit is never silent.
``esc`` also hides ``$`` and ``\\`` behind HTML entities: Panel's HTML pane typesets ``$…$`` as math,
and a reader's dollar sign must stay a dollar sign. ``show_token`` writes one token's text the way
the chapters do, with ␣ for a leading space and a visible mark for control characters and other invisible ones.
"""
from __future__ import annotations

import html


def esc(text: object) -> str:
    """HTML-escape anything for a pane (quotes too, so it is safe inside attributes)."""
    return html.escape(str(text), quote=True).replace("\\", "&#92;").replace("$", "&#36;")


def clip(text: str | None, limit: int, what: str = "characters") -> tuple[str, str | None]:
    """At most ``limit`` characters of ``text``, and a note if some were cut."""
    text = text or ""
    if len(text) <= limit:
        return text, None
    return text[:limit], f"Only the first {limit:,} {what} are used (the limit is {limit:,})."


def clamp(value, lo: int, hi: int, what: str) -> tuple[int, str | None]:
    """``value`` as an int in [lo, hi], and a note if it was out of range or not a number."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return lo, f"{what} must be a whole number from {lo} to {hi}: using {lo}."
    if number < lo or number > hi:
        used = min(max(number, lo), hi)
        return used, f"{what} is {lo}–{hi}: using {used}, not {number:,}."
    return number, None


_CONTROL = {"\n": "↵", "\t": "⇥", "\r": "␍"}


def _visible(c: str) -> str:
    """A mark a reader can see for a character that prints as nothing (never Python's "\\xa0").

    Control characters get Unicode's own pictures (U+0007 bell -> ␇, delete -> ␡); a space other than
    the plain one (no-break U+00A0, thin U+2009, ...) gets ⍽, the keyboard symbol for a no-break space,
    so it reads as a space yet differs from ␣; anything else invisible (a zero-width joiner, a soft
    hyphen) is named by its code point."""
    if c.isprintable():
        return c
    code = ord(c)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "␡"
    if c.isspace():
        return "⍽"
    return f"‹U+{code:04X}›"


def show_token(piece: str) -> str:
    """One token's text for a label (not escaped): ␣ for spaces, ↵ ⇥ for line breaks and tabs, and a
    visible mark for any other character that would print as nothing (see ``_visible``)."""
    if not piece:
        return "∅"
    out = piece.replace(" ", "␣")
    for ch, mark in _CONTROL.items():
        out = out.replace(ch, mark)
    return "".join(_visible(c) for c in out)


def plural(n: int, one: str, many: str | None = None) -> str:
    """"1 token", "3 tokens", "12,345 tokens"."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def card_table(columns: tuple[str, ...] | list[str], rows: list[list], table_class: str = "",
               empty: str = "") -> str:
    """A table of runs or requests that never scrolls sideways: in a column narrower than a phone's
    (widgets.css, ``.w-cards``) each row becomes a card of "label: value" lines.

    ``columns`` are plain-text labels; a cell is HTML, or ``(html, css class)``; ``empty`` is the one row
    shown when there are none."""
    def cell(label: str, value) -> str:
        markup, cls = value if isinstance(value, tuple) else (value, "")
        return f'<td data-label="{esc(label)}"' + (f' class="{cls}"' if cls else "") + f">{markup}</td>"

    # a long snake_case header may break after its last underscore
    head = "".join(f"<th>{'_<wbr>'.join(esc(label).rsplit('_', 1))}</th>" for label in columns)
    if rows:
        body = "".join("<tr>" + "".join(cell(label, v) for label, v in zip(columns, row)) + "</tr>" for row in rows)
    else:
        body = f'<tr><td colspan="{len(columns)}" class="placeholder">{empty}</td></tr>'
    return (f'<div class="pd-scroll w-cards"><table class="pd-tab {table_class}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")
