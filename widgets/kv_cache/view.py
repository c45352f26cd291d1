"""What the KV-cache stepper (kv_cache.py) shows for one StepView, as HTML: the tokens and the blocks
and slots their K/V landed in, the bytes held, and the two timings. Pure functions of the view (plain
dicts from ``view_dict``), so the saved first example paints exactly like a live step.

    block 0  [The][␣cap][ital][␣of][␣France][␣is][␣Paris][ . ][   ][   ] …   16 slots a block
    block 1  [   ][   ] …                                                      (free: no token yet)
"""
from __future__ import annotations

from dataclasses import asdict

from widgets.common import esc, label_html, modelled, plural, show_token
from widgets.common.load import busy_note
from widgets.modelled.hardware import MODELS, kv_bytes, kv_bytes_per_token

BIG_MODEL = "Llama-3.1-70B"                  # 128K context: the model chapter 12's figures are about


def view_dict(view) -> dict:
    """A StepView as JSON-able data (what the page needs, and what the saved example stores)."""
    d = asdict(view)
    d["next_token"] = list(view.next_token)
    d["slots"] = [list(s) for s in view.slots]
    d["num_cached"] = view.num_cached
    return d


def size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def blocks_html(v: dict) -> str:
    """Token chips in reading order and the pool's blocks, slot by slot; chip and slot share a data-link,
    so hovering either lights both (assets/widgets.js) and the readout names the block and slot."""
    newest = set(v["new_positions"]) if v["kind"] == "decode" else set()
    prompt_len = v["num_prompt"]
    where = {}
    chips = []
    for p, (piece, (block, offset)) in enumerate(zip(v["pieces"], v["slots"])):
        kind = "kv-new" if p in newest else ("kv-prompt" if p < prompt_len else "kv-gen")
        tip = f"“{show_token(piece)}”, position {p}: its K and V are in block {block}, slot {offset}"
        where[(block, offset)] = (p, piece, kind, tip)
        chips.append(f'<span class="kv-chip {kind}" data-link="p{p}" data-tip="{esc(tip)}" tabindex="0">'
                     f"{esc(show_token(piece))}</span>")
    nxt = v["next_token"][1]
    chips.append(f'<span class="kv-chip kv-next" title="sampled by this step; its K and V are computed and '
                 f'cached by the next one">→ {esc(show_token(nxt))}</span>')
    in_table = {b: i for i, b in enumerate(v["block_table"])}
    rows = []
    for b in range(v["pool_blocks"]):
        cells = []
        for o in range(v["block_size"]):
            if (b, o) in where:
                p, piece, kind, tip = where[(b, o)]
                cells.append(f'<span class="kv-slot {kind}" data-link="p{p}" data-tip="{esc(tip)}">'
                             f"{esc(show_token(piece)[:3])}</span>")
            else:
                cells.append('<span class="kv-slot kv-free"></span>')
        owner = f"logical block {in_table[b]}" if b in in_table else "free"
        rows.append(f'<div class="kv-row" data-block="{b}"><span class="kv-bid">block {b}<br>'
                    f'<small>{owner}</small></span><span class="kv-slots">{"".join(cells)}</span></div>')
    table = ", ".join(str(b) for b in v["block_table"])
    return (f'<div class="kv-chips">{"".join(chips)}</div>'
            f'<p class="w-small hover-readout" aria-live="polite">Hover a token or a slot: where its K and V live.</p>'
            f'<p class="kv-table-line">block table <code class="kv-table">[{table}]</code> · '
            f'{plural(v["num_cached"], "token")} cached in {plural(len(v["block_table"]), "block")} of '
            f'{v["block_size"]} slots ({v["pool_blocks"]} in this private pool)</p>'
            f'<div class="kv-grid" role="img" aria-label="KV blocks and slots">{"".join(rows)}</div>')


