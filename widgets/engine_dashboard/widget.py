"""`engine_dashboard`: the shared engine as it runs — this reader's requests among everyone else's.

Every reader of this server submits to one engine (engine/engine_loop.py). After each step the loop
publishes one small LoopStats record (`llm.stats`); every open dashboard looks at that same record a
few times a second and repaints only when a newer step has run. No session asks the engine anything,
so a hundred open dashboards cost the engine nothing.

    step 412 · batch: [you · decode 1] [reader · prefill 64] [reader · decode 1]   ← the last step
    token budget  ██░░░░░░░░  66 of 2,048          KV blocks  █░░░░░░░  12 of 364
    running 3 · waiting 0 · preemptions 0 · prefix-cache hits 41% · 23 tokens/s · 4,120 steps

Other readers' requests are anonymous: the page knows only which ids are its own
(widgets/common/sharing.py), never whose the others are.
"""
from __future__ import annotations

import panel as pn

from widgets.common import EngineGate, esc, example, sandbox, html_pane, label_html, load_example, measured, register
from widgets.common.gate import in_session
from widgets.common.sharing import ADMISSION, SEATS, reader_of

REFRESH_MS = 250
MAX_CHIPS = 48               # a batch wider than this shows its first chips and "+N more"


def dashboard_view(stats, mine: set[str] | frozenset = frozenset(), queued: int = 0) -> dict:
    """What the dashboard draws, from one LoopStats: plain numbers (also the saved first example)."""
    last = stats.last
    batch = [{"yours": e.request_id in mine, "kind": e.kind, "tokens": e.num_tokens,
              "cached": e.num_computed_before} for e in (last.entries if last else [])]
    used = stats.num_blocks - stats.num_free_blocks
    return {"step": last.step if last else None, "batch": batch,
            "step_tokens": last.num_batched_tokens if last else 0, "budget": stats.budget,
            "kv_used": used, "kv_blocks": stats.num_blocks, "running": stats.num_running,
            "waiting": stats.num_waiting, "swapped": stats.num_swapped, "queued": queued,
            "preemptions": stats.preemptions, "steps": stats.steps, "generated": stats.generated,
            "hit_rate": (stats.prefix_hit_tokens / stats.prefix_query_tokens if stats.prefix_query_tokens
                         else None),
            "tokens_per_s": stats.tokens_per_s}


@example("engine_dashboard")
def dashboard_example(llm) -> dict:
    """Four requests in a private engine, two steps in: one long prompt being prefilled in chunks
    beside three short ones, the first of them "yours"."""
    from engine import LoopStats, SamplingParams
    eng = sandbox(llm, num_kv_blocks=48, max_num_seqs=4, max_num_batched_tokens=48)
    words = "The quick brown fox jumps over the lazy dog while the engine batches every request. "
    prompts = {"a": "What is the capital of France?", "b": "Name a colour.", "c": "Count to three.",
               "d": words * 6}
    for rid, text in prompts.items():
        eng.add_request(rid, llm.tokenizer.encode_ids(text), SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    stats = LoopStats()
    for _ in range(2):
        stats = LoopStats.of(eng, stats, generated=len(eng.step()))
    view = dashboard_view(stats, mine={"a"})
    view["tokens_per_s"] = None          # a rate needs a clock: the live view measures it
    eng.free()
    return view


def _bar(used: int, total: int, name: str, tip: str) -> str:
    share = used / total if total else 0.0
    return (f'<div class="dash-meter" tabindex="0" data-link="dash-{name}" data-tip="{esc(tip)}" title="{esc(tip)}">'
            f'<span class="dash-meter-name">{name}</span>'
            f'<span class="dash-track"><span class="dash-fill" style="width:{100 * share:.1f}%"></span></span>'
            f'<span class="dash-meter-num">{used:,} of {total:,}</span></div>')


def dashboard_html(view: dict, label: str) -> str:
    chips = []
    for i, e in enumerate(view["batch"][:MAX_CHIPS]):
        who = "you" if e["yours"] else "reader"
        tip = (f"{'your request' if e['yours'] else 'another reader’s request'}: {e['kind']} of "
               f"{e['tokens']} token{'s' * (e['tokens'] != 1)}, {e['cached']} already in its KV cache")
        chips.append(f'<span class="dash-chip dash-{"yours" if e["yours"] else "other"} dash-{esc(e["kind"])}" '
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


class EngineDashboard(pn.viewable.Viewer):
    def __init__(self, engine, **params):
        super().__init__(**params)
        saved = load_example("engine_dashboard")
        self._reader = reader_of(pn.state.curdoc)
        first = dashboard_html(saved.data, saved.label) if saved else ""
        self._out = html_pane(first, ["dash-pane"])
        self._seen = None
        title = html_pane('<p class="w-title"><b>Live · the shared engine</b> — every reader of this site is '
                          "served by one engine. Each step's batch appears here: your requests among other "
                          "readers' (anonymous).</p>")
        self.gate = EngineGate(engine, self._live, example=saved, live_text="{model} on {device}, every step")
        self._layout = pn.Column(title, self.gate.pane, self._out, sizing_mode="stretch_width",
                                 css_classes=["dash-widget"])
        self.gate.start()

    def __panel__(self):
        return self._layout

    def _live(self, llm) -> None:
        self.refresh()
        if in_session():
            pn.state.add_periodic_callback(self.refresh, period=REFRESH_MS)

    def refresh(self) -> None:
        """Repaint if a newer step (or command) has been published: one attribute read otherwise."""
        llm = self.gate.llm
        stats = llm.stats
        key = (stats.updated_s, ADMISSION.waiting, frozenset(self._reader.requests))
        if key == self._seen:
            return
        self._seen = key
        view = dashboard_view(stats, self._reader.requests, ADMISSION.waiting)
        self._out.object = dashboard_html(view, measured(llm.device_name) + ", live")


def bench(llm) -> dict:
    """Server milliseconds of one repaint per open page (every REFRESH_MS while the engine steps): read the
    shared snapshot, build the view, render the HTML. The engine publishes the snapshot once per step."""
    from engine import SamplingParams
    from widgets.common.timing import median_ms
    llm.generate(["a batch", "for the snapshot"], SamplingParams(max_tokens=4))   # a last step with a batch

    def repaint():
        return dashboard_html(dashboard_view(llm.stats, {"a"}, ADMISSION.waiting), measured(llm.device_name))
    return {"repaint_ms": median_ms(repaint, repeat=20)}


@register("engine_dashboard")
def make_engine_dashboard(engine, **args) -> EngineDashboard:
    return EngineDashboard(engine, **args)
