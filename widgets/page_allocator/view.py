"""What the page allocator (widget.py) shows for one picture of the pool, as HTML: the grid of physical
blocks, the block tables that point into it, the free queue, and the side panel that puts the same
sequences through a contiguous allocator. Pure functions of the picture dict
(compute.AllocatorSandbox.picture), so the saved first example paints like a live pool.

    ┌ 0 ─────┐┌ 1 ─────┐┌ 2 ─────┐┌ 3 ─────┐        a tile per physical block: its owner and logical
    │ A · 0  ││ A · 1  ││ B · 0 ×3││ free #1│        index, its 16 slots (filled = a token's K/V),
    │ ●●●●●●●││ ●●●●○○○││ ●●●●●●●●││ ○○○○○○○│        its ref count when shared, its free-queue place
    └────────┘└────────┘└────────┘└────────┘
    A → [0, 1]     B:0 → [2, 5]     free queue → 3 4 6 … (next allocated first)
"""
from __future__ import annotations

from widgets.common import esc, label_html, modelled, plural
from widgets.page_allocator.compute import RESERVE


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def owner_label(owners: list[str]) -> str:
    """'A', 'B:1', or 'B:0–2' for the samples of one request sharing a block."""
    if len(owners) == 1:
        return owners[0]
    heads = {o.split(":")[0] for o in owners}
    if len(heads) == 1 and all(":" in o for o in owners):
        idx = sorted(int(o.split(":")[1]) for o in owners)
        return f"{heads.pop()}:{idx[0]}–{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else ", ".join(owners)
    return ", ".join(owners)


def block_tip(b: dict, pic: dict) -> str:
    if b["ref"] == 0:
        rank = b["free_rank"]
        return (f"block {b['id']}: free, {_ordinal(rank + 1)} in the free queue"
                + (" (the next block handed out)" if rank == 0 else f" ({plural(rank, 'block')} go before it)"))
    owners = b["owners"]
    where = ", ".join(f"{o}'s logical block {pic['tables'][o].index(b['id'])}" for o in owners)
    shared = f"; ref count {b['ref']}: shared, freed only when all let go" if b["ref"] > 1 else "; ref count 1"
    return f"block {b['id']}: {where}; {b['used']} of {pic['block_size']} slots hold a token's K and V{shared}"


def grid_html(pic: dict) -> str:
    """The tiles, the block tables and the free queue, in one pane (hovering a table entry lights its tile)."""
    colour = {r: d["colour"] for r, d in pic["requests"].items()}
    new, copied = set(pic["new"]), {dst for _, _, dst in pic["copied"]}
    freed = set(pic["freed"])
    tiles = []
    for b in pic["blocks"]:
        tip = block_tip(b, pic)
        slots = "".join('<i class="on"></i>' if s < b["used"] else "<i></i>" for s in range(pic["block_size"]))
        if b["ref"]:
            req = b["owners"][0].split(":")[0]
            logical = pic["tables"][b["owners"][0]].index(b["id"])
            who = f'{esc(owner_label(b["owners"]))} · {logical}'
            cls = f"pa-c{colour.get(req, 0)}" + (" pa-new" if b["id"] in new else "") + \
                  (" pa-copy" if b["id"] in copied else "")
            badge = f'<span class="pa-ref" title="ref count">×{b["ref"]}</span>' if b["ref"] > 1 else ""
        else:
            who, badge = f'free #{b["free_rank"] + 1}', ""
            cls = "pa-free" + (" pa-freed" if b["id"] in freed else "")
        tiles.append(f'<div class="pa-block {cls}" data-link="b{b["id"]}" data-tip="{esc(tip)}" data-block="{b["id"]}">'
                     f'<span class="pa-id">{b["id"]}</span>{badge}<span class="pa-who">{who}</span>'
                     f'<span class="pa-slots">{slots}</span></div>')
    return (f'<p class="pa-event" aria-live="polite">{esc(pic["event"])}</p>'
            f'<div class="pa-grid" role="img" aria-label="the pool\'s {pic["num_blocks"]} physical KV blocks">'
            f'{"".join(tiles)}</div>'
            '<p class="w-small hover-readout" aria-live="polite">Hover a block, or focus a block-table entry: '
            "what it holds and who points at it.</p>" + tables_html(pic) + free_html(pic))