def bytes_html(v: dict, cfg) -> str:
    """Bytes held now and added by this step, per layer and head, and the same length in a 70B model."""
    n, bpv = v["num_cached"], v["bytes_per_value"]
    per_token = kv_bytes_per_token(cfg, bpv)
    per_head = 2 * cfg.head_dim * bpv                       # one token's K and V in one layer's KV head
    added = len(v["new_positions"]) * per_token
    big = MODELS[BIG_MODEL]
    dtype = {4: "float32", 2: "bf16/fp16"}.get(bpv, f"{bpv}-byte values")
    reserved = len(v["block_table"]) * v["block_size"]
    return (
        f'<p class="kv-bytes-line">This step wrote <b class="kv-added">{added:,} B</b>: K and V '
        f"({plural(len(v['new_positions']), 'token')} × 2 × {cfg.num_layers} layers × {cfg.num_kv_heads} KV heads "
        f"× {cfg.head_dim} numbers × {bpv} B, {dtype} on this server). The cache now holds "
        f'<b class="kv-held">{n:,} × {per_token:,} B = {size(n * per_token)}</b>; each layer\'s KV head keeps '
        f"{n:,} × {per_head:,} B = {size(n * per_head)} of it.</p>"
        f'<p class="w-small">Blocks reserve whole blocks: {reserved:,} slots for {n:,} tokens, so '
        f"{reserved - n:,} slots wait empty in the last block. In bf16, as a GPU would serve it: "
        f"{kv_bytes_per_token(cfg):,} B per token.</p>"
        f'<p class="w-small">The same {n:,} tokens in {BIG_MODEL} (80 layers × 8 KV heads × 128, bf16): '
        f'<b class="kv-big">{size(kv_bytes(big, n))}</b>; at its full 128K context (131,072 tokens), '
        f"{size(kv_bytes(big, 131_072))} for one conversation. {label_html(modelled('bytes from the shapes'))}</p>")


def timing_html(views: list[dict], label: str) -> str:
    """This step with the cache against the whole sequence recomputed, and the running totals."""
    v = views[-1]
    if v["kind"] == "prefill":
        return (f'<p class="kv-time-line">Prefill: {plural(v["num_cached"], "token")} through the model in one '
                f'pass, <b>{v["forward_ms"]:,.0f} ms</b> · {label_html(label)}. Press Step (or → with the '
                "widget focused) to decode the next token.</p>")
    ratio = v["recompute_ms"] / v["forward_ms"] if v["forward_ms"] else float("nan")
    same = "the same next token either way ✓" if v["recompute_token"] == v["next_token"][0] else \
        "a different next token (rounding can flip a near tie)"
    decodes = [d for d in views if d["kind"] == "decode"]
    with_cache = sum(d["forward_ms"] for d in decodes)
    without = sum(d["recompute_ms"] for d in decodes)
    p0 = views[0]["num_cached"]
    passes_with, passes_without = len(decodes), sum(d["num_cached"] for d in decodes)
    return (f'<p class="kv-time-line">Step {v["step"]}, with the cache: <b class="kv-cached-ms">'
            f'{v["forward_ms"]:,.0f} ms</b> for 1 new token. Recomputing all {v["num_cached"]:,} tokens without '
            f'it: <b class="kv-recompute-ms">{v["recompute_ms"]:,.0f} ms</b> ({ratio:.1f}×), {same}. '
            f"{label_html(label)}</p>"
            f'<p class="w-small">Decode so far: {with_cache:,.0f} ms with the cache, {without:,.0f} ms without; '
            f"{passes_with:,} token passes against {passes_without:,} (after a {p0:,}-token prefill): the "
            "first grows by one per step, the second by the whole length.</p>")


def step_progress_text(p: dict | None) -> str:
    """Where the step in flight is (widget.py posts it): p = {"step": the step being computed, "tokens":
    tokens in the cache before it, "stage": "decode" | "recompute", "queued": presses still waiting,
    "others": requests the shared engine is running meanwhile}. A step is one token, yet seconds on a
    busy CPU, since each is timed against recomputing the whole sequence. "" for none."""
    if not p:
        return ""
    if p["stage"] == "decode":
        what = f"decoding token {p['tokens'] + 1:,} with the KV cache"
    else:
        what = f"recomputing all {plural(p['tokens'] + 1, 'token')} without a cache, to compare"
    queued = f" ({plural(p['queued'], 'more step')} queued)" if p.get("queued") else ""
    return f"Step {p['step']}: {what}{queued}…{busy_note(p.get('others', 0))}"
