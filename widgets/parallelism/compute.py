"""The real run behind the chapter-19 widget: the reader's prompt on several CPU processes, and what
crossed between them, step by step (no Panel, no HTML: view.py draws it).

    run_split(llm, prompt, "tp", 3)   ->  {"text": ..., "single_text": ..., "same_text": True,
                                           "steps": [{kind, tokens, all_reduce: {...}, ranks: [...]}], ...}

`LLM(tensor_parallel_size=3)` makes this server process rank 0 (scheduler + its shard) and starts
two worker processes; they are ended before the function returns, whatever happens. A server runs
one split at a time (torch.distributed keeps one process group per process, and two cores have no
room for more): widgets/common/sharing.py's PARALLEL_RUNS queues the others, each told its place.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from engine import LLM, ModelConfig, SamplingParams, ideal_bubble, load_recorded, parallel_layout

MAX_PROCESSES = 3            # what one reader may start on the serving machine
MAX_NEW_TOKENS = 32
MODES = {"tp": "tensor parallel", "pp": "pipeline parallel"}
STAGES = 3                   # a run's stages, each told to the reader as "step k of 3" while it goes on
_last_startup_s: float | None = None     # how long the processes took to start last time (an estimate)


# -- the split ------------------------------------------------------------------------------------------
def config_of(llm):
    """The loaded model's config, or SmolLM2-135M's (the engine's default) before it has loaded."""
    return llm.config if llm is not None else ModelConfig()


def layout_for(cfg, mode: str, size: int) -> dict:
    """Where the split puts every matrix (tp) or layer (pp): the engine's parallel_layout, which raises
    ValueError for a size the heads (or layers) do not divide into."""
    return parallel_layout(cfg, *((size, 1) if mode == "tp" else (1, size)))


RECORDED = ("parallel", "parallel-smollm2")     # Llama-3-8B's shapes, then SmolLM2's


def recorded_runs() -> list[dict]:
    """What the two-GPU runs recorded (`python -m engine bench parallel ... --record NAME`), each file
    with its device, link, NCCL version and model shape; [] when none shipped."""
    return [d for d in (load_recorded(name) for name in RECORDED) if d is not None]


def sizes_for(mode: str) -> list[int]:
    return [2, 3, 9] if mode == "tp" else [2, 3, 5, 6]


def check_size(cfg, mode: str, size: int) -> str | None:
    """Why this split cannot run here (the engine's own refusal, or the server's limit), or None."""
    try:
        layout_for(cfg, mode, size)
    except ValueError as e:
        return str(e)
    if size > MAX_PROCESSES:
        return (f"{size} processes are more than this server starts for one reader (the limit is "
                f"{MAX_PROCESSES}); the split below is what they would hold. On your own machine: "
                f"python -m engine generate --{mode} {size} \"…\"")
    return None


def summarize_step(rec, hidden: int, value_bytes: int) -> dict:
    """One step of the trace, as the widget draws it (times relative to the step's first work)."""
    p = rec.parallel
    spans = [i for r in p.ranks for i in r.intervals]
    t0 = min((i.start_s for i in spans), default=p.start_s)
    kinds = {e.kind for e in rec.entries}
    ranks = [{"rank": r.rank, "stage": r.stage, "tp_rank": r.tp_rank,
              "busy": [[i.micro_batch, i.start_s - t0, i.end_s - t0] for i in r.intervals],
              "all_reduce": _counts(r.comm["all_reduce"]), "send": _counts(r.comm["send"]),
              "recv": _counts(r.comm["recv"])} for r in p.ranks]
    return {"step": rec.step, "kind": "prefill" if "prefill" in kinds else "decode",
            "tokens": rec.num_batched_tokens, "micro_batches": list(p.micro_batch_tokens),
            "all_reduce": _counts(p.all_reduce),
            "all_reduce_bytes_each": rec.num_batched_tokens * hidden * value_bytes,
            "handoff_bytes": [n * hidden * value_bytes for n in p.micro_batch_tokens] if p.pipeline_parallel_size > 1 else [],
            "records": _counts(p.ranks[0].comm["control"]),
            "window_s": p.window_s, "bubble": p.bubble,
            "ideal_bubble": ideal_bubble(p.pipeline_parallel_size, len(p.micro_batch_tokens))
            if p.pipeline_parallel_size > 1 else 0.0, "ranks": ranks}


def _counts(c) -> dict:
    return {"calls": c.calls, "bytes": c.bytes, "seconds": c.seconds}


@contextmanager
def ticking(progress, message, every_s: float = 1.0):
    """Around a call that reports nothing while it works (starting processes): ``progress(message(s))``
    now and then every ``every_s`` from a thread of its own, s the seconds so far, so the reader sees
    the wait move instead of a frozen "Computing…"."""
    stop, t0 = threading.Event(), time.perf_counter()
    progress(message(0.0))

    def tick() -> None:
        while not stop.wait(every_s):
            progress(message(time.perf_counter() - t0))
    thread = threading.Thread(target=tick, name="parallelism-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def stage_text(stage: int, what: str) -> str:
    return f"Step {stage} of {STAGES} · {what}"


def run_split(llm, prompt: str, mode: str, size: int, max_tokens: int = 16, progress=lambda msg: None,
              cancelled=lambda: False) -> dict:
    """Generate greedily with the split on CPU processes and with the shared one-process engine.
    ``progress(message)`` says which of the three stages runs and how far it is: the processes starting
    (seconds so far, beside last time's), then tokens generated on the split, then on one process."""
    global _last_startup_s
    tp, pp = (size, 1) if mode == "tp" else (1, size)
    n = tp * pp
    cfg = llm.engine_config
    before = f" (about {_last_startup_s:.0f} s last time)" if _last_startup_s else ""

    def starting(s: float) -> str:
        return stage_text(1, f"starting {n} processes ({MODES[mode]}) and loading each one's shard of the "
                             f"weights: {s:.0f} s so far{before}")
    started = time.perf_counter()
    with ticking(progress, starting):
        parallel = LLM(model=cfg.model, random_weights=cfg.random_weights, device="cpu", dtype="float32",
                       tensor_parallel_size=tp, pipeline_parallel_size=pp, num_kv_blocks=96, max_model_len=1536,
                       max_num_batched_tokens=1024, enable_prefix_caching=False)
    try:
        startup = _last_startup_s = time.perf_counter() - started
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        text, tokens = "", 0
        if cancelled():                      # the reader left while the processes were starting
            return None
        progress(stage_text(2, f"generating on {n} processes: 0 of up to {max_tokens} tokens"))
        for ev in parallel.stream(prompt, params, chat=True):
            text, tokens = ev.text, tokens + 1
            progress(stage_text(2, f"generating on {n} processes: {tokens} of up to {max_tokens} tokens"))
            if cancelled():
                break
        trace = parallel.trace_since(0)
        device = f"{n} CPU processes (gloo), {parallel.device_name} each"
    finally:
        parallel.close()
    hidden, value_bytes = llm.config.hidden_size, 4           # float32 on the CPU
    # the same prompt on the shared one-process engine, streamed so the reader sees it advance too
    single, done = "", 0
    progress(stage_text(3, f"the same prompt on one process, to compare the texts: 0 of up to {max_tokens} tokens"))
    for ev in llm.stream(prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens), chat=True):
        single, done = ev.text, done + 1
        progress(stage_text(3, f"the same prompt on one process, to compare the texts: {done} of up to "
                               f"{max_tokens} tokens"))
        if cancelled():
            return None
    steps = [summarize_step(r, hidden, value_bytes) for r in trace if r.parallel is not None]
    return {"mode": mode, "size": size, "tp": tp, "pp": pp, "prompt": prompt, "max_tokens": max_tokens,
            "text": text, "tokens": tokens, "single_text": single, "same_text": text == single,
            "steps": steps, "startup_s": startup, "device": device, "hidden": hidden, "value_bytes": value_bytes,
            "num_layers": llm.config.num_layers}
