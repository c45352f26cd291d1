"""The overview map: one picture of a request's whole journey through the real engine, each stage a
link to its chapter. The cover shows it full size; every chapter's header a compact copy with the
chapter's own stages marked "you are here".

    your text → tokens → embedding → 30 blocks (attention, MLP) → logits → sampler      (the model)
        ↻ the sampled token joins the text: one more pass per token
    KV pages → the scheduler's batch → GPU memory                                        (the engine)

While this reader has a request in the shared engine (Generate in chapter 1 or 21, or any tab of the
same browser), the map follows it from the engine's per-step snapshot (``llm.stats``, the one the
engine dashboard reads): the phase (prefill, decode), the tokens of the step, the request's KV blocks
filling, its seat in the batch among other readers'. Nothing here asks the engine anything or loads
the model.

How the live state reaches the page, and why this way:
* The map's HTML (its links) never changes after the first paint: re-sending it would restart its
  CSS animations on every step and take keyboard focus away from a reader tabbing through it.
* The phase is a CSS class on the map pane's host element and the figures are CSS custom properties
  in its ``styles``; Bokeh updates both on the element in place, and app.css turns them into the
  animation (which stage glows) and the stage badges (CSS counters print the numbers).
* The same figures, as words and small block/seat pictures, go into a second pane under the map (its
  HTML is small and holds no links, so replacing it costs nothing): that is what screen readers and
  tests read. It is empty on a chapter page while nothing runs.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

from app.links import Links
from widgets.common.text import plural

NUM_LAYERS = 30          # SmolLM2-135M's blocks (engine/config.py ModelConfig.num_layers)
REFRESH_MS = 250         # while the reader's request runs: as the engine dashboard, a repaint only on a newer step
IDLE_MS = 1000           # otherwise: one look a second for a request of this reader (each look costs Panel's
#                          callback machinery, on every open page of the server)


@dataclass(frozen=True, slots=True)
class Stage:
    key: str
    name: str            # the label on the map
    short: str           # the compact copy's label
    slug: str            # the chapter it links to
    brief: str           # a few words under the label (the full map)
    lane: str            # "model" | "engine"
    what: str            # one sentence: what happens here (the link's title)


STAGES: tuple[Stage, ...] = (
    Stage("text", "Your text", "Text", "what-is-an-llm", "a question arrives", "model",
          "a prompt arrives: a question typed on a page"),
    Stage("tokens", "Tokens", "Tokens", "tokens", "cut into token ids", "model",
          "the text is cut into token ids the model knows"),
    Stage("embedding", "Embedding", "Embed", "embeddings", "each id → 576 numbers", "model",
          "each token id becomes a vector of 576 numbers"),
    Stage("blocks", f"{NUM_LAYERS} blocks", "Blocks", "transformer-block", "the same block, 30 times over", "model",
          f"the vectors pass through {NUM_LAYERS} transformer blocks, each attention then MLP"),
    Stage("attention", "Attention", "Attention", "attention", "look back at earlier tokens", "model",
          "each token looks back at the tokens before it"),
    Stage("mlp", "MLP", "MLP", "mlp-block", "rework each token", "model",
          "each token's vector is transformed on its own"),
    Stage("logits", "Logits", "Logits", "full-model", "49,152 scores", "model",
          "a score for every one of the 49,152 possible next tokens"),
    Stage("sampler", "Sampler", "Sample", "sampling", "pick the next token", "model",
          "one next token is picked from those scores"),
    Stage("kv", "KV pages", "KV pages", "kv-cache", "every token's keys and values, kept", "engine",
          "every token's keys and values are kept in fixed-size pages, so the next pass reuses them"),
    Stage("batch", "Scheduler's batch", "Batch", "continuous-batching", "every reader's requests, one step", "engine",
          "each step the scheduler runs every reader's requests together in one batch"),
    Stage("gpu", "GPU memory", "GPU memory", "gpu-memory-hierarchy", "where weights and pages live", "engine",
          "weights and KV pages live in the accelerator's memory; moving them sets the speed"),
)
BY_KEY = {s.key: s for s in STAGES}
INNER = ("attention", "mlp")          # drawn inside the blocks stage

# "You are here": the stages each chapter is about (every chapter has at least one; the recap all).
HERE: dict[str, tuple[str, ...]] = {
    "what-is-an-llm": ("text",),
    "tokens": ("tokens",),
    "embeddings": ("embedding",),
    "attention": ("attention",),
    "multi-head-attention": ("attention",),
    "positional-encoding": ("embedding", "attention"),
    "mlp-block": ("mlp",),
    "transformer-block": ("blocks",),
    "full-model": ("blocks", "logits"),
    "sampling": ("sampler",),
    "prefill-and-decode": ("blocks", "kv"),
    "kv-cache": ("kv",),
    "gpu-memory-hierarchy": ("gpu",),
    "continuous-batching": ("batch",),
    "paged-attention": ("kv",),
    "prefix-caching": ("kv",),
    "chunked-prefill": ("batch",),
    "speculative-decoding": ("sampler",),
    "scaling-out": ("gpu",),
    "throughput-vs-latency": ("batch",),
    "recap": tuple(s.key for s in STAGES),
}

# Tiny pictures, one per stage (decoration: aria-hidden; colours from the theme through currentColor
# and the --ex-* variables, so both themes draw them).
_G = '<svg class="ovm-glyph" viewBox="0 0 40 24" aria-hidden="true" focusable="false">{}</svg>'
GLYPHS = {
    "text": _G.format('<text x="20" y="17" text-anchor="middle" font-size="14" font-family="Georgia, serif" '
                      'fill="currentColor">“Hi?”</text>'),
    "tokens": _G.format('<rect x="2" y="7" width="12" height="10" rx="3" class="ovm-g-a"/>'
                        '<rect x="16" y="7" width="9" height="10" rx="3" class="ovm-g-b"/>'
                        '<rect x="27" y="7" width="11" height="10" rx="3" class="ovm-g-a"/>'),
    "embedding": _G.format("".join(f'<rect x="{4 + 5 * i}" y="{12 - h}" width="3" height="{2 * h}" '
                                   f'class="ovm-g-{"a" if i % 2 else "b"}"/>'
                                   for i, h in enumerate((3, 7, 5, 9, 4, 6, 8)))),
    "blocks": _G.format('<rect x="11" y="2" width="22" height="12" rx="2" class="ovm-g-b"/>'
                        '<rect x="8" y="6" width="22" height="12" rx="2" class="ovm-g-b"/>'
                        '<rect x="5" y="10" width="22" height="12" rx="2" class="ovm-g-a"/>'),
    "logits": _G.format("".join(f'<rect x="{3 + 5 * i}" y="{22 - h}" width="3.5" height="{h}" '
                                f'class="ovm-g-{"a" if h == 20 else "b"}"/>'
                                for i, h in enumerate((4, 7, 3, 20, 9, 5, 2)))),
    "sampler": _G.format('<rect x="11" y="3" width="18" height="18" rx="4" class="ovm-g-line"/>'
                         '<circle cx="16" cy="8" r="1.8" class="ovm-g-a"/><circle cx="20" cy="12" r="1.8" '
                         'class="ovm-g-a"/><circle cx="24" cy="16" r="1.8" class="ovm-g-a"/>'),
    "kv": _G.format("".join(f'<rect x="{3 + 9 * (i % 4)}" y="{3 + 10 * (i // 4)}" width="7" height="8" rx="1.5" '
                            f'class="ovm-g-{"a" if i < 3 else "b"}"/>' for i in range(8))),
    "batch": _G.format("".join(f'<circle cx="{6 + 9.3 * i}" cy="12" r="4" class="ovm-g-{"a" if i == 1 else "b"}"/>'
                               for i in range(4))),
    "gpu": _G.format('<rect x="8" y="4" width="24" height="16" rx="2" class="ovm-g-line"/>'
                     '<rect x="14" y="8" width="12" height="8" rx="1" class="ovm-g-a"/>'
                     + "".join(f'<rect x="{11 + 5 * i}" y="1" width="2" height="3" class="ovm-g-b"/>'
                               f'<rect x="{11 + 5 * i}" y="20" width="2" height="3" class="ovm-g-b"/>'
                               for i in range(4))),
}


def here_stages(slug: str | None) -> tuple[str, ...]:
    return HERE.get(slug or "", ())


def _e(s: str) -> str:
    return html.escape(s, quote=True)


def _link(stage: Stage, links: Links, here: tuple[str, ...], compact: bool, index: int) -> str:
    current = stage.key in here
    label = stage.short if compact else stage.name
    attrs = f' aria-current="location"' if current else ""
    tip = f"{stage.name}: {stage.what}"
    glyph = "" if compact else GLYPHS.get(stage.key, "")
    num = "" if compact or stage.key in INNER else f'<span class="ovm-num" aria-hidden="true">{index + 1}</span>'
    sub = "" if compact else f'<span class="ovm-what">{_e(stage.brief)}</span>'
    # a pin over this chapter's stage; the recap is about the whole journey: its title says so instead
    tag = ('<span class="ovm-here">you are here</span>' if current and compact and len(here) < len(STAGES)
           else "")
    # The badge prints a live figure (app.css, from the map's CSS variables); empty and hidden when idle.
    return (f'<a class="ovm-link" href="{_e(links.chapter(stage.slug))}" title="{_e(tip)}" '
            f'data-stage="{stage.key}" style="--i:{index}"{attrs}>{num}{glyph}'
            f'<span class="ovm-name">{_e(label)}</span>{sub}{tag}'
            f'<span class="ovm-badge ovm-badge-{stage.key}" aria-hidden="true"></span></a>')


def overview_map_html(current_slug: str | None = None, compact: bool = False,
                      links: Links | None = None) -> str:
    """The map as HTML (no script): a list of links in journey order, the blocks stage holding its
    attention and MLP. ``current_slug`` marks that chapter's stages (``aria-current``)."""
    links = links or Links()
    here = here_stages(current_slug)
    order = [s for s in STAGES if s.key not in INNER]

    def item(stage: Stage, index: int) -> str:
        cls = f"ovm-stage ovm-{stage.key}" + (" ovm-current" if stage.key in here else "")
        body = _link(stage, links, here, compact, index)
        if stage.key == "blocks":
            inner = "".join(f"<li class=\"ovm-stage ovm-{k}{' ovm-current' if k in here else ''}\">"
                            f"{_link(BY_KEY[k], links, here, compact, index)}</li>" for k in INNER)
            body += f'<ol class="ovm-inner" aria-label="inside each block">{inner}</ol>'
            if not compact:
                body += f'<span class="ovm-times" aria-hidden="true">× {NUM_LAYERS}</span>'
        return f'<li class="{cls}">{body}</li>'

    model = "".join(item(s, i) for i, s in enumerate(order) if s.lane == "model")
    engine = "".join(item(s, i) for i, s in enumerate(order) if s.lane == "engine")
    if compact:
        whole = len(here) == len(STAGES)
        where = "the whole journey" if whole else ", ".join(BY_KEY[k].name for k in here)
        title = "A request's journey — you are here: the whole of it" if whole else "A request's journey"
        return ('<nav class="ovm ovm-compact" aria-label="A request\'s journey; this chapter: '
                f'{_e(where)}"><span class="ovm-compact-title" aria-hidden="true">{_e(title)}</span>'
                f'<ol class="ovm-lane ovm-row">{model}{engine}</ol></nav>')
    return (
        '<figure class="ovm ovm-full" aria-label="Map: a request\'s journey through the engine">'
        '<figcaption class="ovm-caption"><span class="ovm-title">A request\'s journey through the engine</span>'
        '<span class="ovm-hint">Each stage opens its chapter.</span></figcaption>'
        '<p class="ovm-lane-name">Inside the model: one forward pass</p>'
        f'<ol class="ovm-lane ovm-model">{model}'
        '<li class="ovm-loop"><span class="ovm-loop-arrow" aria-hidden="true">↻</span> The new token joins the '
        'text and the pass runs again: one pass per token.</li></ol>'
        '<p class="ovm-lane-name">Around the model: the serving engine, shared by every reader</p>'
        f'<ol class="ovm-lane ovm-engine">{engine}</ol></figure>')


