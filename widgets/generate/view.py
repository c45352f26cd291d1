"""What the generate widget shows for a Reply (compute.py), as HTML: the reply one token at a time, and
the pass counter with its times. Every piece of reader or model text is escaped here."""
from __future__ import annotations

from widgets.common import describe, esc, label_html, measured
from widgets.common.text import plural, show_token
from widgets.common.sharing import SEATS
from widgets.generate.compute import Reply

PLACEHOLDER = ('<div class="gen-out" aria-live="polite"><span class="placeholder">'
               "Press Generate: the reply appears here one token at a time.</span></div>")


def output_html(reply: Reply) -> str:
    # Hovering a token shows its id: the number the model actually produced.
    toks = "".join(f'<span class="tok" title="token id {tid}">{esc(t)}</span>' for tid, t in reply.tokens)
    if reply.queued:
        toks = (f'<span class="placeholder gen-queued">Waiting in line: place {reply.queued} (the server '
                f"streams {SEATS} replies at once; readers share one engine).</span>")
    elif reply.reason is None and not reply.tokens:
        toks = '<span class="placeholder">Waiting for the first token…</span>'
    return f'<div class="gen-out" aria-live="polite">{toks}</div>'


def stats_html(reply: Reply, llm, label: str | None = None) -> str:
    """The pass counter; times are labelled ``label`` (a saved reply's) or measured on ``llm``'s device."""
    p = reply.passes
    head = (f'Forward passes: <b class="gen-passes">{p.passes}</b> · tokens generated: '
            f'<b class="gen-tokens">{len(reply.tokens)}</b>')
    lines = [esc(line) for line in describe(p)] if p.passes else []
    times = []
    if p.prefill_passes:
        times.append(f"prefill {1000 * p.prefill_s:.0f} ms")
    if p.decode_median_s is not None:
        times.append(f"{1000 * p.decode_median_s:.0f} ms per decode pass (median of {len(p.decode_s)})")
    if times:
        source = label or measured(llm.device_name) + " by the engine's step trace"
        lines.append(" · ".join(times) + " · " + label_html(source))
    if reply.reason:
        lines.append({"stop": "stopped: end of reply", "length": "stopped: token limit",
                      "abort": "stopped early"}.get(reply.reason, f"stopped: {esc(reply.reason)}"))
    items = "".join(f"<li>{line}</li>" for line in lines)
    return f'<div class="gen-stats"><p>{head}</p><ul>{items}</ul>{prompt_html(reply.prompt_tokens)}</div>'


ROLE_TIPS = {"yours": "your text", "template": "added by the chat template",
             "special": "a special token of the chat template: it marks where a turn begins or ends"}


def prompt_html(pieces: list[tuple[str, str]]) -> str:
    """What the model read, token by token, in a disclosure: the reader's words among the template's."""
    if not pieces:
        return ""
    yours = sum(role == "yours" for _, role in pieces)
    if yours == len(pieces):
        summary = f"What the model reads: your {plural(yours, 'token')}"
    else:
        summary = (f"What the model reads: {plural(len(pieces), 'token')}, your {yours} inside the model's "
                   f"chat template")
    chips = "".join(f'<span class="gen-ptok gen-p-{role}" title="{esc(ROLE_TIPS[role])}">{esc(show_token(text))}</span>'
                    for text, role in pieces)
    note = ("" if yours == len(pieces) else
            '<p class="gen-tpl-note">Boxed: special tokens that open and close each turn. The template adds a '
            "system turn before yours and opens the assistant's turn after it: the model was trained to "
            "continue from there, so that is where its reply begins. Highlighted: your words.</p>")
    return (f'<details class="gen-template"><summary>{summary}</summary>'
            f'<div class="gen-ptoks">{chips}</div>{note}</details>')
