"""HTML for the chapter-19 widget: how the matrices are split, the two texts, each step's communication,
the pipeline's timeline, and the modelled big-model view. Plain functions of plain data (the run's
summary, parallel_layout), so unit tests read exactly what the page shows. Every reader- or
model-written string goes through esc(); marks carry a title (hover) and are focusable (keyboard).
"""
from __future__ import annotations

from widgets.common import esc, label_html, modelled
from widgets.common.labels import recorded_label
from widgets.common.text import plural

LAYER_NAMES = {"wq": "query", "wk": "key", "wv": "value", "wo": "attention output", "w1": "MLP gate",
               "w3": "MLP up", "w2": "MLP down", "embed": "embedding = LM head"}


def _b(n: float) -> str:
    """Bytes for people, in binary units as the chapter writes them: 2,304 B, 83.3 KiB, 31.3 MiB, 16.4 GiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= 10 * size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def _t(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:,.0f} µs"
    if s < 1:
        return f"{s * 1e3:,.1f} ms"
    return f"{s:,.2f} s"


def _mark(cls: str, tip: str, link: str, style: str = "", body: str = "") -> str:
    tip = esc(tip)
    return (f'<span class="{cls}" style="{style}" title="{tip}" data-tip="{tip}" data-link="{link}" '
            f'tabindex="0">{body}</span>')


# -- how the model is split ------------------------------------------------------------------------
def split_html(layout: dict, cfg, mode: str) -> str:
    return _tp_split(layout, cfg) if mode == "tp" else _pp_split(layout, cfg)


def _tp_split(layout: dict, cfg) -> str:
    tp = layout["tensor_parallel_size"]
    rows = []
    for w in layout["weights"]:
        out_f, in_f = w["shape"]
        if w["split"] == "replicated":
            slices = "".join(_mark(f"pz-slice pz-r{r % 7}", f"rank {r}: the whole {out_f:,} x {in_f:,} table",
                                   f"rank-{r}", "flex: 1", f"r{r}") for r in range(tp))
            box = f'<div class="pz-box pz-copies">{slices}</div>'
            how = f"replicated: every rank holds all {out_f:,} rows"
        else:
            column = w["split"] == "column"
            head_dim = cfg.head_dim
            slices = []
            for r, (a, b) in enumerate(w["per_rank"]):
                what = (f"heads {a // head_dim}–{b // head_dim - 1}" if w["name"] in ("wq", "wk", "wv", "wo")
                        else f"inner features {a:,}–{b - 1:,}")
                side = "output features (rows of W)" if column else "input features (columns of W)"
                slices.append(_mark(f"pz-slice pz-r{r % 7}", f"rank {r}: {side} {a:,}–{b - 1:,}, {what}",
                                    f"rank-{r}", f"flex: {b - a}", f"r{r}" if column or tp <= 6 else ""))
            width = max(18, min(100, round(100 * out_f / 1536)))
            height = max(14, min(64, round(64 * in_f / 1536)))
            if not column:                                   # stacked slices: room for each rank's label
                height = max(height, min(16 * tp, 108))
            box = (f'<div class="pz-box {"pz-col" if column else "pz-row"}" '
                   f'style="width:{width}%; height:{height}px">{"".join(slices)}</div>')
            how = ("column-parallel: each rank computes its own output features, no communication" if column else
                   "row-parallel: each rank multiplies its input features, giving a partial sum")
        after = ('<p class="pz-after">↓ all-reduce: every rank adds the partial sums '
                 f'(tokens × {cfg.hidden_size} values)</p>') if w["all_reduce_after"] else ""
        rows.append(f'<div class="pz-matrix" data-weight="{w["name"]}"><p class="pz-mname"><b>{esc(LAYER_NAMES[w["name"]])}</b> '
                    f'<code>{esc(w["name"])}</code> [{in_f:,} → {out_f:,}] · {esc(how)}</p>{box}{after}</div>')
    note = (f"<p class='w-small'>One layer of {esc(cfg.name)} over {plural(tp, 'rank')}; the other "
            f"{cfg.num_layers - 1} layers are cut the same way. Each box is a weight matrix drawn as y = x W: "
            "input features down, output features across. Hover a slice: the same rank lights up in every "
            "matrix.</p>")
    return f'<div class="pz-split" data-mode="tp">{note}{"".join(rows)}</div>'


def _pp_split(layout: dict, cfg) -> str:
    stages = layout["stages"]
    cells = []
    for s, (a, b) in enumerate(stages):
        for i in range(a + 1, b + 1):         # layers are named 1 … 30 in every chapter (the engine counts from 0)
            cells.append(_mark(f"pz-layer pz-r{s % 7}", f"layer {i}: stage {s} (rank {s})", f"stage-{s}", "",
                               str(i)))
    legend = "".join(
        f'<li>{_mark(f"pz-swatch pz-r{s % 7}", f"stage {s}", f"stage-{s}")} stage {s} = rank {s}: layers '
        f'{a + 1}–{b}{" + embedding" if s == 0 else ""}{" + final norm and LM head" if s == len(stages) - 1 else ""}'
        f'</li>' for s, (a, b) in enumerate(stages))
    hand = (f"<p class='w-small'>Between stages: the hidden state, {cfg.hidden_size} values per token "
            f"({cfg.hidden_size * 4:,} bytes in float32), sent point to point {plural(len(stages) - 1, 'time')} "
            "per micro-batch. Each stage keeps the KV cache of its own layers only.</p>")
    return (f'<div class="pz-split" data-mode="pp"><div class="pz-layers">{"".join(cells)}</div>'
            f'<ul class="pz-legend">{legend}</ul>{hand}</div>')


# -- the texts ------------------------------------------------------------------------------------
def texts_html(run: dict, label: str) -> str:
    where = f"{'tp' if run['mode'] == 'tp' else 'pp'}={run['size']} on {plural(run['tp'] * run['pp'], 'process', 'processes')}"
    same = ('<p class="pz-same" data-same="yes">✓ the same text, token for token</p>' if run["same_text"] else
            '<p class="pz-same" data-same="no">✗ the texts differ</p>')
    return (f'<div class="pz-texts"><div><p class="w-small">{esc(where)}</p><p class="pz-text pz-parallel">{esc(run["text"])}</p></div>'
            f'<div><p class="w-small">one process (the shared engine)</p><p class="pz-text pz-single">{esc(run["single_text"])}</p></div>'
            f'{same}<p class="w-small">{plural(run["tokens"], "token")}, greedy, prompt '
            f'“{esc(run["prompt"])}” · {label_html(label)}</p></div>')


# -- the steps ------------------------------------------------------------------------------------
def steps_html(run: dict, label: str, step_index: int = 0) -> str:
    return _tp_steps(run, label) if run["mode"] == "tp" else _pp_steps(run, label, step_index)


def _tp_steps(run: dict, label: str, limit: int = 8) -> str:
    rows = []
    for s in run["steps"][:limit]:
        ar = s["all_reduce"]
        share = ar["seconds"] / s["window_s"] if s["window_s"] else 0.0
        bar = _mark("pz-bar", f"step {s['step']}: {100 * share:.0f}% of rank 0's forward pass was spent in "
                    f"all-reduces ({_t(ar['seconds'])} of {_t(s['window_s'])})", f"step-{s['step']}",
                    f"width: {max(1.0, 100 * share):.1f}%")
        rows.append(f"<tr data-step='{s['step']}'><td>{s['step']}</td><td>{s['kind']}</td><td>{s['tokens']:,}</td>"
                    f"<td class='pz-wide'>{ar['calls']}</td><td>{_b(ar['bytes'] / max(1, ar['calls']))}</td>"
                    f"<td class='pz-wide'>{_b(ar['bytes'])}</td><td>{_t(ar['seconds'])}</td>"
                    f"<td class='pz-barcell'><span class='pz-track'>{bar}</span></td></tr>")
    more = len(run["steps"]) - limit
    more_line = f"<p class='w-small'>… and {plural(more, 'more step')}.</p>" if more > 0 else ""
    first = run["steps"][0]
    check = (f"<p class='pz-check'>Each all-reduce carries tokens × hidden × bytes: {first['tokens']} × "
             f"{run['hidden']} × {run['value_bytes']} = <b>{first['all_reduce_bytes_each']:,} bytes</b> in step "
             f"{first['step']}, exactly what was measured ({first['all_reduce']['bytes'] // max(1, first['all_reduce']['calls']):,}); "
             f"{first['all_reduce']['calls']} of them per step: 2 per layer × {run['num_layers']} layers.</p>")
    decode = [s for s in run["steps"] if s["kind"] == "decode"]
    fixed = ""
    if decode:
        per = sum(s["all_reduce"]["seconds"] for s in decode) / max(1, sum(s["all_reduce"]["calls"] for s in decode))
        fixed = (f"<p class='w-small'>In a decode step each all-reduce carries only {_b(decode[0]['all_reduce_bytes_each'])}, "
                 f"yet took {_t(per)} on average here: nearly all of it is the fixed cost of a call "
                 f"(and waiting for the slowest process), not moving bytes.</p>")
    return (f"<div class='pz-steps' data-mode='tp'>{check}<div class='pz-scroll'><table class='pz-table'><thead><tr><th>step</th><th>kind</th>"
            "<th>tokens</th><th class='pz-wide'>calls</th><th>each</th><th class='pz-wide'>total</th><th>time</th><th>share<span class='pz-wide'> of step</span></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f"{more_line}{fixed}"
            f"<p class='w-small'>time: rank 0 blocked in all-reduces, waiting for the other ranks included · {label_html(label)}</p></div>")


def step_choices(run: dict) -> dict[str, int]:
    return {f"step {s['step']}: {s['kind']}, {plural(s['tokens'], 'token')} in {plural(len(s['micro_batches']), 'micro-batch', 'micro-batches')}": i
            for i, s in enumerate(run["steps"])}


def _pp_steps(run: dict, label: str, index: int) -> str:
    s = run["steps"][min(index, len(run["steps"]) - 1)]
    window = s["window_s"] or 1e-9
    lanes = []
    for r in s["ranks"]:
        bars = "".join(_mark(f"pz-busy pz-r{mb % 7}", f"stage {r['stage']}, micro-batch {mb} "
                             f"({plural(s['micro_batches'][mb], 'token')}): {_t(a)} – {_t(b)}", f"mb-{mb}",
                             f"left: {100 * a / window:.2f}%; width: {max(0.6, 100 * (b - a) / window):.2f}%", str(mb))
                       for mb, a, b in r["busy"])
        lanes.append(f'<div class="pz-lane" data-stage="{r["stage"]}"><span class="pz-lane-name">stage {r["stage"]}</span>'
                     f'<span class="pz-lane-track">{bars}</span></div>')
    sends = sum(r["send"]["bytes"] for r in s["ranks"])
    where = "the boundary" if run["pp"] == 2 else f"all {run['pp'] - 1} boundaries"
    hand = " + ".join(f"{n} × {run['hidden']} × {run['value_bytes']}" for n in s["micro_batches"])
    caption = (f"<p class='pz-check'>Step {s['step']} ({s['kind']}, {plural(s['tokens'], 'token')}): "
               f"{plural(len(s['micro_batches']), 'micro-batch', 'micro-batches')} of "
               f"{', '.join(map(str, s['micro_batches']))} tokens. Idle share (the bubble): "
               f"<b>{100 * s['bubble']:.0f}%</b> measured, {100 * s['ideal_bubble']:.0f}% at best for "
               f"{run['pp']} stages and {len(s['micro_batches'])} equal micro-batches. Each boundary carried "
               f"{hand} = {_b(sum(s['handoff_bytes']))}; {_b(sends)} over {where}.</p>")
    return (f"<div class='pz-steps' data-mode='pp'>{caption}<div class='pz-gantt' role='img' "
            f"aria-label='busy time of each stage in step {s['step']}'>{''.join(lanes)}</div>"
            f"<p class='w-small'>{_t(window)} from the first stage starting to the last one finishing; empty track = "
            f"waiting · {label_html(label)}</p></div>")


# -- the modelled big model -------------------------------------------------------------------------
def modelled_html(tp: dict, pp: dict, beside: str) -> str:
    names = list(tp["links"])
    head = "".join(f"<th>{esc(n)}</th>" for n in names)

    def row(what: str, fn) -> str:
        cells = "".join(f"<td>{fn(tp['links'][n])}</td>" for n in names)
        return f"<tr><td>{what}</td>{cells}</tr>"
    rows = [
        row("link, one direction", lambda l: f"{l['bandwidth'] / 1e9:,.0f} GB/s"),
        row(f"moving {tp['calls']} × {_b(tp['ring_bytes'])}", lambda l: _t(l["move_s"])),
        row(f"fixed cost, {tp['calls']} × 10 µs (assumed)", lambda l: _t(l["fixed_s"])),
        row("communication per pass", lambda l: f"<b>{_t(l['comm_s'])}</b>"),
        row(f"arithmetic per pass (each GPU: 1/{tp['gpus']})", lambda l: _t(tp["compute_s"])),
        row("communication's share", lambda l: f"<b>{100 * l['share']:.0f}%</b>"),
    ]
    hand = ", ".join(f"{esc(k)} {_t(v)}" for k, v in pp["handoff_s"].items())
    return (f"<div class='pz-model'><p class='pz-check'>{esc(tp['model'])} on {tp['gpus']} × {esc(tp['gpu'])}, "
            f"tensor parallel: {_b(tp['weights_per_gpu'])} of weights per GPU. Each all-reduce covers "
            f"{tp['tokens']:,} × 8,192 × 2 B = {_b(tp['all_reduce_bytes'])}; in a ring each GPU sends and receives "
            f"2(N−1)/N = {tp['ring_factor']:.2f} times that, {_b(tp['ring_bytes'])}, {tp['calls']} times per pass.</p>"
            f"<div class='pz-scroll'><table class='pz-table pz-links'><thead><tr><td></td>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f"<p class='pz-check'>Pipeline parallel over {pp['stages']} stages instead ({pp['layers_per_stage']} layers "
            f"each): each boundary receives {_b(pp['hidden_bytes'])} per step (the hidden state; vLLM's Llama also "
            f"sends the residual: {_b(pp['vllm_bytes'])}), {hand}.</p>"
            f"<p class='w-small'>{label_html(modelled('published link and GPU figures; the 10 µs per call is an assumption'))}</p>"
            f"{beside}</div>")


def _link(topology: str | None) -> str:
    """GPU 0 to GPU 1 in `nvidia-smi topo -m`'s matrix: NV18 = 18 NVLink links; PIX, PHB, SYS = PCIe."""
    import re
    m = re.search(r"GPU0\s+X\s+(\S+)", topology or "")
    if m is None:
        return "link not recorded"
    kind = m[1]
    return f"{kind} ({kind[2:]} NVLink links)" if kind.startswith("NV") else f"{kind} (PCIe)"