# ---- the live part ---------------------------------------------------------------------------------

def request_view(stats, mine, block_size: int) -> dict | None:
    """This reader's request as the engine's latest step saw it, from one LoopStats (plain numbers).
    None when the reader has no request in the shared engine. A request admitted but not in the last
    step's batch is 'waiting' (in the engine's queue, or between two steps)."""
    if not mine:
        return None
    last = stats.last
    entries = list(last.entries) if last is not None else []
    own = [e for e in entries if e.request_id in mine]
    used = stats.num_blocks - stats.num_free_blocks
    view = {"phase": "waiting", "step": last.step if last else 0, "step_tokens": 0, "cached": 0,
            "blocks": 0, "batch": len(entries), "yours": len(own), "others": len(entries) - len(own),
            "kv_used": used, "kv_total": stats.num_blocks, "block_size": block_size}
    if own:
        e = max(own, key=lambda x: x.num_computed_before + x.num_tokens)   # two of yours: the longer one
        cached = e.num_computed_before + e.num_tokens
        view.update(phase="prefill" if e.kind == "prefill" else "decode", step_tokens=e.num_tokens,
                    cached=cached, blocks=math.ceil(cached / block_size) if block_size else 0)
    return view


def live_style(view: dict | None) -> dict[str, str]:
    """The CSS custom properties the map's badges print (integers only: CSS counters read them)."""
    if not view:
        return {}
    return {"--ovm-step-tokens": str(view["step_tokens"]), "--ovm-blocks": str(view["blocks"]),
            "--ovm-batch": str(view["batch"]), "--ovm-others": str(view["others"]),
            "--ovm-cached": str(view["cached"]),
            "--ovm-kv-pct": str(round(100 * view["kv_used"] / view["kv_total"]) if view["kv_total"] else 0)}


