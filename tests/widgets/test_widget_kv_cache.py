"""The KV-cache stepper (chapter 12) against the private engine it drives: block tables, slots, bytes,
the K/V in the cache, and the recomputation it is timed against."""
from __future__ import annotations

import time

import pytest

pn = pytest.importorskip("panel")

from widgets.common.examples import compute_example, load_example  # noqa: E402
from widgets.common.testing import LoadedEngine, same  # noqa: E402
from widgets.kv_cache.widget import KVCacheWidget, kv_rows  # noqa: E402
from widgets.kv_cache.compute import KVStepper  # noqa: E402
from widgets.kv_cache.view import bytes_html, view_dict  # noqa: E402

PROMPT = "One token at a time, the cache grows by exactly one slot per step."



@pytest.fixture(scope="module")
def stepped(llm):
    """A prompt that fills most of a block, then enough steps to cross into the next one."""
    stepper = KVStepper(llm, PROMPT)
    views = [stepper.step() for _ in range(6)]
    tables = [stepper.engine.allocator_state().tables["kv"]]   # read straight from the allocator now
    yield stepper, views, tables
    stepper.close()


def test_saved_example_is_fresh(llm):
    saved, fresh = load_example("kv-cache").data, compute_example("kv-cache", llm)   # computed once
    diffs = same(saved, fresh, ignore=frozenset({"forward_ms", "recompute_ms", "new_k", "new_v"}))
    assert not diffs, "run `python -m widgets.examples kv-cache`:\n" + "\n".join(diffs[:20])
    for key in ("new_k", "new_v"):                           # the drawn K/V: two decimals, as saved
        assert abs(kv_rows(saved["views"][-1][key]) - kv_rows(fresh["views"][-1][key])).max() <= 0.011


