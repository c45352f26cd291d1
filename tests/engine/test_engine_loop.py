"""EngineLoop: many threads streaming through one engine, batched together, aborts on early exit."""
from __future__ import annotations

import threading

import pytest

from engine.config import EngineConfig
from engine.engine_loop import EngineLoop
from engine.llm_engine import LLMEngine
from engine.model.llama import Llama
from engine.unpaged import unpaged_generate
from engine.sampling_params import SamplingParams
from tests.helpers.tiny import TINY

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def loop():
    model = Llama.random(TINY, seed=6).eval()
    loop = EngineLoop(LLMEngine(model, EngineConfig(block_size=8, num_kv_blocks=64)))
    yield loop
    loop.close()


def test_concurrent_streams_are_batched_and_exact(loop):
    prompts = [list(range(i, i + 20 + 9 * i)) for i in range(6)]
    results: dict[int, list[int]] = {}

    def consume(i):
        results[i] = [ev.token_id for ev in loop.stream(prompts[i], GREEDY)]

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    model = loop.engine.model
    assert [results[i] for i in range(6)] == [unpaged_generate(model, p, 12) for p in prompts]
    assert max(len(r.entries) for r in loop.engine.trace) > 1          # they shared steps
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_stopping_early_aborts_and_frees_blocks(loop):
    stream = loop.stream(list(range(40)), SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))
    first = [next(stream) for _ in range(3)]
    assert not first[-1].finished
    stream.close()                                   # the reader went away
    assert not loop.engine.has_unfinished()
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_generate_returns_outputs_in_prompt_order_with_n_samples(loop):
    params = SamplingParams(temperature=1.0, n=2, max_tokens=5, seed=3, ignore_eos=True)
    outs = loop.generate([(list(range(30)), "a", params), (list(range(50, 60)), "b", params)])
    assert [o.prompt for o in outs] == ["a", "b"] and [[c.index for c in o.outputs] for o in outs] == [[0, 1]] * 2
    assert all(len(c.token_ids) == 5 for o in outs for c in o.outputs) and all(o.metrics.ttft_s > 0 for o in outs)
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_a_refused_prompt_in_generate_leaves_nothing_running(loop):
    """The limits are checked as each prompt is added: the ones accepted before the refusal are aborted."""
    too_long = [i % 200 for i in range(loop.engine.max_model_len)]
    with pytest.raises(ValueError, match="exceeds the engine's context"):
        loop.generate([(list(range(10)), "fits", GREEDY), (too_long, "does not", GREEDY)])
    assert loop.read(lambda: not loop.engine.has_unfinished())
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_a_failing_step_fails_the_open_requests_and_the_loop_keeps_serving(loop, monkeypatch):
    real_step = loop.engine.step
    monkeypatch.setattr(loop.engine, "step", lambda: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(RuntimeError):
        list(loop.stream(list(range(10)), GREEDY))
    monkeypatch.setattr(loop.engine, "step", real_step)
    assert len(list(loop.stream(list(range(10)), GREEDY))) == 12
    assert loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_state_can_be_read_between_steps_while_streams_run(loop):
    # long enough (400 steps) that the request is surely still running when the state is read
    stream = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    next(stream)
    state = loop.read(loop.engine.allocator_state)
    owned = [b for b in state.blocks if b.ref_count]
    assert owned and all(b.owners for b in owned)
    stream.close()
    assert loop.read(loop.engine.allocator_state).num_free == loop.engine.block_manager.num_blocks


def test_a_new_request_joins_a_running_batch_instead_of_waiting_for_it(loop):
    """The loop must not starve callers: a request submitted mid-stream of a long one joins the next
    step and finishes first, instead of waiting until the long one is done."""
    long = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    next(long)
    short = [ev.token_id for ev in loop.stream(list(range(5, 25)), GREEDY)]
    assert len(short) == GREEDY.max_tokens
    assert loop.read(lambda: loop.engine.has_unfinished())   # the long request is still running
    long.close()


def test_a_step_fault_fails_only_the_requests_it_was_running(loop, monkeypatch):
    # One request runs; a second waits (max_num_seqs=1). The step fails: the running request's caller
    # gets an error, the waiting one was never touched and still gets its full, exact output.
    loop.engine.scheduler.config.max_num_seqs = 1
    first = loop.stream(list(range(12)), SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True))
    next(first)
    second_prompt = list(range(30, 45))
    second = loop.stream(second_prompt, GREEDY)
    real_step = loop.engine.step
    calls = []

    def faulty():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("injected fault")
        return real_step()
    loop.read(lambda: monkeypatch.setattr(loop.engine, "step", faulty))
    with pytest.raises(RuntimeError, match="engine step failed"):
        list(first)
    assert [ev.token_id for ev in second] == unpaged_generate(loop.engine.model, second_prompt, 12)
    assert loop.alive and loop.engine.num_free_blocks() == loop.engine.block_manager.num_blocks