def live_html(view: dict | None, done: dict | None = None, compact: bool = False, links: Links | None = None) -> str:
    """The figures under the map, in words, with this request's KV blocks and the batch's seats drawn.
    ``done``: the last view of a request that has just finished (the map settles on it)."""
    links = links or Links()
    if view is None and done is None:
        if compact:
            return ""
        return ('<p class="ovm-live ovm-idle" data-phase="idle">Press <b>Generate</b> in '
                f'<a href="{_e(links.chapter("what-is-an-llm"))}">chapter 1</a> and this map follows your '
                'request, step by step, through the engine that serves every reader.</p>')
    if view is None:
        v = done
        blocks = plural(v["blocks"], "KV block")
        return (f'<p class="ovm-live ovm-done" data-phase="done"><b>Done.</b> Your request finished: '
                f'{plural(v["cached"], "token")} had filled {blocks} ({v["block_size"]} tokens each), now freed '
                'for the next reader.</p>')
    v = view
    if v["phase"] == "waiting":
        words = (f'<b>Waiting</b> for a seat in the batch: step {v["step"]:,} ran '
                 f'{plural(v["batch"], "request")} of other readers.')
    else:
        what = (f'reads {plural(v["step_tokens"], "prompt token")} at once' if v["phase"] == "prefill"
                else "writes one more token")
        others = (f'with {plural(v["others"], "other request")}' if v["others"] else "alone")
        words = (f'<b>{v["phase"].capitalize()}</b> · step {v["step"]:,}: your request {what}, {others} in the '
                 f'batch · {plural(v["cached"], "token")} in its KV cache = <b>{plural(v["blocks"], "KV block")}'
                 f'</b> ({v["block_size"]} tokens each) · the engine holds {v["kv_used"]:,} of {v["kv_total"]:,} blocks')
    pics = ""
    if not compact:
        cells = []
        full, rest = divmod(v["cached"], v["block_size"] or 1)
        for i in range(min(v["blocks"], 24)):
            fill = 100 if i < full else round(100 * rest / v["block_size"])
            cells.append(f'<span class="ovm-kvcell" style="--fill:{fill}%"></span>')
        if v["blocks"] > 24:
            cells.append(f'<span class="ovm-more">+{v["blocks"] - 24}</span>')
        seats = ['<span class="ovm-seat ovm-seat-you">you</span>'] * v["yours"]
        seats += ['<span class="ovm-seat"></span>'] * min(v["others"], 15)
        if v["others"] > 15:
            seats.append(f'<span class="ovm-more">+{v["others"] - 15}</span>')
        pics = ('<span class="ovm-pics" aria-hidden="true">'
                f'<span class="ovm-pic"><span class="ovm-pic-name">your KV blocks</span>{"".join(cells)}</span>'
                f'<span class="ovm-pic"><span class="ovm-pic-name">the batch</span>{"".join(seats)}</span></span>')
    return f'<p class="ovm-live ovm-running" data-phase="{v["phase"]}">{words}</p>{pics}'


