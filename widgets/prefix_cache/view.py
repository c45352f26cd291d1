"""What the prefix-cache widget (widget.py) shows for one send, as HTML: each request's prompt blocks
with their physical ids, chained hashes and ref counts, hits lit up; then the prefill tokens and TTFT
with caching on and off. Pure functions of the send's data (compute.send_data), so the saved first
example paints exactly like a live send. progress_text says where a send in flight is.

    Q1  [#0 a41f… ref 3][#1 9be1… ref 3][#2 07c2… ref 3][#3 partial]      computed (the first to come)
    Q2  [#0 a41f… ref 3][#1 9be1… ref 3][#2 07c2… ref 3][#4 partial]      three hits, one block computed

Every block carries data-link="b<physical id>": hovering one lights the same physical block in every
row that holds it (assets/widgets.js), and the readout says who holds it and what its hash chains to.
"""
from __future__ import annotations

from statistics import median

from widgets.common import card_table, esc, label_html, plural
from widgets.common.load import busy_note
from widgets.prefix_cache.compute import NEW_TOKENS

LEGEND = ('<p class="pc-legend w-small"><span class="pc-key pc-hit"></span> hit: shared from the cache '
          '<span class="pc-key pc-miss"></span> computed by this request '
          '<span class="pc-key pc-partial"></span> last block, not full: no hash '
          '<span class="pc-key pc-changed"></span> hash differs from your previous send</p>')


def _ms(x: float) -> str:
    return f"{x:,.0f} ms" if x >= 10 else f"{x:.1f} ms"


def block_tip(r: int, b: dict, block_size: int) -> str:
    """The readout for one block (plain text; escaped by the caller)."""
    who = ", ".join(f"Q{o}" for o in b["owners"])
    where = f"Q{r}, block {b['index']} (tokens {b['first']}–{b['last']}): physical block {b['id']}"
    if not b["full"]:
        return (f"{where}, not full ({b['last'] - b['first'] + 1} of {block_size} tokens), so it has no hash "
                f"and cannot be shared; it holds “{b['text']}”")
    chain = f"hash {b['hash']}… = H({'parent ' + b['parent'] + '…' if b['parent'] else 'start'}, these 16 tokens)"
    how = "a hit: its K/V were read from the cache, not computed" if b["hit"] else "computed by this request"
    changed = "; this hash is new since your previous send" if b.get("changed") else ""
    return f"{where}; {chain}; ref count {b['ref']} (held by {who}); {how}{changed}; it holds “{b['text']}”"


def blocks_html(d: dict) -> str:
    """One row per request: its prompt's blocks, in logical order."""
    rows = []
    for r, req in enumerate(d["requests"], 1):
        cells = []
        for b in req["blocks"]:
            kind = "pc-partial" if not b["full"] else ("pc-hit" if b["hit"] else "pc-miss")
            extra = " pc-changed" if b.get("changed") else ""
            tip = esc(block_tip(r, b, d["block_size"]))
            inner = (f'<b>#{b["id"]}</b><small>{esc(b["hash"])}</small><i>ref {b["ref"]}</i>' if b["full"]
                     else f'<b>#{b["id"]}</b><small>partial</small><i>ref {b["ref"]}</i>')
            cells.append(f'<span class="pc-block {kind}{extra}" data-link="b{b["id"]}" data-tip="{tip}" '
                         f'title="{tip}" tabindex="0">{inner}</span>')
        hits = sum(b["hit"] for b in req["blocks"])
        head = (f'<p class="pc-head"><b>Q{r}</b> “{esc(req["question"])}” · {plural(req["prompt_tokens"], "prompt token")}: '
                f'<span class="pc-cached">{req["cached"]:,} from the cache</span> ({plural(hits, "block")}), '
                f'<span class="pc-computed">{req["computed"]:,} computed</span></p>')
        rows.append(f'<div class="pc-row" data-request="{r}">{head}<div class="pc-blocks">{"".join(cells)}</div></div>')
    return (LEGEND + "".join(rows) +
            '<p class="w-small hover-readout" aria-live="polite">Hover or focus a block: the same physical block '
            "lights up in every request that holds it.</p>")


def summary_html(d: dict, label: str) -> str:
    """Prefill tokens and TTFT, caching on against off, and the pool after the send."""
    rows = [[f"Q{i}", f'{q["prompt_tokens"]:,}', f'{q["cached"]:,}', f'{q["computed"]:,}',
             (_ms(q["ttft_on_ms"]), "pc-ttft-on"), (_ms(q["ttft_off_ms"]), "pc-ttft-off")]
            for i, q in enumerate(d["requests"], 1)]
    later = d["requests"][1:]
    if later:
        on, off = median(q["ttft_on_ms"] for q in later), median(q["ttft_off_ms"] for q in later)
        ttft = (f"Time to first token of Q2–Q{len(d['requests'])} (median): <b>{_ms(on)}</b> with caching, "
                f"<b>{_ms(off)}</b> without.")
    else:
        ttft = "Add a second question to see requests share the system prompt's blocks."
    edit = ""
    if d["compared"]:
        changed = [b["index"] for b in d["requests"][0]["blocks"] if b["changed"]]
        edit = (f" Q1's hashes changed from block {changed[0]} on ({plural(len(changed), 'block')}): "
                "each hash folds in the one before it." if changed else
                " Q1's hashes are the same as in your previous send, so its full blocks all hit.")
    return (f'<p class="pc-totals">Prefill computed <b class="pc-prefill-on">{d["prefill_on"]:,} tokens</b> with '
            f'prefix caching and <b class="pc-prefill-off">{d["prefill_off"]:,}</b> without; '
            f'{plural(d["blocks_shared"], "block")} shared instead of computed. {ttft}{edit}</p>'
            + card_table(("request", "prompt tokens", "from the cache", "computed", "TTFT, caching on", "TTFT, off"),
                         rows, "pc-tab") +
            f'<p class="w-small">{label_html(label)} · After the send every request has finished: '
            f'{d["free_after_on"]} of {d["pool_blocks"]} blocks are free, and {d["cached_after_on"]} of them still '
            "hold cached K/V for the next send (a free block is reused, least recently used first, only when "
            "the pool runs out).</p>")


def progress_text(p: dict | None) -> str:
    """Where a send in flight is (compute.PrefixLab.send's progress, posted as each step starts); p["warm"]:
    this is the unedited prompt, sent first to fill an empty cache before the edited send. "" for none."""
    if not p:
        return ""
    n = p["questions"]
    engine = ("Caching on (engine 1 of 2)" if p["engine"] == "on" else
              "Caching off, for comparison (engine 2 of 2)")
    if p["stage"] == "q1":
        what = "Q1 alone: its prompt"
    elif p["stage"] == "others":
        what = f"Q2–Q{n} arrive and look up Q1's blocks" if n > 2 else "Q2 arrives and looks up Q1's blocks"
    else:
        what = f"decoding {plural(NEW_TOKENS, 'token')} each"
    first = "First the unedited prompt, to fill the cache. " if p.get("warm") else ""
    return f"{first}{engine}: step {p['steps']}, {what}…{busy_note(p.get('others', 0))}"