def _ms(x) -> str:
    return "–" if x is None else f"{x:,.2f}"


def _recorded_table(data: dict) -> str:
    """One recorded file: each split and batch, against one GPU, and what a decode step sent. A split
    whose decode steps ran eagerly says so: its step time is launch costs, not the link."""
    res, sw, model = data["results"], data.get("software", {}), data.get("model", {})
    shape = model.get("shape", res.get("shape", {}))
    gpus = sw.get("gpus")
    head = (f"{gpus} × " if gpus else "") + f"{esc(data['device'])}, {esc(_link(sw.get('link')))}, NCCL {esc(sw.get('nccl', '?'))}"
    what = (f"{esc(model.get('name', res.get('model', '')))} shapes ({shape.get('num_layers')} layers, hidden "
            f"{shape.get('hidden_size', 0):,}, {shape.get('num_heads')} query / {shape.get('num_kv_heads')} KV heads), "
            f"{esc(model.get('weights', 'random'))} weights, {esc(res.get('dtype', ''))}")
    wl = res.get("workload", {})
    rows, probed = [], False
    for s in res.get("sizes", []):
        if "skipped" in s:
            continue
        d = s.get("per_step", {}).get("decode", {})
        ar, hand = d.get("all_reduce_per_rank", {}), d.get("send_recv_all_ranks", {})
        if ar.get("calls"):
            ar_ms = ar.get("probe_ms", ar.get("ms"))
            probed = probed or "probe_ms" in ar
            comm = (f"{plural(round(ar['calls']), 'all-reduce')}, {_b(ar['bytes'])}<br>{_ms(ar_ms)} ms"
                    f"{'*' if 'probe_ms' in ar else ''}, {ar['share_of_step']:.0%} of the step")
        elif hand.get("send", {}).get("calls"):
            comm = f"{plural(round(hand['send']['calls']), 'hand-off')}, {_b(hand['send']['bytes'])}<br>bubble {d.get('bubble_mean', 0):.0%}"
        else:
            comm = "–"
        vs = s.get("vs_single", {})
        same = "" if s["size"] == "single" else (
            "all" if s.get("same_tokens_as_single") else f"{s.get('prompts_equal')} of {s.get('prompts')}")
        eager = s["size"] != "single" and not s.get("decode_steps_in_cuda_graphs")
        itl = _ms(s["itl_ms_mean"]) + (f" ({vs['itl_ms_mean']:.2f}×)" if vs.get("itl_ms_mean") else "")
        rows.append(f"<tr><th scope='row'>{esc(s['size'])}{'<br><small>no graphs</small>' if eager else ''}</th>"
                    f"<td>{s['batch']}</td><td>{s['throughput_tokens_per_s']:,.0f}</td><td>{itl}</td>"
                    f"<td>{same}</td><td>{comm}</td></tr>")
    return (f"<p class='pz-check'><b>{head}</b> · {what}; prompts of {wl.get('prompt_len')} tokens, "
            f"{wl.get('max_tokens')} new tokens each, greedy, warmed alike.</p>"
            f"<div class='pz-scroll'><table class='pz-table'><thead><tr><th scope='col'>split</th>"
            f"<th scope='col'>batch</th><th scope='col'>tokens/s</th><th scope='col'>ITL ms (vs 1 GPU)</th>"
            f"<th scope='col'>same ids</th><th scope='col'>each GPU, per decode step</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            + ("<p class='w-small'>* Inside a CUDA graph no call can be timed alone: the same all-reduces, "
               "replayed by themselves.</p>" if probed else "")
            + f"<p class='w-small'>{label_html(recorded_label(data))}</p>")


def recorded_line(data: list[dict] | dict | None) -> str:
    """What the two-GPU runs recorded (compute.recorded_runs), labelled with device, link and model
    shape; or, when none shipped, what the reader is looking at instead: said to the reader, never a
    developer's to-do (the review found the command line that would record it shown as a placeholder)."""
    records = [data] if isinstance(data, dict) else list(data or [])
    if not records:
        return ("<p class='w-small pz-recorded'>No multi-GPU measurement is recorded for this page: the table "
                "above is modelled from published link and GPU figures, and the measured numbers in 2 and 3 "
                "come from this server's CPU processes.</p>")
    return ("<div class='pz-recorded'><h4>Recorded on two GPUs</h4>"
            + "".join(_recorded_table(d) for d in records) + "</div>")


NO_LAYOUT = "<p class='w-small'>No layout: the heads do not divide (see the note above).</p>"
NO_RUN = "<p class='w-small'>Press Run to see both texts here.</p>"


def progress_html(message: str) -> str:
    return f"<p class='w-small pz-progress-line' aria-live='polite'>{esc(message)}</p>"