# ---- the Panel component ---------------------------------------------------------------------------

def overview_map(current_slug: str | None = None, compact: bool = False, links: Links | None = None,
                 dark: bool = False, handle=None):
    """The map and its live line, as one Panel column, following this page's reader's requests.

    Cost on a shared server: every open page looks at one set (its reader's request ids) every
    IDLE_MS and does nothing more while it is empty; it touches the engine only while a request
    of its reader is in flight, and sends the browser something only when a newer step has run.
    The periodic callback is the session's: Panel stops it when the page closes."""
    import panel as pn

    from app.engine_handle import shared_engine
    from app.shell import html_pane
    from widgets.common.gate import in_session
    from widgets.common.sharing import reader_of

    links = links or Links(dark)
    base = ["ovm-host", "ovm-host-compact" if compact else "ovm-host-full"]
    map_pane = html_pane(overview_map_html(current_slug, compact, links), dark, base)
    live_pane = html_pane(live_html(None, compact=compact, links=links), dark, ["ovm-live-pane"])
    col_classes = ["ovm-block", "ovm-block-compact" if compact else "ovm-block-full"]
    col = pn.Column(map_pane, live_pane, sizing_mode="stretch_width", margin=(0, 0), css_classes=col_classes)
    # The first paint (app/shell.py preview) shows the same static map, so nothing moves when it goes.
    # Wrapped as the column is (its class draws the cover's card), so the card does not appear late.
    col.preview_html = f'<div class="{" ".join(col_classes)}">{map_pane.object}{live_pane.object}</div>'
    if not in_session():
        return col
    handle = handle or shared_engine()
    reader = reader_of(pn.state.curdoc)
    state = {"seen": None, "view": None}

    def paint(view, done=None) -> None:
        phase = view["phase"] if view else ("done" if done else "idle")
        map_pane.param.update(css_classes=base + [f"ovm-{phase}"] + (["ovm-live-on"] if view else []),
                              styles=live_style(view or done))
        live_pane.object = live_html(view, done, compact, links)
        if compact:
            # While the request runs, the chapter's copy sticks to the top of the window: the reader
            # pressed Generate in the widget far below the title, and watches the map from there.
            col.css_classes = col_classes + (["ovm-sticky"] if view else [])

    def pace(ms: int) -> None:
        if cb.period != ms:
            cb.period = ms                           # Panel restarts the callback at the new period

    def tick() -> None:
        if not reader.requests and state["view"] is None:
            pace(IDLE_MS)
            return                                   # idle: one set read, nothing sent
        if handle.snapshot().status.value != "ready":
            return                                   # never loads the model for the map
        llm = handle.llm
        stats = llm.stats
        mine = frozenset(reader.requests)
        key = (stats.updated_s, mine)
        if key == state["seen"]:
            return                                   # no newer step: nothing to send
        state["seen"] = key
        pace(REFRESH_MS)
        view = request_view(stats, mine, llm.engine_config.block_size)
        if view is None:                             # the request has finished (or was stopped)
            last, state["view"] = state["view"], None
            paint(None, done=last if last and last["phase"] != "waiting" else None)
            return
        if view["phase"] == "waiting" and state["view"] and state["view"]["phase"] != "waiting":
            # between two of its steps (the engine published an abort or another reader's step):
            # keep the last figures rather than flicker to "waiting"
            return
        state["view"] = view
        paint(view)

    cb = pn.state.add_periodic_callback(tick, period=IDLE_MS)
    return col
