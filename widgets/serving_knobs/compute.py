"""The engine side of the serving-knobs widget (chapter 20): one synthetic workload served by a
private engine at the reader's settings, boiled down to one point of the throughput/latency frontier.

    Knobs(pattern, max_num_seqs, budget, chunked, caching)
      ─► make_workload(pattern)       the serve-sim patterns (engine/bench/serve_sim.py), lengths × SCALE,
                                      NUM_REQUESTS requests arriving together, random token ids
      ─► serve_workload(sandbox)      the engine steps until every request is done (cancellable)
      ─► point_from(run)              output tokens/s, TTFT and ITL p50/p99, steps, preemptions, hits

    frontier(points, "ttft_p99_ms")   the runs no other run beats on both throughput and latency
"""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from widgets.common.sandboxes import page_sandbox

log = logging.getLogger(__name__)
log.setLevel(logging.INFO)         # `panel serve` shows INFO only for bokeh's loggers; the server log
#                                     should say when a stopped run freed its engine

PATTERNS = {"chat": "chatbot", "summarization": "summarization", "code generation": "codegen", "mixed": "mixed"}
NUM_REQUESTS = 12
SCALE = 0.05                  # serve-sim's lengths × 0.05: summarization prompts of 100–200 tokens, …
SEED = 0
POOL_BLOCKS = 64              # 1,024 tokens of KV cache: summarization fills it, and preemption shows
BLOCK_SIZE = 16
SEQS = (1, 2, 4, 8, 16)
BUDGETS = (32, 64, 128, 256, 512)
LATENCIES = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")


@dataclass(slots=True, frozen=True)
class Knobs:
    pattern: str = "chat"
    max_num_seqs: int = 4
    budget: int = 128
    chunked: bool = True
    caching: bool = True

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS or self.max_num_seqs not in SEQS or self.budget not in BUDGETS:
            raise ValueError(f"pattern one of {list(PATTERNS)}, max_num_seqs one of {SEQS}, budget one of {BUDGETS}")

    def describe(self) -> str:
        return (f"max_num_seqs {self.max_num_seqs} · budget {self.budget} · chunked prefill "
                f"{'on' if self.chunked else 'off'} · prefix caching {'on' if self.caching else 'off'}")


def workload(pattern: str, vocab_size: int | None = None, num_requests: int = NUM_REQUESTS) -> list:
    """The pattern's requests (the same every time: a fixed seed)."""
    from engine import ModelConfig, make_workload
    vocab = vocab_size or ModelConfig().vocab_size
    return make_workload(PATTERNS[pattern], num_requests, SCALE, vocab, seed=SEED)


def lengths(pattern: str, vocab_size: int | None = None) -> list[dict]:
    """ISL and OSL of each request of the pattern (the scatter beside the frontier)."""
    return [{"isl": len(r.prompt_ids), "osl": r.output_len, "kind": r.pattern} for r in workload(pattern, vocab_size)]


def point_from(knobs: Knobs, metrics: dict, budget_used: int, device: str, free_after: int) -> dict:
    """One run as a point: the run's own metrics (serve_workload's, from the engine's outputs)."""
    return {"knobs": asdict(knobs), "label": knobs.describe(), "budget_used": budget_used, "device": device,
            "tokens_per_s": metrics["output_tokens_per_s"],
            "ttft_p50_ms": metrics["ttft_ms"]["p50"], "ttft_p99_ms": metrics["ttft_ms"]["p99"],
            "itl_p50_ms": metrics["itl_ms"]["p50"], "itl_p99_ms": metrics["itl_ms"]["p99"],
            "duration_s": metrics["duration_s"], "steps": metrics["steps"], "preemptions": metrics["preemptions"],
            "hit_rate": metrics["prefix_cache_hit_rate"], "mean_batch": metrics["mean_batch_size"],
            "free_after": free_after, "num_blocks": metrics["num_kv_blocks"]}


@contextmanager
def prepare(llm, knobs: Knobs, num_requests: int | None = None):
    """``with prepare(llm, knobs) as (engine, requests, budget):`` a fresh private engine at `knobs`, owned
    by the reader's page and released at the end of the block (its KV memory goes then, a block left in
    use is logged), the pattern's requests, and the token budget it runs with."""
    requests = workload(knobs.pattern, llm.config.vocab_size, num_requests or NUM_REQUESTS)
    longest = max(len(r.prompt_ids) + r.output_len for r in requests)
    # Without chunking a prompt must fit one step (a preempted one re-prefills its output too), so the
    # engine, like vLLM, needs a budget that holds the longest request whole.
    budget = knobs.budget if knobs.chunked else max(knobs.budget, longest)
    with page_sandbox(llm, "serving-knobs", num_kv_blocks=POOL_BLOCKS, max_num_seqs=knobs.max_num_seqs,
                      block_size=BLOCK_SIZE, max_num_batched_tokens=budget, enable_chunked_prefill=knobs.chunked,
                      enable_prefix_caching=knobs.caching) as engine:
        yield engine, requests, budget


def serve_point(llm, knobs: Knobs, engine, requests: list, budget: int, check=lambda: None,
                progress=lambda p: None) -> dict:
    """Serve `requests` on `engine`; `progress` gets {"steps", "done", "total", "elapsed_s"} after every
    step. Cancelling (check raises) aborts every request: the engine holds no block afterwards."""
    from engine import serve_workload
    start = time.perf_counter()

    def on_step(eng, steps: int) -> None:
        progress({"steps": steps, "done": len(requests) - len(eng.unfinished_request_ids()),
                  "total": len(requests), "elapsed_s": time.perf_counter() - start})
    try:
        run = serve_workload(engine, requests, check=check, on_step=on_step)
    except BaseException:     # Stop, a newer run, or the reader left: serve_workload aborted every request
        log.info("serving-knobs: run stopped (%s, max_num_seqs %d); its private engine has %d of %d blocks free "
                 "and %d requests left", knobs.pattern, knobs.max_num_seqs, engine.num_free_blocks(),
                 engine.allocator_state().num_blocks,
                 len(engine.unfinished_request_ids()))
        raise
    return point_from(knobs, run.metrics, budget, llm.device_name, engine.num_free_blocks())


def run_point(llm, knobs: Knobs, check=lambda: None, progress=lambda p: None, num_requests: int | None = None) -> dict:
    """One run at `knobs` in a fresh private engine, as a point (see prepare and serve_point)."""
    with prepare(llm, knobs, num_requests) as (engine, requests, budget):
        return serve_point(llm, knobs, engine, requests, budget, check, progress)


def frontier(points: list[dict], latency: str) -> list[dict]:
    """The points no other point beats on both counts (more tokens/s and less latency), by throughput."""
    best = []
    for p in sorted(points, key=lambda p: (-p["tokens_per_s"], p[latency])):
        if p[latency] is not None and (not best or p[latency] < best[-1][latency]):
            best.append(p)
    return best[::-1]
