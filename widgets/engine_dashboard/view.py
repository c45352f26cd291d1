"""What the engine dashboard shows for one view (compute.py), as HTML:

    step 412 · batch: [you · decode 1] [reader · prefill 64] [reader · decode 1]   ← the last step
    token budget  ██░░░░░░░░  66 of 2,048          KV blocks  █░░░░░░░  12 of 364
    running 3 · waiting 0 · preemptions 0 · prefix-cache hits 41% · 23 tokens/s · 4,120 steps

Each chip and meter carries its tip in ``data-tip`` (the readout shows the hovered one, assets/widgets.js).
"""
from __future__ import annotations

from widgets.common import esc, label_html
from widgets.common.sharing import SEATS

MAX_CHIPS = 48               # a batch wider than this shows its first chips and "+N more"


def _bar(used: int, total: int, name: str, tip: str) -> str:
    share = used / total if total else 0.0
    return (f'<div class="dash-meter" tabindex="0" data-link="dash-{name}" data-tip="{esc(tip)}" title="{esc(tip)}">'
            f'<span class="dash-meter-name">{name}</span>'
            f'<span class="dash-track"><span class="dash-fill" style="width:{100 * share:.1f}%"></span></span>'
            f'<span class="dash-meter-num">{used:,} of {total:,}</span></div>')


def dashboard_html(view: dict, label: str) -> str:
    chips = []
    for i, e in enumerate(view["batch"][:MAX_CHIPS]):
        api = e.get("api", False)
        who, whose, cls = (("you", "your request", "yours") if e["yours"] else
                           ("API", "a request to the server’s OpenAI-compatible API (/v1)", "api") if api else
                           ("reader", "another reader’s request", "other"))
        tip = (f"{whose}: {e['kind']} of {e['tokens']} token{'s' * (e['tokens'] != 1)}, "
               f"{e['cached']} already in its KV cache")
        chips.append(f'<span class="dash-chip dash-{cls} dash-{esc(e["kind"])}" '
                     f'tabindex="0" data-link="dash-c{i}" data-tip="{esc(tip)}" title="{esc(tip)}">'
                     f'{who} · {esc(e["kind"])} {e["tokens"]}</span>')
    more = len(view["batch"]) - MAX_CHIPS
    if more > 0:
        chips.append(f'<span class="dash-more">+{more} more</span>')
    if view["step"] is None:
        batch = '<p class="dash-idle">No step has run yet: press Generate in chapter 1 and watch it arrive.</p>'
    else:
        idle = "" if view["running"] or view["waiting"] else " (idle now: nobody is generating)"
        batch = (f'<p class="dash-batch-head">Step {view["step"]:,}{idle}: its batch</p>'
                 f'<div class="dash-chips">{"".join(chips)}</div>')
    hit = "—" if view["hit_rate"] is None else f"{100 * view['hit_rate']:.0f}%"
    rate = "—" if view["tokens_per_s"] is None else f"{view['tokens_per_s']:.0f}"
    queued = (f" · <b>{view['queued']}</b> in line for a seat (the server streams {SEATS} replies at once)"
              if view["queued"] else "")
    facts = (f'<p class="dash-facts">running <b>{view["running"]}</b> · waiting <b>{view["waiting"]}</b> · '
             f'swapped <b>{view["swapped"]}</b>{queued} · preemptions <b>{view["preemptions"]:,}</b> · '
             f'prefix-cache hits <b>{hit}</b> · tokens/s <b>{rate}</b> · steps <b>{view["steps"]:,}</b></p>')
    meters = (_bar(view["step_tokens"], view["budget"], "token budget",
                   "tokens computed in this step, against the most one step may batch")
              + _bar(view["kv_used"], view["kv_blocks"], "KV blocks", "KV-cache blocks held by requests now"))
    return (f'<div class="dash">{batch}<div class="dash-meters">{meters}</div>{facts}'
            f'<p class="hover-readout dash-readout" aria-live="polite">Hover or focus a request or a meter.</p>'
            f'<p class="dash-label">{label_html(label)}</p></div>')