def tables_html(pic: dict) -> str:
    colour = {r: d["colour"] for r, d in pic["requests"].items()}
    lines = []
    for owner, s in pic["samples"].items():
        req = owner.split(":")[0]
        chips = ", ".join(f'<span class="pa-entry" tabindex="0" data-link="b{b}" '
                          f'data-tip="{esc(block_tip(pic["blocks"][b], pic))}">{b}</span>' for b in s["table"])
        lines.append(f'<li><b class="pa-name pa-c{colour.get(req, 0)}">{esc(owner)}</b> '
                     f'{plural(s["cached"], "token")} → <code class="pa-table" data-owner="{esc(owner)}">[{chips}]'
                     "</code></li>")
    for r in pic["waiting"]:
        lines.append(f'<li><b class="pa-name pa-c{colour.get(r, 0)}">{esc(r)}</b> waiting: no blocks yet</li>')
    done = [r for r, d in pic["requests"].items() if d["finished"]]
    if done:
        lines.append(f'<li class="w-small">finished (their blocks are back in the pool): {esc(", ".join(done))}</li>')
    if not lines:
        lines.append('<li class="w-small">No requests yet.</li>')
    return ('<p class="pa-head">Block tables: logical block <i>i</i> of a sequence → a physical block</p>'
            f'<ul class="pa-tables">{"".join(lines)}</ul>')


def free_html(pic: dict) -> str:
    order = pic["free_order"]
    chips = " ".join(f'<span class="pa-q" data-link="b{b}">{b}</span>' for b in order)
    return (f'<p class="pa-head">Free queue ({len(order)} blocks; the next one handed out is on the left, a freed '
            f'block joins on the right)</p><p class="pa-queue">{chips or "empty: every block is in use"}</p>')


def usage(pic: dict) -> dict:
    """The same sequences under paging (the engine's pool now) and under contiguous reservation."""
    seqs = pic["samples"]
    pool = pic["num_blocks"] * pic["block_size"]
    in_use = [b for b in pic["blocks"] if b["ref"] > 0]
    paged_alloc = len(in_use) * pic["block_size"]
    paged_used = sum(b["used"] for b in in_use)
    contig_used = sum(s["cached"] for s in seqs.values())       # no sharing: each keeps its own prefix
    n = len(seqs)
    per_seq = len(in_use) / n if n else 0
    return {"sequences": n, "pool_slots": pool,
            "contiguous": {"allocated": n * RESERVE, "used": contig_used, "wasted": n * RESERVE - contig_used,
                           "fit": pool // RESERVE},
            "paged": {"allocated": paged_alloc, "used": paged_used, "wasted": paged_alloc - paged_used,
                      "fit": int(pic["num_blocks"] / per_seq) if n else None}}


def compare_html(pic: dict, label: str) -> str:
    u = usage(pic)
    c, p = u["contiguous"], u["paged"]
    if not u["sequences"]:        # an empty pool (just reset): nothing to compare yet
        return ('<p class="pa-head">Two allocators</p><p class="w-small">No sequence holds a block yet. Add a '
                f'request: this panel then compares the engine\'s paged pool with a contiguous allocator that '
                f'reserves {RESERVE} slots per sequence up front ({c["fit"]} such reservations fit in '
                f'{u["pool_slots"]:,} slots).</p>')

    def pct(part, whole):
        return f" ({100 * part / whole:.0f}%)" if whole else ""
    rows = [("token slots set aside", f'{c["allocated"]:,}', f'{p["allocated"]:,}'),
            ("slots holding a token", f'{c["used"]:,}', f'{p["used"]:,}'),
            ("wasted", f'{c["wasted"]:,}{pct(c["wasted"], c["allocated"])}',
             f'{p["wasted"]:,}{pct(p["wasted"], p["allocated"])}'),
            ("sequences like these that fit", f'{c["fit"]}',
             "–" if p["fit"] is None else f'about {p["fit"]}')]
    body = "".join(f'<tr><th scope="row">{a}</th><td class="pa-contig">{b}</td><td class="pa-paged">{d}</td></tr>'
                   for a, b, d in rows)
    over = (f'<p class="w-note">A contiguous allocator could not hold these {u["sequences"]} sequences at once: '
            f'only {c["fit"]} reservations of {RESERVE} slots fit in {u["pool_slots"]:,}.</p>'
            if u["sequences"] > c["fit"] else "")
    return (f'<p class="pa-head">The same {plural(u["sequences"], "sequence")}, two allocators</p>'
            '<div class="pd-scroll"><table class="pd-tab pa-compare"><thead><tr><td></td>'
            f'<th scope="col">contiguous, {RESERVE} slots each</th><th scope="col">paged, blocks of '
            f'{pic["block_size"]}</th></tr></thead><tbody>{body}</tbody></table></div>{over}'
            f'<p class="w-small">Paged: the engine\'s allocator right now ({label_html(label)}); shared blocks count '
            f"once. Contiguous: {label_html(modelled(f'each sequence reserves its longest possible length, {RESERVE} tokens, up front'))}.</p>")