def test_a_base_exception_in_a_step_is_reported_not_a_hang(loop, monkeypatch):
    monkeypatch.setattr(loop.engine, "step", lambda: (_ for _ in ()).throw(SystemExit("injected")))
    errors = []

    def consume():
        try:
            list(loop.stream(list(range(10)), GREEDY))
        except RuntimeError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=consume)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive() and errors                       # the caller was told, not left waiting
    assert not loop.alive and "SystemExit" in loop.failure
    with pytest.raises(RuntimeError, match="engine thread has stopped"):
        next(loop.stream(list(range(5)), GREEDY))            # later callers fail at once


def test_stats_follow_the_steps_and_see_blocks_freed_by_an_abort(loop):
    stream = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    for _ in range(3):
        next(stream)
    stats = loop.stats
    assert stats.steps >= 3 and stats.generated >= 3 and stats.tokens >= 30 + 2
    assert stats.num_free_blocks < stats.num_blocks and stats.last is not None and stats.last.entries
    stream.close()                                           # an abort runs no step: stats still refresh
    assert loop.stats.num_free_blocks == loop.stats.num_blocks and loop.stats.num_running == 0


def test_interpreter_exit_during_generation_is_clean(tmp_path):
    # sys.exit (what `panel serve` does on SIGTERM) while threads stream: unless every loop stops between
    # two steps first, torch's thread pool is torn down under a running forward pass and the process
    # aborts (SIGABRT, code 134).
    import subprocess
    import sys
    from pathlib import Path
    script = tmp_path / "exit_mid_generation.py"
    script.write_text(
        "import sys, threading\n"
        "from engine.config import EngineConfig\nfrom engine.engine_loop import EngineLoop\n"
        "from engine.llm_engine import LLMEngine\nfrom engine.model.llama import Llama\n"
        "from engine.sampling_params import SamplingParams\nfrom tests.helpers.tiny import TINY\n"
        "loop = EngineLoop(LLMEngine(Llama.random(TINY, seed=1).eval(), EngineConfig(block_size=8, num_kv_blocks=64)))\n"
        "started = threading.Barrier(4)\n"
        "def go():\n"
        "    s = loop.stream(list(range(20)), SamplingParams(max_tokens=400, ignore_eos=True))\n"
        "    next(s); started.wait()\n"
        "    for _ in s: pass\n"
        "for _ in range(3): threading.Thread(target=go, daemon=True).start()\n"
        "started.wait()\nsys.exit(0)\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminate called" not in proc.stderr


def test_abort_soon_ends_the_stream_and_frees_blocks_without_waiting(loop):
    stream = loop.stream(list(range(30)), SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True))
    rid = next(stream).request_id
    loop.abort_soon(rid)                                     # returns at once (an event loop may call it)
    rest = list(stream)                                      # the stream just ends, no error
    assert len(rest) < 399
    assert loop.read(lambda: loop.engine.num_free_blocks()) == loop.engine.block_manager.num_blocks