def test_every_tokens_block_and_slot_is_the_engines_block_table(llm, stepped):
    stepper, views, (table,) = stepped
    bs = stepper.engine.allocator_state().block_size
    last = views[-1]
    assert last.num_cached > bs and len(table) == 2           # the steps crossed into a second block
    assert last.block_table == table
    assert last.slots == [(table[p // bs], p % bs) for p in range(last.num_cached)]
    for v in views:                                           # each view: the table as it was at that step
        assert v.slots == [(v.block_table[p // bs], p % bs) for p in range(v.num_cached)]
        assert v.block_table == table[:len(v.block_table)] and len(v.block_table) == -(-v.num_cached // bs)


def test_the_cache_holds_each_prompt_tokens_real_k_and_v_at_that_slot(llm, stepped):
    stepper, views, _ = stepped
    ref = llm.inspect(PROMPT)                                 # the unpaged reference pass
    prompt = views[0]
    assert prompt.token_ids == ref.token_ids
    for layer in (0, 17, 29):
        k_cache, v_cache = stepper.engine.kv_cache.layer(layer)
        # Two float32 passes over the same tokens (paged and unpaged) may sum in other orders: each layer
        # adds a few eps of the activations' scale. 1e-4 of the layer's largest |K| (|V|) is ~800 eps of that
        # scale; a token in the wrong slot or rotated for the wrong position is off by whole units.
        k_tol, v_tol = (1e-4 * t[layer].abs().max().item() for t in (ref.k, ref.v))
        for p, (block, offset) in enumerate(prompt.slots):
            assert k_cache[block, offset].float().allclose(ref.k[layer, p].float(), rtol=0, atol=k_tol)
            assert v_cache[block, offset].float().allclose(ref.v[layer, p].float(), rtol=0, atol=v_tol)
    newest = prompt.slots[-1]
    k_cache, _ = stepper.engine.kv_cache.layer(29)
    assert prompt.new_k[29] == pytest.approx(k_cache[newest].flatten().tolist(), abs=1e-6)


def test_each_decode_step_adds_kv_bytes_per_token(llm, stepped):
    _, views, _ = stepped
    cfg = llm.config
    for before, v in zip(views, views[1:]):
        per_token = cfg.kv_bytes_per_token(v.bytes_per_value)
        assert v.new_positions == [before.num_cached] and v.num_cached == before.num_cached + 1
        written = 2 * len(v.new_k) * len(v.new_k[0]) * v.bytes_per_value       # K and V, every layer and head
        assert written == per_token == 2 * 30 * 3 * 64 * 4
        assert f"This step wrote <b class=\"kv-added\">{per_token:,} B</b>" in bytes_html(view_dict(v), cfg)
    assert f"{views[0].num_cached * cfg.kv_bytes_per_token(4):,}" in bytes_html(view_dict(views[0]), cfg).replace(
        "B</b>", "")


def test_recomputing_picks_the_same_token_and_the_stepper_stops(llm, stepped, monkeypatch):
    _, views, _ = stepped
    assert all(v.recompute_token == v.next_token[0] and v.recompute_ms > 0 for v in views[1:])
    assert [v.token_ids[-1] for v in views[1:]] == [v.next_token[0] for v in views[:-1]]   # fed back in
    import widgets.kv_cache.compute
    monkeypatch.setattr(widgets.kv_cache.compute, "MAX_STEPS", 3)   # the stop, without 48 steps of CPU time
    short = KVStepper(llm, "Hi")
    for _ in range(3 + 1):
        short.step()
    assert short.done
    with pytest.raises(ValueError):
        short.step()
    short.close()
    assert short.engine.num_free_blocks() == short.engine.allocator_state().num_blocks


def test_widget_prefills_on_ready_and_queues_steps(llm):
    w = KVCacheWidget(LoadedEngine())
    assert "block table" in w._blocks.object and "recorded on" in w._time.object   # the saved example
    w = KVCacheWidget(LoadedEngine(llm), prompt="<img src=x onerror=alert(1)>")
    assert w.jobs.wait_idle(60) and w._stepper is not None
    assert "&lt;" in w._blocks.object and "error" in w._blocks.object and "<img" not in w._blocks.object
    w._request_step()
    w._request_step()
    assert w.jobs.wait_idle(60)
    deadline = time.monotonic() + 120
    while (w.jobs.busy or len(w._stepper.views) < 3) and time.monotonic() < deadline:
        assert w.jobs.wait_idle(60)                          # the second press may start a second job
    assert len(w._views) == 3 and "Step 2" in w._time.object
    w._box.value = "a1 " * 150                                 # over both limits: characters and tokens
    w._start()
    assert w.jobs.wait_idle(60) and "first 96 tokens" in w.notes.object and "300 characters" in w.notes.object
    assert w._views[-1]["num_cached"] == 96
    w.close()


def test_a_step_says_which_half_runs_and_what_is_queued(llm):
    """Honest waits (issue 30 item 3): a step is one token, yet seconds on a busy CPU (it is timed
    against recomputing the whole sequence). The notes say which step and half runs, then clear."""
    from widgets.kv_cache.view import step_progress_text
    w = KVCacheWidget(LoadedEngine(llm))
    assert w.jobs.wait_idle(60) and w._stepper is not None and "kv-progress" not in w.notes.object
    said = []
    say = w.say
    w.say = lambda *notes, progress="": (said.append(progress), say(*notes, progress=progress))
    tokens = w._views[-1]["num_cached"]
    w._request_step()
    deadline = time.monotonic() + 120
    while (w.jobs.busy or len(w._stepper.views) < 2) and time.monotonic() < deadline:
        assert w.jobs.wait_idle(60)
    shown = [p for p in said if p]
    assert shown[:2] == [f"Step 1: decoding token {tokens + 1} with the KV cache…",
                         f"Step 1: recomputing all {tokens + 1} tokens without a cache, to compare…"]
    assert said[-1] == "" and "kv-progress" not in w.notes.object                    # cleared when shown
    w.close()
    p = {"step": 7, "tokens": 40, "stage": "recompute", "queued": 2, "others": 1}
    assert step_progress_text(p) == ("Step 7: recomputing all 41 tokens without a cache, to compare (2 more steps "
                                     "queued)… The server is also generating for another request, so this run is "
                                     "slower than usual.")
    assert step_progress_text(None) == ""
